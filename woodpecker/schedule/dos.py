"""DOS, the Deep Optimal Scheduler ("DOS: Accelerate DNN Inference by Inter-Operator
Parallelism", §3-4, Algorithm 1): the
stages of an inter-operator parallel schedule, found by dynamic programming over the sets of
operators still to run.

Contract: a schedule of a DAG is a sequence of stages — disjoint sets of nodes covering every
node once, each edge (u, v) going from an earlier stage to a later one — each run with the
strategy its cost names. `optimal_schedule(nodes, edges, stage_cost)` returns one of least
total cost, where `stage_cost(stage)` gives (cost, strategy) of running the frozenset `stage`
as one stage (DOS §4.1: the cheaper of the measured concurrent and merged latencies; a stage
of one node is that node alone), and a schedule's cost is the sum of its stages' costs (DOS's
assumption that a stage's latency does not depend on the ones before). `greedy_schedule`
(every ready node in one stage: the "most intuitive" schedule DOS compares with) and
`sequential_schedule` (one node per stage, in the given order) are the baselines.

Algorithm 1 as the paper gives it: for the set S of nodes still to schedule, the last stage is
a non-empty subset S'' of S' — the nodes of S none of whose successors are in S — so
cost[S] = min over S'' of cost[S − S''] + cost(S''), cost[∅] = 0, memoized on S (a bitmask
here), the argmin recorded to rebuild the stages. Choice where the paper is silent:
`max_stage` caps a stage's size (the subsets enumerated per state are then those of at most
that many nodes), so that graphs with wide ready sets stay tractable; DOS's other remedy,
splitting the graph into blocks scheduled one after another, is the caller's (`blocks`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache

StageCost = Callable[[frozenset], "tuple[float, str]"]


@dataclass(frozen=True)
class Stage:
    nodes: frozenset
    strategy: str          # e.g. "sequential" (one node), "concurrent", "merge"
    cost: float


@dataclass(frozen=True)
class Schedule:
    stages: tuple[Stage, ...]

    @property
    def cost(self) -> float:
        return sum(s.cost for s in self.stages)

    def is_valid(self, nodes: Iterable[Hashable], edges: Iterable[tuple]) -> bool:
        """Every node in exactly one stage and every edge going forward."""
        stage_of: dict = {}
        for i, s in enumerate(self.stages):
            for n in s.nodes:
                if n in stage_of:
                    return False
                stage_of[n] = i
        if set(stage_of) != set(nodes):
            return False
        return all(stage_of[u] < stage_of[v] for u, v in edges)


def _index(nodes: Sequence[Hashable], edges: Iterable[tuple]) -> tuple[list[int], list[int]]:
    """Per node (by position), the bitmasks of its predecessors and successors."""
    pos = {n: i for i, n in enumerate(nodes)}
    pred, succ = [0] * len(nodes), [0] * len(nodes)
    for u, v in edges:
        pred[pos[v]] |= 1 << pos[u]
        succ[pos[u]] |= 1 << pos[v]
    return pred, succ


def _members(mask: int, nodes: Sequence[Hashable]) -> frozenset:
    return frozenset(nodes[i] for i in range(len(nodes)) if mask >> i & 1)


def _subsets(bits: list[int], max_size: int | None):
    """Non-empty subsets of the given bits (as masks), at most `max_size` of them each."""
    top = len(bits) if max_size is None else min(max_size, len(bits))
    for k in range(1, top + 1):
        for combo in itertools.combinations(bits, k):
            yield sum(combo)


def optimal_schedule(nodes: Sequence[Hashable], edges: Iterable[tuple], stage_cost: StageCost,
                     max_stage: int | None = None) -> Schedule:
    """DOS Algorithm 1: a schedule of least total stage cost (with stages of at most
    `max_stage` nodes when given)."""
    nodes = list(nodes)
    _, succ = _index(nodes, edges)
    costs: dict[int, tuple[float, str]] = {}

    def cost_of(mask: int) -> tuple[float, str]:
        if mask not in costs:
            costs[mask] = stage_cost(_members(mask, nodes))
        return costs[mask]

    @cache
    def best(state: int) -> tuple[float, int]:
        if state == 0:
            return 0.0, 0
        sinks = [1 << i for i in range(len(nodes)) if state >> i & 1 and not succ[i] & state]
        result = (float("inf"), 0)
        for last in _subsets(sinks, max_stage):
            t = best(state & ~last)[0] + cost_of(last)[0]
            if t < result[0]:
                result = (t, last)
        return result

    stages = []
    state = (1 << len(nodes)) - 1
    while state:
        _, last = best(state)
        c, strategy = cost_of(last)
        stages.append(Stage(_members(last, nodes), strategy, c))
        state &= ~last
    best.cache_clear()
    return Schedule(tuple(reversed(stages)))


def greedy_schedule(nodes: Sequence[Hashable], edges: Iterable[tuple],
                    stage_cost: StageCost) -> Schedule:
    """Every node whose predecessors have run, in one stage, until none is left."""
    nodes = list(nodes)
    pred, _ = _index(nodes, edges)
    done, stages = 0, []
    while done != (1 << len(nodes)) - 1:
        ready = sum(1 << i for i in range(len(nodes))
                    if not done >> i & 1 and pred[i] & ~done == 0)
        members = _members(ready, nodes)
        c, strategy = stage_cost(members)
        stages.append(Stage(members, strategy, c))
        done |= ready
    return Schedule(tuple(stages))


def sequential_schedule(nodes: Sequence[Hashable], stage_cost: StageCost) -> Schedule:
    """One node per stage in the given (topological) order: how plans run today."""
    stages = []
    for n in nodes:
        c, strategy = stage_cost(frozenset([n]))
        stages.append(Stage(frozenset([n]), strategy, c))
    return Schedule(tuple(stages))


def blocks(nodes: Sequence[Hashable], size: int) -> list[list]:
    """The nodes in consecutive blocks of at most `size` in their (topological) order, each
    scheduled on its own (DOS §4.2: large graphs split into blocks); a schedule of each block
    one after another is a schedule of the graph, since every edge goes forward in the
    order."""
    nodes = list(nodes)
    return [nodes[i:i + size] for i in range(0, len(nodes), size)]


def optimal_in_blocks(nodes: Sequence[Hashable], edges: Iterable[tuple], stage_cost: StageCost,
                      size: int, max_stage: int | None = None) -> Schedule:
    """`optimal_schedule` of each block of `size` consecutive nodes (`blocks`), over the edges
    inside it, the blocks' stages one after another."""
    edges = list(edges)
    stages: list[Stage] = []
    for part in blocks(nodes, size):
        inside = set(part)
        local = [(u, v) for u, v in edges if u in inside and v in inside]
        stages.extend(optimal_schedule(part, local, stage_cost, max_stage).stages)
    return Schedule(tuple(stages))
