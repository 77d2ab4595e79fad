"""The executor: runs kernels in plan order over a flat slot table, dropping every intermediate
right after its last reader so peak memory follows the schedule.

With an arena (schedule/arena.py) every activation is a fixed view into one buffer allocated
once: a kernel that can write into given arrays (a `into(outs, *args)` attribute: ONNX Runtime
through I/O binding, Halide kernels) writes there directly, any other kernel's result is copied
in. A kernel that can be bound to its arrays once (`bind(outs, *args)`, Halide kernels) is, when
all its inputs live in the arena too: each run then makes just the foreign call, and a run of
such steps makes one (`_chains`). Graph outputs are copied out at the end, since the next run
reuses the buffer. Parts of a Concat written in place (schedule/aliases.py) are views of their
slice of its output, a reshape or slice written in place is a view of its input, and such a
Concat's, reshape's or slice's step does nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from woodpecker.engines.base import Bound, Kernel
from woodpecker.errors import RunError, WoodpeckerError
from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.steps import step_io
from woodpecker.schedule.aliases import VIEW, is_view, part_index, sliced_axis
from woodpecker.schedule.arena import Arena
from woodpecker.schedule.problem import value_bytes


@dataclass(frozen=True, slots=True)
class Step:
    """One step as the executor runs it: the kernel, the slots it reads and writes, the slots
    freed after it, its outputs' arena views, how it writes them (`into`) and its bound call."""

    kernel: Kernel
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    free: tuple[int, ...]
    views: tuple[np.ndarray, ...] | None
    into: Callable[..., None] | None
    bound: Bound | None
    label: str = ""


class Executor:
    """Runs `steps` in order: each a list of consecutive nodes and the one kernel computing
    them (a single node, or a library region, runtime/steps.py). A step reads the runtime
    inputs of its nodes that it does not produce itself and returns the values it produces
    that later steps or the graph outputs read — with `every`, all it produces (a memory
    plan's regions, runtime/steps.py); the rest stay inside the kernel."""

    def __init__(self, graph: Graph, steps: Sequence[tuple[Sequence[Node], Kernel]],
                 arena: Arena | None = None, every: bool = False) -> None:
        slot: dict[str, int] = {}

        def index(name: str) -> int:
            return slot.setdefault(name, len(slot))

        for v in graph.inputs:
            index(v.name)
        if arena is not None:
            raw = np.empty(arena.size + arena.alignment, np.uint8)
            start = -raw.ctypes.data % arena.alignment
            buffer = raw[start:start + arena.size]
        io = [step_io(nodes, graph, every) for nodes, _ in steps]
        last_use: dict[str, int] = {}
        for i, (ins, _) in enumerate(io):
            for v in ins:
                last_use[v.name] = i
        outputs = {v.name for v in graph.outputs}
        self._steps = []
        for i, ((_, kernel), (ins, outs)) in enumerate(zip(steps, io)):
            free = tuple(index(n) for n, last in last_use.items()
                         if last == i and n not in outputs)
            free += tuple(index(v.name) for v in outs
                          if v.name not in last_use and v.name not in outputs)
            views, into, bound = None, kernel.into, None
            if arena is not None:
                views = tuple(_arena_view(buffer, arena, graph, v) for v in outs)
                parts = ins and all(arena.aliases.get(v.name, ("",))[0] == outs[0].name
                                    for v in ins)
                if parts or (outs and is_view(arena.aliases.get(outs[0].name, ("", 0))[1])):
                    into = _in_place
                elif kernel.bind is not None and all(_in_arena(arena, v) for v in ins):
                    bound = kernel.bind(views, *[_arena_view(buffer, arena, graph, v)
                                                 for v in ins])
            self._steps.append(Step(kernel, tuple(index(v.name) for v in ins),
                                    tuple(index(v.name) for v in outs), free, views, into,
                                    bound, _label(steps[i][0])))
        self._chains = _chains(self._steps)
        self.arena = arena
        self._n_slots = len(slot)
        self._input_slots = [(v.name, slot[v.name]) for v in graph.inputs]
        self._outputs = [(v.name, slot.get(v.name), v.data) for v in graph.outputs]
        self.direct = self._direct()

    def _direct(self) -> "Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None":
        """`run` of a plan that is one call (a library-first plan: the library's session over
        the user's graph) — the feeds handed straight to that call, its results named: the
        plan is that session, within a dict (Woodpecker-DL's promise, issue 50: ≤ 0.5 % over
        the library alone; the loop above cost a 0.085 ms model 2.3 us a call). None where
        the plan is more than one plain call (an arena, a bound step, a graph output that is
        an input or a constant)."""
        if len(self._steps) != 1 or self.arena is not None:
            return None
        step = self._steps[0]
        slots = dict((s, name) for name, s in self._input_slots)
        out_slots = [s for _, s, data in self._outputs if data is None]
        if (step.bound is not None or len(out_slots) != len(self._outputs)
                or set(step.ins) - slots.keys() or sorted(out_slots) != sorted(set(out_slots))
                or not set(out_slots) <= set(step.outs)):
            return None
        call, names, label = step.kernel.run, [slots[s] for s in step.ins], step.label
        order = [step.outs.index(s) for s in out_slots]
        out_names = [name for name, _, _ in self._outputs]
        by_name = step.kernel.by_name
        if by_name is not None and sorted(names) == sorted(n for n, _ in self._input_slots):
            # the feeds (exactly the graph's inputs) go to the session as they are
            call, names = by_name, None

        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            try:
                results = call(feeds) if names is None else call(*[feeds[n] for n in names])
            except WoodpeckerError:
                raise
            except Exception as e:
                raise _failed(label, e) from e
            return {n: results[k] for n, k in zip(out_names, order)}

        return run

    @property
    def bounds(self) -> list[Bound | None]:
        """Each step's call bound to the arena (None where it is not bound)."""
        return [step.bound for step in self._steps]

    def run(self, feeds: dict[str, np.ndarray],
            step_times: list[float] | None = None) -> dict[str, np.ndarray]:
        """Run once; with `step_times` (one slot per step) each step's seconds are added. A
        step whose kernel raises (a library engine refusing what the model gives it) is one
        RunError line naming the step."""
        env: list = [None] * self._n_slots
        for name, s in self._input_slots:
            env[s] = feeds[name]
        clock = time.perf_counter
        chains = self._chains if step_times is None else {}
        chained_until = 0
        i = 0
        try:
            for i, step in enumerate(self._steps):
                t0 = clock() if step_times is not None else 0.0
                views = step.views
                if i < chained_until:
                    results = views
                elif i in chains:
                    call, chained_until = chains[i]
                    call()
                    results = views
                elif step.bound is not None:
                    step.bound.call()
                    results = views
                elif step.into is not None and views is not None:
                    step.into(views, *[env[s] for s in step.ins])
                    results = views
                else:
                    results = step.kernel.run(*[env[s] for s in step.ins])
                    if views is not None:
                        for view, r in zip(views, results):
                            np.copyto(view, r)
                        results = views
                if step_times is not None:
                    step_times[i] += clock() - t0
                for s, r in zip(step.outs, results):
                    env[s] = r
                for s in step.free:
                    env[s] = None
        except WoodpeckerError:
            raise
        except Exception as e:
            raise _failed(self._steps[i].label, e) from e
        copy = self.arena is not None
        return {name: (data if data is not None else np.array(env[s]) if copy else env[s])
                for name, s, data in self._outputs}


def _failed(label: str, e: Exception) -> RunError:
    """A step's kernel raised: one line naming the step and the library's first line."""
    first = (str(e).strip().splitlines() or [""])[0]
    return RunError(f"running {label} failed: {type(e).__name__}: {first}")


def _label(nodes: Sequence[Node]) -> str:
    first = nodes[0]
    if len(nodes) == 1:
        return f"node {first.name!r} ({first.op})"
    return f"the region of {len(nodes)} nodes from {first.name!r} ({first.op})"


def _arena_view(buffer: np.ndarray, arena: Arena, graph: Graph, v: Value) -> np.ndarray:
    """`v`'s array in the arena: its own span, its slice of the Concat output it is a part
    of, or its input's array reshaped or sliced (schedule/aliases.py)."""
    if v.name in arena.aliases:
        whole, axis, start = arena.aliases[v.name]
        w = graph.values[whole]
        held = _arena_view(buffer, arena, graph, w)
        if axis == VIEW:
            return held.reshape(v.shape)
        axis = sliced_axis(axis)
        return held[part_index(w.shape, axis, start, v.shape[axis])]
    offset, n = arena.offsets[v.name], value_bytes(v)
    return buffer[offset:offset + n].view(v.dtype).reshape(v.shape)


def _chains(steps: list[Step]) -> dict:
    """First step → (one call running it and the next bound steps, the step after them), for
    every run of two or more consecutive bound steps whose calls share a `join` (Halide's
    kernels: one foreign call, aot.BoundCall.chain), no-op steps (`_in_place`) among them
    included."""
    chains, run = {}, []

    def close():
        bounds = [steps[i].bound for i in run if steps[i].bound is not None]
        if len(bounds) >= 2:
            call = bounds[0].join(bounds)
            if call is not None:
                chains[run[0]] = (call, run[-1] + 1)
        run.clear()

    for i, step in enumerate(steps):
        bound = step.bound
        joinable = bound is not None and bound.join is not None
        if joinable and run and steps[run[0]].bound.join is not bound.join:
            close()
        if joinable or (run and step.into is _in_place):
            run.append(i)
        else:
            close()
    close()
    return chains


def _in_arena(arena: Arena, v: Value) -> bool:
    """`v` lives in the arena (graph inputs are the caller's arrays, new every run)."""
    return v.name in arena.offsets or v.name in arena.aliases


def _in_place(outs, *parts) -> None:
    """A Concat whose parts were all written into its output already, or a reshape or slice
    whose output is a view of its input: nothing to do."""
