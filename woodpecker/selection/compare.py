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

`decide(candidate, against, rounds, bar, deadline, confirm)` is the one two-plan decision of
selection: `candidate` and `against` are `Timed` plans (a label and a no-argument run); the
candidate is kept when its paired ratio to `against` is under `bar` (1.0: faster at all; 1 − a
margin where a wrong keep costs more than it can win), and records the quartiles of the
per-round ratios beside their median. With `confirm`, a keep the first window's rounds
support only inside their spread (upper quartile at or over 1.0) is timed again in a second
window of as many rounds, and stands only where that window's ratio is under 1.0 too and the
ratio over both windows' rounds under `bar` (`Decision.windows` records each window's
ratio): one window's median moved by up to 9 % between windows tens of seconds apart (issue 52,
Emerald Rapids), more than the margin. Every plan-level choice — the plan check's candidates
(selection/refine.py), fusions against their parts and the plan without AGO's passes
(selection/fusion.py), DOS's stages (selection/parallel.py), a Woodpecker plan against the
faster library (selection/library_first.py) — records its `Decision` in the one shape
`Decision.to_json()` gives, and says it in the one line `Decision.said()` prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from woodpecker.bench.timing import paired_ratio, paired_ratios, time_interleaved
from woodpecker.deadline import Deadline


@dataclass(frozen=True)
class PlanComparison:
    """`median_ms[label]`; `ratio[label]`: paired ratio of label's time to the first label's
    (the first's is 1.0); `rounds`: rounds run; `fastest`: the label with the least ratio."""

    median_ms: dict[str, float]
    ratio: dict[str, float]
    rounds: int
    times: dict[str, list[float]] = field(default_factory=dict, repr=False)

    @property
    def base(self) -> str:
        return next(iter(self.ratio))

    @property
    def fastest(self) -> str:
        return min(self.ratio, key=lambda k: self.ratio[k])

    def fastest_of(self, labels) -> str:
        """The label among `labels` with the least ratio."""
        return min(labels, key=lambda k: self.ratio[k])

    def paired(self, base: str, other: str) -> float:
        """The paired ratio of `other`'s time to `base`'s, round by round."""
        return 1.0 if base == other else paired_ratio(self.times, base, other)

    def quartiles(self, base: str, other: str) -> tuple[float, float]:
        """The lower and upper quartile of the per-round ratios of `other` to `base`: how
        far a decision on their median stands inside the rounds' spread (nan without times)."""
        if not self.times:
            return float("nan"), float("nan")
        q25, q75 = np.quantile(paired_ratios(self.times, base, other), [0.25, 0.75])
        return float(q25), float(q75)

    def to_json(self) -> dict:
        return {"median_ms": self.median_ms, "ratio": self.ratio, "rounds": self.rounds,
                "fastest": self.fastest}

    @classmethod
    def of(cls, times: dict[str, list[float]]) -> "PlanComparison":
        """The comparison of interleaved `times` (label -> ms per call), the first label the
        base."""
        base = next(iter(times))
        return cls({k: float(np.median(t)) for k, t in times.items()},
                   {k: 1.0 if k == base else paired_ratio(times, base, k) for k in times},
                   min(len(t) for t in times.values()), times)


def compare_plans(runs: dict[str, Callable[[], object]], rounds: int,
                  deadline: Deadline = Deadline.NONE,
                  least: int | None = None) -> PlanComparison:
    """`runs` timed paired and interleaved, `rounds` calls each; past `deadline` no round
    starts once each has `least` (default: half the rounds)."""
    labels = list(runs)
    if len(labels) == 1:
        return PlanComparison({labels[0]: float("nan")}, {labels[0]: 1.0}, 0)
    times = time_interleaved(runs, rounds, 2, block=3, deadline=deadline,
                             min_runs=max(1, rounds // 2) if least is None else least)
    return PlanComparison.of({k: times[k] for k in labels})


@dataclass(frozen=True)
class Timed:
    """A plan as a candidate of a decision: its label and a no-argument call that runs it."""

    label: str
    run: Callable[[], object]

    @classmethod
    def plan(cls, label: str, model, feeds: Mapping[str, np.ndarray]) -> "Timed":
        """`model` (a CompiledModel) run on `feeds`."""
        return cls(label, lambda: model.run(feeds))


@dataclass(frozen=True)
class Decision:
    """`candidate` timed paired against `against` (the plan it must beat): their medians,
    the paired ratio of candidate over against, the bar it had to pass, the rounds run, and
    whether it was kept (ratio under bar); `quartiles`: the lower and upper quartile of the
    per-round ratios — a keep whose upper quartile is over 1.0 stood inside the rounds'
    spread (issue 52's Emerald Rapids run: two keeps at 0.964-0.970 ran 5-11 % slower in the
    benchmark)."""

    candidate: str
    against: str
    candidate_ms: float
    against_ms: float
    paired_ratio: float
    bar: float
    rounds: int
    kept: bool
    quartiles: tuple[float, float] = (float("nan"), float("nan"))
    windows: tuple[float, ...] = ()

    def to_json(self) -> dict:
        """The fields as JSON values; quartiles not measured are null."""
        return {**asdict(self), "quartiles": [None if np.isnan(q) else q
                                              for q in self.quartiles]}

    @staticmethod
    def said(record: Mapping) -> str:
        """One line for a decision's record (`to_json`, read back from a plan; records of
        plans saved before decisions had quartiles have none)."""
        bar = "" if record["bar"] == 1.0 else f", bar {record['bar']:.2f}"
        q = [x for x in record.get("quartiles") or () if x is not None]
        spread = f", quartiles {q[0]:.3f}-{q[1]:.3f}" if len(q) == 2 else ""
        windows = record.get("windows") or ()
        if len(windows) > 1:
            spread += ", windows " + " and ".join(f"{w:.3f}" for w in windows)
        return (f"{record['candidate']} {record['candidate_ms']:.3f} ms, {record['against']} "
                f"{record['against_ms']:.3f} ms (paired {record['paired_ratio']:.3f}{spread}"
                f"{bar}) -> "
                f"{record['candidate'] if record['kept'] else record['against']}")


def decide(candidate: Timed, against: Timed, rounds: int, bar: float = 1.0,
           deadline: Deadline = Deadline.NONE, confirm: bool = False) -> Decision:
    """Time `candidate` against `against` (compare_plans) and keep it when its paired ratio is
    under `bar`; with `confirm`, a keep inside the rounds' spread needs a second window (the
    module docstring)."""
    runs = {against.label: against.run, candidate.label: candidate.run}
    c = compare_plans(runs, rounds, deadline)
    base, label = against.label, candidate.label
    ratio, quartiles = c.ratio[label], c.quartiles(base, label)
    kept, windows = ratio < bar, (ratio,)
    if confirm and kept and not quartiles[1] < 1.0:
        again = compare_plans(runs, rounds, deadline)
        c = PlanComparison.of({k: c.times[k] + again.times[k] for k in runs})
        windows += (again.ratio[label],)
        ratio, quartiles = c.ratio[label], c.quartiles(base, label)
        kept = ratio < bar and windows[1] < 1.0
    return Decision(label, base, c.median_ms[label], c.median_ms[base], ratio, bar, c.rounds,
                    kept, quartiles, windows)
