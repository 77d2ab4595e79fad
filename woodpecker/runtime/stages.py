"""A stage of a parallel schedule as one executor step ("DOS: Accelerate DNN Inference by
Inter-Operator Parallelism", §3):
independent operators whose kernels run at the same time, each on one thread of the pool.

Contract: `stage_kernel(members)` combines the kernels of a stage's nodes into one `Kernel`
over the step's inputs and outputs (runtime/steps.py makes the stage one step, so the arena
keeps every input of the stage alive and every output apart until the whole stage has run:
concurrent operators never share arena space). Bound to the arena, the members' bound calls
run through their engine's `together` (Halide: one foreign call, the members as the
iterations of one parallel loop, aot.BoundCall.stage, chained with the Halide steps around it
like any bound step) — no Python, so no GIL, while they run.
Unbound (a member reading a graph input, no arena) or where `together` cannot, the members run
one after another: the same results, sequential speed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from woodpecker.engines.base import Bound, Kernel


@dataclass(frozen=True)
class Member:
    """One node's kernel in a stage, and where its inputs and outputs sit among the step's."""

    kernel: Kernel
    ins: tuple[int, ...]
    outs: tuple[int, ...]


def stage_kernel(members: Sequence[Member], n_outputs: int) -> Kernel:
    """One kernel running `members` (independent) over the step's inputs and `n_outputs`
    outputs: together where bound, else in turn."""
    members = tuple(members)

    def run(*arrays):
        outs: list = [None] * n_outputs
        for m in members:
            for j, r in zip(m.outs, m.kernel.run(*[arrays[i] for i in m.ins])):
                outs[j] = r
        return outs

    def into(outs, *arrays):
        for m in members:
            mine = [outs[j] for j in m.outs]
            args = [arrays[i] for i in m.ins]
            if m.kernel.into is not None:
                m.kernel.into(mine, *args)
            else:
                for view, r in zip(mine, m.kernel.run(*args)):
                    view[...] = r

    def bind(outs, *arrays) -> Bound | None:
        bounds = []
        for m in members:
            b = None if m.kernel.bind is None else \
                m.kernel.bind([outs[j] for j in m.outs], *[arrays[i] for i in m.ins])
            if b is None:
                return None
            bounds.append(b)
        together = bounds[0].together
        stage = together(bounds) if together is not None and all(
            b.together is together for b in bounds) else None
        return stage if stage is not None else Bound(_in_turn([b.call for b in bounds]))

    return Kernel(run, into, bind)


def _in_turn(calls):
    def call() -> None:
        for c in calls:
            c()
    return call
