"""The memory model a schedule is scored by (SERENITY §3.3, thesis ch. 3), as bitsets.

An activation is allocated when its producer runs and freed right after its last consumer runs;
while a node runs, its inputs and all its outputs are live. Graph outputs stay live to the end,
outputs nobody reads are freed right after their producer. Graph inputs and weights are not
activations: they are reported apart and never counted in the peak. Node sets are Python ints
used as bitsets (bit i = node i), which keeps the DP's memo keys small and hashing cheap.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Graph


def value_bytes(v) -> int:
    return int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize


@dataclass
class MemoryProblem:
    """n nodes in a valid topological order; activations as (size, producer, consumer mask,
    is graph output)."""

    n: int
    preds: list[int]            # bitmask of the nodes each node waits for
    succs: list[list[int]]
    alloc: list[int]            # bytes of all outputs, allocated when the node runs
    drop_now: list[int]         # bytes of its outputs nobody reads (freed right after it runs)
    reads: list[list[tuple[int, int]]]  # per node: (size, consumer mask) of activations it reads
    is_output: list[bool]       # makes a graph output
    names: list[str]

    @classmethod
    def build(cls, n: int, values: Sequence[tuple[int, int, int, bool]],
              names: Sequence[str] | None = None) -> "MemoryProblem":
        """From activations `(bytes, producer, consumer mask, is_output)`; nodes 0..n-1 must be
        in a topological order."""
        preds = [0] * n
        succs: list[list[int]] = [[] for _ in range(n)]
        alloc = [0] * n
        drop_now = [0] * n
        reads: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        is_out = [False] * n
        for size, producer, consumers, is_output in values:
            alloc[producer] += size
            is_out[producer] |= is_output
            if not consumers and not is_output:
                drop_now[producer] += size
            c = consumers
            while c:
                low = c & -c
                u = low.bit_length() - 1
                c ^= low
                if u <= producer:
                    raise ValueError("nodes are not in a topological order")
                if not preds[u] >> producer & 1:
                    preds[u] |= 1 << producer
                    succs[producer].append(u)
                if not is_output:
                    reads[u].append((size, consumers))
        return cls(n, preds, succs, alloc, drop_now, reads, is_out,
                   list(names) if names is not None else [str(i) for i in range(n)])

    def step(self, mask: int, mem: int, u: int) -> tuple[int, int]:
        """Run node u in state `mask` holding `mem` bytes: (peak during u, bytes after u)."""
        peak = mem + self.alloc[u]
        after = mask | 1 << u
        mem = peak - self.drop_now[u]
        for size, consumers in self.reads[u]:
            if not consumers & ~after:
                mem -= size
        return peak, mem

    def simulate(self, order: Sequence[int], mask: int = 0, mem: int = 0) -> tuple[int, list[int]]:
        """Peak bytes of running `order` from state (mask, mem), and the bytes live at each step."""
        peak, timeline = mem, []
        for u in order:
            if self.preds[u] & ~mask:
                raise ValueError(f"node {self.names[u]} runs before its inputs")
            p, mem = self.step(mask, mem, u)
            mask |= 1 << u
            peak = max(peak, p)
            timeline.append(p)
        return peak, timeline

    def kahn(self, nodes: int | None = None, mask: int = 0) -> list[int]:
        """Kahn's algorithm (FIFO over ready nodes) on the nodes in `nodes`, from state `mask`:
        the order a plain topological sort gives, SERENITY's hard budget (Algorithm 3)."""
        nodes = (1 << self.n) - 1 if nodes is None else nodes
        ready = deque(u for u in bits(nodes) if not self.preds[u] & ~mask)
        queued = 0
        for u in ready:
            queued |= 1 << u
        order = []
        while ready:
            u = ready.popleft()
            order.append(u)
            mask |= 1 << u
            for v in self.succs[u]:
                if nodes >> v & 1 and not queued >> v & 1 and not self.preds[v] & ~mask:
                    queued |= 1 << v
                    ready.append(v)
        return order


def bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def graph_problem(graph: Graph) -> MemoryProblem:
    """The memory problem of `graph.nodes` in their current order."""
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    outputs = {id(v) for v in graph.outputs}
    values = []
    for i, node in enumerate(graph.nodes):
        for v in dict.fromkeys(node.outputs):
            consumers = 0
            for c in v.consumers:
                consumers |= 1 << index[id(c)]
            values.append((value_bytes(v), i, consumers, id(v) in outputs))
    return MemoryProblem.build(len(graph.nodes), values, [n.name for n in graph.nodes])


def external_bytes(graph: Graph) -> dict[str, int]:
    """What the peak leaves out: graph inputs and weights (constants)."""
    return {"inputs_bytes": sum(value_bytes(v) for v in graph.inputs),
            "weights_bytes": sum(value_bytes(v) for v in graph.constants())}
