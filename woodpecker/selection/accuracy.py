"""A lower-precision plan's accuracy, measured at compile time (issue: `--precision bf16`
reports its accuracy against float32): the plan and ONNX Runtime's float32 session of the
user's model run on the same seeded inputs.

Contract: `precision_report(model, source, threads, precision)` → a `PrecisionReport` —
per output the largest difference relative to ONNX Runtime's largest magnitude (what
`Precision.tolerance` bounds), the SQNR in dB and, for class scores, top-1 agreement
(bench/accuracy.py), over config.PRECISION_REPORT_FEEDS standard-normal inputs (the same
kind of input every compile check uses; a benchmark measures real inputs). Where the
reference cannot run (inputs the compile bound to values, a model ONNX Runtime refuses) the
report says why instead of numbers. It measures; the compile's own checks already refused any
plan outside the tolerance.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from woodpecker.bench.accuracy import sqnr_db, top1_agreement
from woodpecker.bench.compare import random_feeds
from woodpecker.config import PRECISION_REPORT_FEEDS
from woodpecker.errors import first_line
from woodpecker.options import Precision
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.selection.library_first import relative_difference


@dataclass(frozen=True)
class OutputAccuracy:
    name: str
    max_rel_diff: float
    sqnr_db: float
    top1_agreement: float | None      # None: not a class-score output


@dataclass(frozen=True)
class PrecisionReport:
    precision: str
    inputs: int
    tolerance: float
    outputs: list[OutputAccuracy] = field(default_factory=list)
    why_not: str | None = None        # why nothing was measured

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "PrecisionReport":
        """The report a plan recorded (`plan.meta["precision"]`)."""
        return cls(d["precision"], d["inputs"], d["tolerance"],
                   [OutputAccuracy(**o) for o in d.get("outputs", [])], d.get("why_not"))

    def worst(self) -> OutputAccuracy | None:
        """The output of the lowest SQNR (None: nothing measured)."""
        return min(self.outputs, key=lambda o: o.sqnr_db, default=None)

    def said(self) -> str:
        """One line for the compile's progress output."""
        if self.why_not is not None:
            return f"precision {self.precision}: accuracy not measured ({self.why_not})"
        parts = [f"{o.name}: max diff {o.max_rel_diff:.2g} of its range, SQNR "
                 f"{o.sqnr_db:.1f} dB" + (f", top-1 {100 * o.top1_agreement:.0f} %"
                                          if o.top1_agreement is not None else "")
                 for o in self.outputs]
        return (f"precision {self.precision} against ONNX Runtime float32 on {self.inputs} "
                f"random inputs — " + "; ".join(parts))


def output_accuracy(name: str, reference: list[np.ndarray],
                    other: list[np.ndarray]) -> OutputAccuracy:
    """One output's accuracy over several inputs (one array per input of each)."""
    return OutputAccuracy(name, max(relative_difference(o, r) for o, r in zip(other, reference)),
                          round(sqnr_db(reference, other), 2), top1_agreement(reference, other))


def precision_report(model: CompiledModel, source: bytes, threads: int,
                     precision: Precision) -> PrecisionReport:
    """See the module docstring. `source`: the user's model, serialized."""
    from woodpecker.engines.ort_engine import new_session

    feeds = [random_feeds(model, seed) for seed in range(PRECISION_REPORT_FEEDS)]
    try:
        session = new_session(source, threads)
        names = [o.name for o in session.get_outputs()]
        want = [dict(zip(names, session.run(None, f))) for f in feeds]
        got = [model.run(f) for f in feeds]
    except Exception as e:  # noqa: BLE001 - ONNX Runtime's own errors; a report, not a check
        return PrecisionReport(precision.value, 0, precision.tolerance,
                               why_not=f"{type(e).__name__}: {first_line(e)[:160]}")
    outputs = [output_accuracy(name, [np.asarray(w[name]) for w in want],
                               [np.asarray(g[name]) for g in got])
               for name in names if name in got[0] and np.asarray(want[0][name]).dtype.kind == "f"]
    return PrecisionReport(precision.value, len(feeds), precision.tolerance, outputs)
