"""One paired comparison of whole plans: the measurement every plan-level decision rests on.

Contract: `compare_plans({label: run}, rounds, deadline)` runs each no-argument call
interleaved (`bench.timing.time_interleaved`: every round runs each once, in orders balanced
so each follows each other about equally often; blocks of 3 with the first discarded) and
returns a `PlanComparison`: each label's median milliseconds, the paired ratio of each to the
first label (the median over rounds of its time over the first's in the same round,
`bench.timing.paired_ratio`), and the fastest label by those ratios. Paired ratios, not two
medians: the machine drifts between rounds and both runs of a round see the same drift
(selection/refine.py's module says what two medians did on shufflenet_v2). Past `deadline` it
stops at whole rounds once each label has half its rounds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from woodpecker.bench.timing import paired_ratio, time_interleaved
from woodpecker.deadline import Deadline


@dataclass(frozen=True)
class PlanComparison:
    """`median_ms[label]`; `ratio[label]`: paired ratio of label's time to the first label's
    (the first's is 1.0); `rounds`: rounds run; `fastest`: the label with the least ratio."""

    median_ms: dict[str, float]
    ratio: dict[str, float]
    rounds: int

    @property
    def base(self) -> str:
        return next(iter(self.ratio))

    @property
    def fastest(self) -> str:
        return min(self.ratio, key=lambda k: self.ratio[k])

    def to_json(self) -> dict:
        return {**asdict(self), "fastest": self.fastest}


def compare_plans(runs: dict[str, Callable[[], object]], rounds: int,
                  deadline: Deadline = Deadline.NONE) -> PlanComparison:
    labels = list(runs)
    if len(labels) == 1:
        return PlanComparison({labels[0]: float("nan")}, {labels[0]: 1.0}, 0)
    times = time_interleaved(runs, rounds, 2, block=3, deadline=deadline,
                             min_runs=max(1, rounds // 2))
    base = labels[0]
    return PlanComparison({k: float(np.median(times[k])) for k in labels},
                          {k: 1.0 if k == base else paired_ratio(times, base, k)
                           for k in labels},
                          min(len(t) for t in times.values()))
