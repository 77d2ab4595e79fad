"""DOS stages on CUDA streams (issue 54 deliverable 3; "DOS: Accelerate DNN Inference by
Inter-Operator Parallelism" §3-4, whose own setting is a GPU running independent operators on
separate streams): a GPU plan's steps grouped into stages, each stage's steps launched on
streams of their own between a fork and a join event, scheduled on this device from measured
times by DOS's dynamic programming restricted to stages of consecutive steps
(schedule/dos_steps.contiguous_schedule): the arena was planned for the steps in plan order,
and a reordering could overwrite a value still to be read.

Contract: `step_edges(doc)` are the plan's (producer step, reader step) pairs, views resolved
to the values they alias. `step_spans(doc)` are each step's arena byte ranges read and
written; `may_share(spans, stage)` says whether a stage's steps touch disjoint bytes where one
writes — the arena was planned for the steps in turn (a value may reuse a dead one's bytes),
so only such stages may run at once. `StreamCosts` is `schedule/dos_steps.StepCosts` measured
on the session's memory: each step alone, and a candidate stage together and in turn (paired,
`runs` rounds, medians). `staged_walk(session, schedule, streams)` is one call launching the
plan stage by stage: a stage of one step on the session's current stream; a concurrent stage
forks (an event the member streams wait for), launches its k-th step on stream k, and joins
(the current stream waits for each member's event). GpuSession.schedule() puts it together.

Choices (DOS is silent on them): stages of at most `GPU_STREAMS` steps (config.py); a stage
runs together only where its measured ratio is under 1 − DOS_STAGE_MARGIN, the CPU plans'
margin.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np

from woodpecker.config import DOS_STAGE_MARGIN
from woodpecker.gpu.runtime import timed
from woodpecker.runtime.gpu_plan import HOST
from woodpecker.schedule.dos import Schedule
from woodpecker.schedule.dos_steps import INF, stage_cost

Span = tuple[int, int]


def _root(values: dict, name: str) -> str:
    while "alias" in values[name]:
        name = values[name]["alias"]
    return name


def step_edges(doc: dict) -> list[tuple[int, int]]:
    """(producer step, reader step) of every value a step writes and a later one reads."""
    values, made = doc["values"], {}
    edges = set()
    for s, step in enumerate(doc["steps"]):
        for ref in step["args"]:
            if "value" in ref and _root(values, ref["value"]) in made:
                edges.add((made[_root(values, ref["value"])], s))
        for out in step.get("outs", [step["out"]]):
            made[_root(values, out["value"])] = s
    return sorted(edges)


def _span(doc: dict, name: str) -> Span | None:
    """A value's bytes in the arena (None: a model input, in its own allocation)."""
    values = doc["values"]
    root = values[_root(values, name)]
    if "offset" not in root:
        return None
    n = int(np.prod(root["shape"], dtype=np.int64)) * np.dtype(root["dtype"]).itemsize
    return root["offset"], root["offset"] + n


def step_spans(doc: dict) -> list[tuple[tuple[Span, ...], Span | None]]:
    """Per step, the arena byte ranges it reads and the one it writes (a host step's first
    output: host steps never join a stage, `StreamCosts.candidate`)."""
    out = []
    for step in doc["steps"]:
        reads = tuple(sp for ref in step["args"] if "value" in ref
                      if (sp := _span(doc, ref["value"])) is not None)
        out.append((reads, _span(doc, step["out"]["value"])))
    return out


def _overlap(a: Span | None, b: Span | None) -> bool:
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def may_share(spans: Sequence, stage) -> bool:
    """No step of `stage` writes bytes another one reads or writes."""
    members = sorted(stage)
    for i in members:
        for j in members:
            if i != j and (_overlap(spans[i][1], spans[j][1]) or
                           any(_overlap(spans[i][1], r) for r in spans[j][0])):
                return False
    return True


class StreamCosts:
    """schedule/dos_steps.StepCosts measured on a session (see the module contract)."""

    def __init__(self, session, streams: list[int], runs: int) -> None:
        self.session, self.streams, self.runs = session, streams, runs
        self.threads = len(streams)
        self.spans = step_spans(session.plan.doc)
        self.memory = session.memory
        self._fork, self._joins = self.memory.event(), [self.memory.event() for _ in streams]
        self._timer = self.memory.timer()
        self.alone = [self._median(lambda s=s: session.launches[s]()) for s in
                      range(len(session.launches))]
        self.ratio = cache(self._ratio)

    def _median(self, run) -> float:
        return float(np.median(timed(run, self._timer, self.runs)))

    def candidate(self, s: int) -> bool:
        """Every GPU step; a host step (copies and a synchronisation) runs alone."""
        return self.session.plan.doc["steps"][s].get("engine") != HOST

    def _ratio(self, stage: frozenset) -> float:
        if not may_share(self.spans, stage):
            return INF
        members = sorted(stage)
        together = self._median(lambda: launch_stage(self.session, members, self.streams,
                                                     self._fork, self._joins))
        apart = self._median(lambda: [self.session.launches[s]() for s in members])
        return together / apart if apart > 0 else INF

    def __call__(self, stage: frozenset) -> tuple[float, str]:
        return stage_cost(self, stage, DOS_STAGE_MARGIN)


def launch_stage(session, members: Sequence[int], streams: Sequence[int], fork, joins) -> None:
    """The steps `members` at once: forked from the current stream, one stream each, joined."""
    memory = session.memory
    main = memory.current_stream()
    memory.record(fork, main)
    try:
        for k, s in enumerate(members):
            memory.wait(streams[k], fork)
            memory.use_stream(streams[k])
            session.on_stream(s, streams[k])
            session.launches[s]()
            memory.record(joins[k], streams[k])
    finally:
        memory.use_stream(main)
        for s in members:
            session.on_stream(s, main)
    for k in range(len(members)):
        memory.wait(main, joins[k])


def staged_walk(session, schedule: Schedule, streams: Sequence[int]):
    """One call launching the plan stage by stage (see the module contract)."""
    memory = session.memory
    fork, joins = memory.event(), [memory.event() for _ in streams]
    stages = [sorted(stage.nodes) for stage in schedule.stages]

    def walk() -> None:
        for members in stages:
            if len(members) == 1:
                session.launches[members[0]]()
            else:
                launch_stage(session, members, streams, fork, joins)
    return walk
