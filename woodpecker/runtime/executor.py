"""The executor: runs kernels in plan order over a flat slot table, dropping every intermediate
right after its last reader so peak memory follows the schedule.

With an arena (schedule/arena.py) every activation is a fixed view into one buffer allocated
once: a kernel that can write into given arrays (a `into(outs, *args)` attribute: ONNX Runtime
through I/O binding, Halide kernels) writes there directly, any other kernel's result is copied
in. Graph outputs are copied out at the end, since the next run reuses the buffer."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from woodpecker.engines.base import Kernel, runtime_positions
from woodpecker.ir.graph import Graph
from woodpecker.schedule.arena import Arena
from woodpecker.schedule.problem import value_bytes


class Executor:
    def __init__(self, graph: Graph, kernels: Sequence[Kernel], arena: Arena | None = None) -> None:
        slot: dict[str, int] = {}

        def index(name: str) -> int:
            return slot.setdefault(name, len(slot))

        for v in graph.inputs:
            index(v.name)
        if arena is not None:
            raw = np.empty(arena.size + arena.alignment, np.uint8)
            start = -raw.ctypes.data % arena.alignment
            buffer = raw[start:start + arena.size]
        last_use: dict[str, int] = {}
        for i, node in enumerate(graph.nodes):
            for p in runtime_positions(node):
                last_use[node.inputs[p].name] = i
        outputs = {v.name for v in graph.outputs}
        steps = []
        for i, (node, kernel) in enumerate(zip(graph.nodes, kernels)):
            ins = tuple(index(node.inputs[p].name) for p in runtime_positions(node))
            outs = tuple(index(v.name) for v in node.outputs)
            free = tuple(index(n) for n, last in last_use.items()
                         if last == i and n not in outputs)
            free += tuple(index(v.name) for v in node.outputs
                          if v.name not in last_use and v.name not in outputs)
            views = None
            if arena is not None:
                views = tuple(_view(buffer, arena.offsets[v.name], v) for v in node.outputs)
            steps.append((kernel, ins, outs, free, views, getattr(kernel, "into", None)))
        self._steps = steps
        self.arena = arena
        self._n_slots = len(slot)
        self._input_slots = [(v.name, slot[v.name]) for v in graph.inputs]
        self._outputs = [(v.name, slot.get(v.name), v.data) for v in graph.outputs]

    def run(self, feeds: dict[str, np.ndarray],
            step_times: list[float] | None = None) -> dict[str, np.ndarray]:
        """Run once; with `step_times` (one slot per node) each node's seconds are added."""
        env: list = [None] * self._n_slots
        for name, s in self._input_slots:
            env[s] = feeds[name]
        clock = time.perf_counter
        for i, (kernel, ins, outs, free, views, into) in enumerate(self._steps):
            t0 = clock() if step_times is not None else 0.0
            if into is not None and views is not None:
                into(views, *[env[s] for s in ins])
                results = views
            else:
                results = kernel(*[env[s] for s in ins])
                if views is not None:
                    for view, r in zip(views, results):
                        np.copyto(view, r)
                    results = views
            if step_times is not None:
                step_times[i] += clock() - t0
            for s, r in zip(outs, results):
                env[s] = r
            for s in free:
                env[s] = None
        copy = self.arena is not None
        return {name: (data if data is not None else np.array(env[s]) if copy else env[s])
                for name, s, data in self._outputs}


def _view(buffer: np.ndarray, offset: int, v) -> np.ndarray:
    n = value_bytes(v)
    return buffer[offset:offset + n].view(v.dtype).reshape(v.shape)
