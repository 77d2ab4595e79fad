"""Candidates: the kernels selection weighs for one task, as objects (torch/_inductor's
`select_algorithm` choices; TVM MetaSchedule's measure candidates).

Contract: a `Candidate` is one way to run a task's nodes — its engine and, for a generated
kernel, the `KernelSpec` it would run as (template, config, task, compiled file) and the
`TuningRecord` that nominated it — with `run`, a no-argument call on seeded inputs that times
it, and `key`, which names it among the task's candidates (engine, template, config). The
finalists of a task's tuning records become candidates once built and checked against the
reference (selection/finalists.py); a library engine's kernel of the node becomes one in
selection/per_node.py; `time_candidates` times a set of them interleaved, by `label`. Only the
chosen candidate's spec goes into the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from woodpecker.bench.timing import time_interleaved
from woodpecker.deadline import Deadline
from woodpecker.engines.choice import KernelSpec
from woodpecker.tasks.space import KnobSpace
from woodpecker.tune.records import TuningRecord


@dataclass(frozen=True)
class Candidate:
    """`engine` runs it; `name` is its finalist name ("conv_depthwise/rows", "…#2") for a
    generated kernel, the engine's name for a library's; `spec` and `record` are set for a
    generated kernel only."""

    engine: str
    name: str
    run: Callable[[], object]
    spec: KernelSpec | None = None
    record: TuningRecord | None = None

    @property
    def generated(self) -> bool:
        return self.spec is not None

    @property
    def label(self) -> str:
        """Its label in a timing: the engine, or engine:finalist name for a generated one."""
        return self.engine if self.spec is None else f"{self.engine}:{self.name}"

    @property
    def key(self) -> str:
        """What it runs: the engine, with the template and config of a generated kernel."""
        if self.spec is None:
            return self.engine
        return f"{self.engine}:{self.spec.template}:{KnobSpace.key(self.spec.config)}"


def time_candidates(candidates: Sequence[Candidate], runs: int,
                    settle: Mapping[str, Callable[[], None]] | None = None,
                    deadline: Deadline = Deadline.NONE) -> dict[str, float]:
    """Median milliseconds of each candidate by label, timed interleaved in blocks of 3
    (bench/timing.py), `settle[label]` run after that candidate's calls."""
    times = time_interleaved({c.label: c.run for c in candidates}, runs, 2, block=3,
                             settle=dict(settle or {}), deadline=deadline)
    return {label: float(np.median(v)) for label, v in times.items()}
