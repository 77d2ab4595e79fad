"""AGO's acyclic weighted partitioning (AGO §IV-B): Definitions 1-3, Theorem 1, Algorithm 1.

Contract: `cluster(nodes, edges, weight, threshold)` partitions a DAG — any hashable node ids,
edges (u, v) meaning u before v — into disjoint groups that cover every node once, each
weighing less than `threshold` unless it is a single node, such that the quotient graph (one
vertex per group) has no cycle (an *n-way acyclic partition*, Def. 1). `partition_graph(graph)`
does it for a `Graph`'s nodes with the op weights of partition/weights.py and returns a typed
`Partition`; `partition_stats` gives AGO's statistics of one.

Algorithm 1 as the paper gives it: every node starts as a hyper node in the candidate set;
repeatedly the heaviest candidate v is taken, and among its affix set AS_v — the hyper nodes
adjacent to it whose topological stage (Def. 2: the longest path from a root, roots at 1)
differs from v's by exactly one (Def. 3) — the lightest u; if w_v + w_u < threshold the two
become one hyper node, which goes back into the candidates, else v leaves them. Stages are
recomputed on the quotient graph after each merge (line 12). Theorem 1: a u adjacent to v with
|ts_u − ts_v| = 1 has no path to or from v through a third node (it would make the difference
at least 2), so merging them cannot close a cycle; by induction the quotient stays a DAG.

Choices where the paper is silent: ties between equally heavy candidates go to the one first in
the nodes' order, ties between equally light affix nodes likewise; u need not itself still be a
candidate (a node that could not grow may still be absorbed); the default threshold is
`config.PARTITION_THRESHOLD` measurements (its reason is there).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

from woodpecker.config import PARTITION_THRESHOLD
from woodpecker.ir.graph import Graph, Node
from woodpecker.partition.weights import op_weight


def topological_stages(vertices: Iterable[Hashable],
                       succ: dict[Hashable, set[Hashable]]) -> dict[Hashable, int]:
    """Def. 2: each vertex's longest path (in vertices) from a vertex with no predecessor,
    which has stage 1. `succ` must describe a DAG; raises ValueError on a cycle."""
    vertices = list(vertices)
    indeg = {v: 0 for v in vertices}
    for v in vertices:
        for w in succ.get(v, ()):
            indeg[w] += 1
    stage = {v: 1 for v in vertices}
    ready = [v for v in vertices if indeg[v] == 0]
    seen = 0
    while ready:
        v = ready.pop()
        seen += 1
        for w in succ.get(v, ()):
            stage[w] = max(stage[w], stage[v] + 1)
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    if seen != len(vertices):
        raise ValueError("the graph has a cycle")
    return stage


def cluster(nodes: Sequence[Hashable], edges: Iterable[tuple[Hashable, Hashable]],
            weight: dict[Hashable, float], threshold: float) -> list[list[Hashable]]:
    """Algorithm 1; returns the groups, each in the nodes' order, ordered by first node."""
    order = {n: i for i, n in enumerate(nodes)}
    group = {n: i for i, n in enumerate(nodes)}          # hyper node id of each node
    members = {i: [n] for i, n in enumerate(nodes)}
    w = {i: float(weight[n]) for i, n in enumerate(nodes)}
    succ: dict[int, set[int]] = {i: set() for i in members}
    pred: dict[int, set[int]] = {i: set() for i in members}
    for u, v in edges:
        a, b = group[u], group[v]
        if a != b:
            succ[a].add(b)
            pred[b].add(a)
    stage = topological_stages(members, succ)
    cand = set(members)
    while cand:
        v = max(cand, key=lambda i: (w[i], -i))                               # line 5
        affix = [u for u in succ[v] | pred[v] if abs(stage[u] - stage[v]) == 1]  # Def. 3
        u = min(affix, key=lambda i: (w[i], i), default=None)
        if u is None or w[v] + w[u] >= threshold:
            cand.discard(v)                                                    # line 10
            continue
        members[v] += members.pop(u)                                           # line 7
        w[v] += w.pop(u)
        for x in succ.pop(u):
            pred[x].discard(u)
            if x != v:
                succ[v].add(x)
                pred[x].add(v)
        for x in pred.pop(u):
            succ[x].discard(u)
            if x != v:
                pred[v].add(x)
                succ[x].add(v)
        succ[v].discard(v)
        pred[v].discard(v)
        cand.discard(u)                                                        # line 8
        stage = topological_stages(members, succ)                              # line 12
    groups = [sorted(m, key=order.get) for m in members.values()]
    return sorted(groups, key=lambda g: order[g[0]])


def is_acyclic_partition(nodes: Sequence[Hashable], edges: Iterable[tuple[Hashable, Hashable]],
                         groups: Sequence[Sequence[Hashable]]) -> bool:
    """Whether `groups` cover `nodes` once each and their quotient graph is a DAG (Def. 1)."""
    of = {}
    for i, g in enumerate(groups):
        for n in g:
            if n in of:
                return False
            of[n] = i
    if set(of) != set(nodes):
        return False
    succ: dict[int, set[int]] = {i: set() for i in range(len(groups))}
    for u, v in edges:
        if of[u] != of[v]:
            succ[of[u]].add(of[v])
    try:
        topological_stages(range(len(groups)), succ)
    except ValueError:
        return False
    return True


# -- on a Graph ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Subgraph:
    nodes: tuple[str, ...]          # node names, in the graph's order
    weight: float                   # Eq. (1) summed over them, in measurements


@dataclass(frozen=True)
class Partition:
    subgraphs: tuple[Subgraph, ...]
    threshold: float

    def of(self) -> dict[str, int]:
        """The index of each node's subgraph, by node name."""
        return {n: i for i, s in enumerate(self.subgraphs) for n in s.nodes}


@dataclass(frozen=True)
class PartitionStats:
    """AGO's partition statistics: how many subgraphs, how heavy, how even (Jain's index
    (Σw)² / (n Σw²): 1 when all weigh the same, 1/n when one holds everything)."""
    subgraphs: int
    mean_weight: float
    median_weight: float
    jain: float


def graph_edges(graph: Graph) -> list[tuple[str, str]]:
    """(producer, consumer) node-name pairs of `graph`, one per value read."""
    out = []
    for n in graph.nodes:
        for v in n.inputs:
            if v is not None and v.producer is not None:
                out.append((v.producer.name, n.name))
    return out


def partition_graph(graph: Graph, threshold: float = PARTITION_THRESHOLD,
                    weigh: Callable[[Node], float] = op_weight) -> Partition:
    names = [n.name for n in graph.nodes]
    weights = {n.name: weigh(n) for n in graph.nodes}
    groups = cluster(names, graph_edges(graph), weights, threshold)
    return Partition(tuple(Subgraph(tuple(g), sum(weights[n] for n in g)) for g in groups),
                     threshold)


def singletons(graph: Graph, weigh: Callable[[Node], float] = op_weight) -> Partition:
    """One operator per subgraph: what AGO compares its partition with."""
    return Partition(tuple(Subgraph((n.name,), weigh(n)) for n in graph.nodes), 0.0)


def partition_stats(p: Partition) -> PartitionStats:
    ws = [s.weight for s in p.subgraphs]
    if not ws:
        return PartitionStats(0, 0.0, 0.0, 1.0)
    sq = sum(x * x for x in ws)
    return PartitionStats(len(ws), statistics.fmean(ws), statistics.median(ws),
                          sum(ws) ** 2 / (len(ws) * sq) if sq else 1.0)
