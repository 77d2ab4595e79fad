"""The options of a compile and of tuning, as typed values: what `woodpecker.compile`, the CLI
and the benchmarks pass down, and what a plan records whole (`model.options` in plan.json).

Contract: frozen dataclasses of plain values, validated when made (a bad budget, schedule or
thread count is a `WoodpeckerError` before any work starts); the budget text is parsed here
and nowhere else. Defaults are the tuned constants of `config.py`. A value of the wrong type
(threads="two", arena="no", max_trials="x") or a keyword that names no field is one
`OptionsError` line (for the keyword an `UnknownOption`, which is a TypeError too, as Python's
own error for it is), never the TypeError of a comparison deep inside.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from woodpecker import config
from woodpecker.errors import OptionsError
from woodpecker.files import user_path
from woodpecker.target import check_threads, host_extensions

SEARCHES = ("ga", "random", "xgb", "ppo", "chameleon", "glimpse")   # tune/searchers (checked there)


class UnknownOption(OptionsError, TypeError):
    """A keyword that names no option (a TypeError too, as Python's own for a keyword is)."""


class _Checked:
    """Base of the options classes: a keyword naming no field is one UnknownOption line
    (before the dataclass's own __init__ raises its TypeError), and each `bool` field takes
    True or False only (arena="no" would have been true)."""

    def __new__(cls, *args: Any, **kwargs: Any):
        known = [f.name for f in fields(cls) if f.init]
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            raise UnknownOption(f"unknown {cls.__name__} option(s): {', '.join(unknown)}; "
                                f"known: {', '.join(known)}")
        return super().__new__(cls)

    def _check_flags(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("bool", "bool | None") and not isinstance(value, bool) and \
                    not (value is None and f.type == "bool | None"):
                if getattr(getattr(value, "dtype", None), "kind", "") != "b" or \
                        getattr(value, "ndim", 1) != 0:     # (numpy's True and False pass)
                    raise OptionsError(f"{f.name} must be True or False"
                                       f"{' (or None)' if 'None' in f.type else ''}, got "
                                       f"{value!r}")
                object.__setattr__(self, f.name, bool(value))


def _whole(value: Any, name: str, least: int, none: bool = False) -> "int | None":
    """`value` as an int of at least `least` (None where `none` allows it), or one
    OptionsError line."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise OptionsError(f"{name} must be a whole number of at least {least}, got {value!r}")
    return int(value)


def _real(value: Any, name: str) -> float:
    """`value` as a float, or one OptionsError line."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptionsError(f"{name} must be a number, got {value!r}")
    return float(value)


def _names(value: Any, name: str) -> "tuple[str, ...] | None":
    """Names from `a,b` or an iterable of strings (None stays None), or one OptionsError
    line (a single string was taken letter by letter)."""
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(s.strip() for s in value.split(",") if s.strip())
    try:
        names = tuple(value)
    except TypeError:
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        raise OptionsError(f"{name} must be names, as 'a,b' or a list of strings, got {value!r}")
    return names


class ScheduleKind(StrEnum):
    """How a plan orders its nodes: as the model file does (FILE), for the least peak of live
    activations (MEMORY: SERENITY, schedule/memory.py), or as the file does with independent
    Halide steps run side by side where the whole plan gets faster (PARALLEL: DOS,
    selection/parallel.py). Its value is what the CLI takes and plan.json stores."""

    FILE = "file"
    MEMORY = "memory"
    PARALLEL = "parallel"


SCHEDULES = tuple(k.value for k in ScheduleKind)


class BudgetSplit(StrEnum):
    """How tuning shares a model's budget among its tasks: by a roofline estimate of each
    task's work (WORK, tune/driver.py), or by each task's measured time on the library and how
    close a known kernel of it came (LIBRARY, tune/priorities.py: deepest first, little to a
    task the library is out of reach for)."""

    WORK = "work"
    LIBRARY = "library"


SPLITS = tuple(k.value for k in BudgetSplit)


class Precision(StrEnum):
    """The type a compile computes a model's float32 products in: FP32 (as the model says),
    BF16 or FP16 — the layers Woodpecker's low-precision kernels take (passes/precision.py)
    in that type with float32 sums, OpenVINO with its precision hint; ONNX Runtime has no such
    CPU mode and stays float32. The plan's outputs must then lie within
    config.LOW_PRECISION_TOLERANCE of ONNX Runtime's float32 ones, and the compile measures and
    reports how far they do. A plan of BF16 or FP16 loads only on a CPU with the extension."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"

    @property
    def compute(self) -> str:
        """The element type's numpy/ml_dtypes name (tasks' `compute`)."""
        return {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[self.value]

    @property
    def tolerance(self) -> float:
        """How far a plan's outputs may lie from ONNX Runtime's float32 ones, relative to their
        largest magnitude."""
        return config.LOW_PRECISION_TOLERANCE.get(self.value, config.TOLERANCE)

    def unsupported(self, extensions: frozenset[str] | None = None) -> str | None:
        """Why this host (or a CPU with `extensions`) cannot compute in this type; None when
        it can. BF16 needs AVX512_BF16 or AMX-BF16; FP16 AVX512-FP16 (or AMX-FP16)."""
        needs = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}
        if self.value not in needs:
            return None
        have = host_extensions() if extensions is None else extensions
        if any(f in have for f in needs[self.value]):
            return None
        return (f"precision {self.value} needs a CPU with {' or '.join(needs[self.value])}, "
                "which this one lacks")


PRECISIONS = tuple(p.value for p in Precision)


def precision(value: "str | Precision") -> Precision:
    """`value` as a Precision, or one WoodpeckerError line naming the choices."""
    try:
        return Precision(value)
    except ValueError:
        raise OptionsError(f"unknown precision {value!r}; use "
                           f"{', '.join(PRECISIONS)}") from None


def parse_budget(text: "str | float | int") -> float:
    """Seconds from `90`, `90s`, `15m`, `1h` (or a number of seconds)."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise OptionsError(f"bad budget {text!r}: use e.g. 90s, 15m, 1h or a number of "
                           "seconds")
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        units = {"s": 1, "m": 60, "h": 3600}
        t = text.strip().lower()
        try:
            seconds = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
        except ValueError:
            raise OptionsError(f"bad budget {text!r}: use e.g. 90s, 15m, 1h") from None
    if not seconds > 0:
        raise OptionsError(f"bad budget {text!r}: it must be a duration of more than 0 s "
                           "(to compile without tuning, leave out --tune)")
    return seconds


@dataclass(frozen=True)
class TuneOptions(_Checked):
    """How to tune: `budget` (a duration text or seconds, parsed once into `budget_s`), the
    searcher, its seed, an optional cap on measurements per task, the per-candidate limit, and
    `build_workers`: processes compiling new candidates in parallel before they are timed (None:
    every core this process may use; 1: each candidate compiles in the measuring worker);
    `database`: the shipped tuning database (tune/database.py) joins the log as knowledge;
    `split`: how the budget is shared among the tasks (`BudgetSplit`)."""

    budget: "str | float" = "15m"
    search: str = config.DEFAULT_SEARCH
    seed: int = 0
    max_trials: int | None = None
    timeout_s: float = config.CANDIDATE_TIMEOUT_S
    build_workers: int | None = None
    database: bool = True
    split: BudgetSplit = BudgetSplit.WORK
    budget_s: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "budget_s", parse_budget(self.budget))
        self._check_flags()
        if not isinstance(self.search, str) or self.search not in SEARCHES:
            raise OptionsError(f"unknown search {self.search!r}; choose from "
                               f"{', '.join(SEARCHES)}")
        object.__setattr__(self, "seed", _whole(self.seed, "seed", 0))
        object.__setattr__(self, "max_trials", _whole(self.max_trials, "max_trials", 1, True))
        object.__setattr__(self, "build_workers",
                           _whole(self.build_workers, "build_workers", 1, True))
        if self.split not in SPLITS:
            raise OptionsError(f"unknown budget split {self.split!r}; use "
                               f"{' or '.join(SPLITS)}")
        object.__setattr__(self, "split", BudgetSplit(self.split))
        if not _real(self.timeout_s, "the candidate timeout timeout_s") > 0:
            raise OptionsError(f"the candidate timeout must be positive, got "
                               f"{self.timeout_s}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def tune_options(value: Any) -> "TuneOptions | None":
    """`tune=` as the CLI's `--tune`/`--budget` take it: None or False (no tuning), True (the
    default budget), a budget ("20s", "3m", or a number of seconds) or a TuneOptions; anything
    else one WoodpeckerError line."""
    if value is None or value is False:
        return None
    if value is True:
        return TuneOptions()
    if isinstance(value, TuneOptions):
        return value
    if isinstance(value, (str, int, float)):
        return TuneOptions(value)
    raise OptionsError(f"tune={value!r}: give a budget such as '20s' or '3m', a number of "
                       "seconds, True (the default budget) or a TuneOptions")


@dataclass(frozen=True)
class CompileOptions(_Checked):
    """Everything a compile is asked to do besides the model itself.

    `engines`: the engines allowed (None: every installed one); `threads` (None: every core
    this process may use; more only with `force_threads`); `passes` (None: passes.DEFAULT,
    or passes.MEMORY for the memory schedule); `schedule` "file", "memory" with an
    optional `memory_budget` in bytes, or "parallel" (the file order, then independent
    Halide steps run side by side where the whole plan gets faster: DOS, selection/parallel.py);
    `arena`; `library_regions` (None: on; a memory-scheduled plan's regions write every
    value into the arena and never lift its peak, runtime/steps.py); `tune` (tune
    before selecting: a TuneOptions, or "20s", 20 or True as `tune_options` reads them) and
    `tuning_log` (a log to select from, and with `tune` to extend; `resume` to continue a
    non-empty one); `library_first` (None: on when the engines are
    not restricted and the schedule is the file's): the plan starts as the faster library
    running the user's original graph and stays it unless Woodpecker's plan measures faster
    (selection/library_first.py); `database`: the shipped tuning database (tune/database.py)
    joins the tuning log where generated kernels are used; `precision`: the type the
    model's products are computed in (`Precision`; a CPU without it is refused here)."""

    engines: tuple[str, ...] | None = None
    threads: int | None = None
    force_threads: bool = False
    passes: tuple[str, ...] | None = None
    schedule: ScheduleKind = ScheduleKind.FILE
    memory_budget: int | None = None
    arena: bool = True
    library_regions: bool | None = None
    tune: TuneOptions | None = None
    tuning_log: str | None = None
    resume: bool = False
    library_first: bool | None = None
    database: bool = True
    precision: Precision = Precision.FP32

    def __post_init__(self) -> None:
        object.__setattr__(self, "tune", tune_options(self.tune))
        self._check_flags()
        object.__setattr__(self, "engines", _names(self.engines, "engines"))
        object.__setattr__(self, "passes", _names(self.passes, "passes"))
        if self.tuning_log is not None:
            object.__setattr__(self, "tuning_log",
                               os.fspath(user_path(self.tuning_log, "tuning_log", OptionsError)))
        if self.threads is not None:
            check_threads(self.threads, self.force_threads)
        object.__setattr__(self, "memory_budget",
                           _whole(self.memory_budget, "memory_budget (bytes)", 1, True))
        if not isinstance(self.schedule, str) or self.schedule not in SCHEDULES:
            raise OptionsError(f"unknown schedule {self.schedule!r}; use 'file', "
                               "'memory' or 'parallel'")
        object.__setattr__(self, "schedule", ScheduleKind(self.schedule))
        object.__setattr__(self, "precision", precision(self.precision))
        why = self.precision.unsupported()
        if why is not None:
            raise OptionsError(why)
        if self.memory_budget is not None and self.schedule is not ScheduleKind.MEMORY:
            raise OptionsError("a memory budget needs the memory schedule "
                               "(--schedule memory)")

    @property
    def starts_from_library(self) -> bool:
        """Whether the compile is library-first (see the class)."""
        if self.library_first is not None:
            return self.library_first
        return self.engines is None and self.schedule is ScheduleKind.FILE and \
            self.library_regions is not False

    @property
    def regions(self) -> bool:
        """Whether consecutive library nodes run as one region (runtime/steps.py)."""
        return self.library_regions is None or bool(self.library_regions)

    @classmethod
    def from_kwargs(cls, base: "CompileOptions | None" = None, **kwargs: Any) -> "CompileOptions":
        """`base` (default: the defaults) with the given fields replaced; an unknown name is a
        TypeError, as for any keyword argument. `tune` takes what the CLI does (see
        `tune_options`); `budget=` (not a field) is the tuning budget and implies tuning, as
        `--budget` does: it replaces the budget of the `tune` given or of `base`'s."""
        budget = kwargs.pop("budget", None)
        names = [f.name for f in fields(cls) if f.init]
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise UnknownOption(f"unknown compile option(s): {', '.join(unknown)}; known: "
                                f"{', '.join(names)}, budget")
        if base is not None and not isinstance(base, CompileOptions):
            raise OptionsError(f"options must be a CompileOptions (or give its fields as "
                               f"keywords: threads=2, …), not a {type(base).__name__}")
        values = asdict(base) if base is not None else {}
        if base is not None:
            values["tune"] = base.tune
        values.update(kwargs)
        if budget is not None:
            if "tune" in kwargs and kwargs["tune"] in (False, 0):
                raise OptionsError(f"budget={budget!r} is a tuning budget, but tune is "
                                   f"{kwargs['tune']!r}: leave one out")
            tune = tune_options(values.get("tune"))
            values["tune"] = TuneOptions(budget) if tune is None else replace(tune,
                                                                              budget=budget)
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["tune"] = None if self.tune is None else self.tune.to_json()
        d["schedule"] = self.schedule.value
        d["precision"] = self.precision.value
        for key in ("engines", "passes"):
            if d[key] is not None:
                d[key] = list(d[key])
        return d


class Calibration(StrEnum):
    """How static quantization sets each activation's range from the calibration data (ONNX
    Runtime's calibrators, `quantization/ptq.py`): the observed min and max; a percentile of the
    absolute values (outliers clipped); the threshold minimising the KL divergence between
    the float and the quantized histograms (TensorRT's entropy calibration)."""

    MINMAX = "minmax"
    PERCENTILE = "percentile"
    ENTROPY = "entropy"


@dataclass(frozen=True)
class QuantizeOptions(_Checked):
    """How `woodpecker.quantization` quantizes: `dynamic` (weights of MatMul/Gemm in int8,
    activations quantized per call — transformers; no calibration) or static (QDQ, every
    quantizable op, activations in `activations` with ranges from `method`); `per_channel`
    weights; `min_layer_sqnr_db`: a layer whose own quantization noise, measured on the
    calibration data, leaves its output below this signal-to-noise ratio stays in fp32 (0:
    keep every layer quantized); `keep_fp32`: node names the user keeps in fp32;
    `preprocess`: ONNX Runtime's pre-processing (shape inference, graph optimisation: BatchNorm
    folded into its conv) first; `reduce_range`: weights in 7 bits, so that no pair of u8×s8
    products overflows 16 bits (AVX2's `vpmaddubsw`, which ONNX Runtime uses without VNNI,
    saturates there; its docs advise this)."""

    dynamic: bool = False
    method: Calibration = Calibration(config.QUANT_CALIBRATION)
    percentile: float = config.QUANT_PERCENTILE
    per_channel: bool = True
    activations: str = "uint8"
    min_layer_sqnr_db: float = config.QUANT_MIN_LAYER_SQNR_DB
    keep_fp32: tuple[str, ...] = ()
    preprocess: bool = True
    reduce_range: bool = False

    def __post_init__(self) -> None:
        self._check_flags()
        try:
            object.__setattr__(self, "method", Calibration(self.method))
        except ValueError:
            raise OptionsError(f"unknown calibration method {self.method!r}; use "
                               f"{', '.join(c.value for c in Calibration)}") from None
        if self.activations not in ("uint8", "int8"):
            raise OptionsError(f"activations must be uint8 or int8, got "
                               f"{self.activations!r}")
        if not 50.0 < _real(self.percentile, "the calibration percentile") <= 100.0:
            raise OptionsError(f"the calibration percentile must be in (50, 100], got "
                               f"{self.percentile}")
        if not _real(self.min_layer_sqnr_db, "min_layer_sqnr_db") >= 0:
            raise OptionsError(f"min_layer_sqnr_db must be 0 or more, got "
                               f"{self.min_layer_sqnr_db}")
        object.__setattr__(self, "keep_fp32", _names(self.keep_fp32, "keep_fp32") or ())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
