"""Parallel scheduling of an assembled plan: DOS ("Accelerate DNN Inference by Inter-Operator
Parallelism", §3-4, Algorithm 1) over its steps — the scheduler itself is schedule/dos.py and
schedule/dos_steps.py — with stage costs measured here, on this machine, and the staged plan
kept only where the whole plan gets faster (a plan-level decision, as selection's others).

Contract: `schedule_parallel(model)` returns a model whose plan runs some stages of
independent steps at the same time (`meta["parallel"]`, runtime/stages.py), or the given model
(with `meta["parallel"]` saying why not) where the parallel plan is not faster on the whole.
The kernels are the plan's own; only the order and the stages change.

How, and the choices where the paper is silent:
- Candidates: steps bound to the arena whose engine can run them side by side
  (`Bound.together`: Halide kernels, one thread each on the pool, no GIL). Library regions,
  numpy movement and unbound steps stay stages of one, at their profiled times.
- Cost of a stage (DOS §4.1, measured and cached): its members run together and in turn,
  interleaved (`config.DOS_RUNS` rounds, the arena's own buffers); its cost is the sum of the
  members' times alone scaled by the paired median ratio of together to in turn, so a stage is
  compared with its members alone on the same footing. A stage faster together by less than
  `config.DOS_STAGE_MARGIN` counts as its members in turn (strategy "sequential", split again).
  Stages have at most as many members as the plan has threads (each member runs on one).
  DOS's merge strategy (one kernel over concatenated weights) is not built.
- The DP runs over blocks of `config.DOS_BLOCK` consecutive steps (DOS §4.2), each scheduled
  alone; a block's pairs are measured only when the DP asks for them.
- Whole-plan check: the staged plan's outputs must equal the sequential plan's, and it is kept
  only when its paired median time is below `1 - config.DOS_PLAN_MARGIN` of the sequential
  plan's over `config.REFINE_RUNS` interleaved rounds.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TextIO

import numpy as np

from woodpecker.assembly import reordered
from woodpecker.bench.compare import random_feeds
from woodpecker.config import (
    DOS_BLOCK,
    DOS_PLAN_MARGIN,
    DOS_RUNS,
    DOS_SECONDS,
    DOS_STAGE_MARGIN,
    REFINE_RUNS,
    TOLERANCE,
)
from woodpecker.deadline import Deadline
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.schedule.dos_steps import (
    critical_path,
    dos_schedule,
    greedy_schedule,
    stage_cost,
    step_edges,
)
from woodpecker.selection.compare import Timed, decide

INF = float("inf")
SEQUENTIAL, PARALLEL = "sequential plan", "parallel stages"   # the decision's labels


def _paired(first, then, runs: int) -> list[tuple[float, float]]:
    """`runs` rounds of `first()` then `then()`: each round's two times (s)."""
    pairs = []
    for _ in range(runs):
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        then()
        pairs.append((t1 - t0, time.perf_counter() - t1))
    return pairs


class StageTimer:
    """DOS's stage cost (`schedule/dos.StageCost`) measured on the plan's bound steps: a stage
    of one step costs its time alone; a stage of several candidates their sum scaled by the
    measured ratio of together to in turn; any other stage is impossible (inf)."""

    def __init__(self, bounds: Sequence, alone_ms: Sequence[float], threads: int,
                 runs: int = DOS_RUNS, deadline: Deadline = Deadline.NONE) -> None:
        self.bounds, self.alone, self.threads = bounds, alone_ms, threads
        self.runs, self.deadline = runs, deadline
        self.measured: dict[frozenset, float] = {}   # stage → paired together / in turn
        self._solo: dict[int, object] = {}

    def candidate(self, s: int) -> bool:
        """Step `s` can run beside others: bound, and its engine can run it on one thread
        (`together` of it alone; not a Halide kernel of more buffers than chain.c passes)."""
        if s not in self._solo:
            b = self.bounds[s]
            solo = None if b is None or b.together is None else b.together([b])
            self._solo[s] = None if solo is None else solo.call
        return self._solo[s] is not None

    def times(self, s: int) -> tuple[float, float] | None:
        """Step `s`'s ms on every core and on one core, interleaved: the median of the
        first, and it scaled by the paired median ratio (None for a non-candidate)."""
        if not self.candidate(s):
            return None
        pairs = _paired(self.bounds[s].call, self._solo[s], self.runs)
        ms = 1e3 * float(np.median([a for a, _ in pairs]))
        return ms, ms * float(np.median([b / a for a, b in pairs]))

    def ratio(self, stage: frozenset) -> float:
        """Paired median of (time together / time in turn), measured once per stage."""
        if stage not in self.measured:
            members = [self.bounds[s] for s in sorted(stage)]
            together = members[0].together(members)
            if together is None or self.deadline.passed():
                self.measured[stage] = INF
            else:
                calls = [b.call for b in members]
                pairs = _paired(together.call, lambda: [c() for c in calls], self.runs)
                self.measured[stage] = float(np.median([a / b for a, b in pairs]))
        return self.measured[stage]

    def __call__(self, stage: frozenset) -> tuple[float, str]:
        return stage_cost(self, stage, DOS_STAGE_MARGIN)


def schedule_parallel(model: CompiledModel, out: TextIO | None = None,
                      deadline: Deadline = Deadline.NONE, always: bool = False) -> CompiledModel:
    """The model with a parallel schedule where it runs faster on the whole (`always`: where
    any stage runs faster together, whatever the whole plan does: for benchmarks), else
    `model`; `meta["parallel"]` records the stages, their measured times and the decision."""
    out = out or sys.stderr
    start = time.monotonic()
    plan = model.plan
    threads = plan.target.run_threads
    deadline = Deadline.after(min(max(deadline.left(), 0.0), DOS_SECONDS)
                              if deadline.bounded else DOS_SECONDS)
    feeds = random_feeds(model)
    profile = model.profile(feeds, runs=10)          # activates the engines, fills the arena
    bounds = model.bound_steps()
    timer = StageTimer(bounds, profile, threads, deadline=deadline)
    measured = [timer.times(s) for s in range(len(bounds))]
    alone = [profile[s] if m is None else m[0] for s, m in enumerate(measured)]
    one = [None if m is None else m[1] for m in measured]
    timer.alone = alone
    steps = model.steps
    edges = step_edges(plan.graph, steps)
    path_ms, path = critical_path(len(steps), edges, alone)
    names = [[plan.graph.nodes[i].name for i in step] for step in steps]
    # No schedule of these kernels beats the longest path, nor the work (candidates on one
    # core each, the rest on all) spread over every core without loss.
    work = sum(t if t is not None else a * threads for t, a in zip(one, alone))
    floor = max(path_ms, work / threads)
    record: dict = {"threads": threads, "block": DOS_BLOCK,
                    "sequential_sum_ms": round(sum(alone), 4),
                    "critical_path_ms": round(path_ms, 4),
                    "critical_path": [x for s in path for x in names[s]],
                    # per step (by its first node): ms alone on every core, and on one core
                    "steps_ms": {names[s][0]: [round(alone[s], 4), None if one[s] is None
                                               else round(one[s], 4)]
                                 for s in range(len(steps))},
                    "floor_ms": round(floor, 4),
                    "best_possible": round(sum(alone) / floor, 4)}
    if threads < 2 or sum(timer.candidate(s) for s in range(len(steps))) < 2:
        record.update(kept=False, why="fewer than two threads or steps to run side by side",
                      stages=[])
        plan.meta["parallel"] = record
        return model
    print(f"parallel schedule: measuring stages of {len(steps)} steps on {threads} threads",
          file=out, flush=True)
    schedule = dos_schedule(len(steps), edges, timer, DOS_BLOCK)
    together = [st for st in schedule.stages if st.strategy == "concurrent"]
    record.update(
        dos_sum_ms=round(schedule.cost, 4),
        greedy_sum_ms=round(greedy_schedule(len(steps), edges, timer).cost, 4),
        measured_stages=len(timer.measured),
        stages=[{"nodes": [x for s in sorted(st.nodes) for x in names[s]],
                 "strategy": st.strategy, "ms": round(st.cost, 4),
                 "apart_ms": round(sum(alone[s] for s in st.nodes), 4)} for st in together])
    if not together:
        record.update(kept=False, why="no stage ran faster together than in turn")
        plan.meta["parallel"] = record
        return model
    order = [i for st in schedule.stages for s in sorted(st.nodes) for i in steps[s]]
    stages = tuple(tuple(stage["nodes"]) for stage in record["stages"])
    parallel = CompiledModel(reordered(plan, order, replace(plan.schedule, stages=stages),
                                       meta={"parallel": dict(record, kept=True)}))
    record.update(_whole_plan(model, parallel, feeds, deadline))
    record["kept"] = record["faster"] or (always and record["same_outputs"])
    record["seconds"] = round(time.monotonic() - start, 2)
    print(f"parallel schedule: {len(together)} stages together, whole plan "
          f"{record['ratio']:.3f}x the sequential time: "
          f"{'kept' if record['kept'] else 'sequential kept'}", file=out, flush=True)
    if record["kept"]:
        parallel.plan.meta["parallel"] = record
        return parallel
    plan.meta["parallel"] = record
    return model


def _whole_plan(sequential: CompiledModel, parallel: CompiledModel, feeds: dict,
                deadline: Deadline) -> dict:
    """The staged plan against the sequential one: same outputs, then the paired decision
    (selection/compare.decide, recorded as `check`; `ratio` its paired ratio): kept only when
    faster by more than the margin."""
    a, b = sequential.run(feeds), parallel.run(feeds)
    for name, x in a.items():
        y = b[name]
        if not np.allclose(x, y, rtol=TOLERANCE, atol=TOLERANCE):
            return {"faster": False, "same_outputs": False, "ratio": 1.0,
                    "why": f"output {name!r} differs from the sequential plan's "
                           f"(max {float(np.max(np.abs(x - y))):.2e})"}
    check = decide(Timed.plan(PARALLEL, parallel, feeds),
                   Timed.plan(SEQUENTIAL, sequential, feeds), REFINE_RUNS, 1 - DOS_PLAN_MARGIN,
                   deadline).to_json()
    return {"faster": check["kept"], "same_outputs": True,
            "ratio": round(check["paired_ratio"], 4), "check": check,
            **({} if check["kept"] else {"why": "the whole plan was not faster with the stages"})}
