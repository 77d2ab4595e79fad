"""The compile pipeline, a straight line: frontend → candidate graphs (passes, schedule) →
tuning → selection (selection/pipeline.py: per-node kernels, whole-plan checks, the libraries'
sessions of the original graph) → plan. ARCHITECTURE.md draws it."""

from __future__ import annotations

import hashlib
import numbers
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

import numpy as np
import onnx

from woodpecker.assembly import AssemblyOptions
from woodpecker.config import LIBRARY_FIRST_SHARE, SELECTION_SHARE
from woodpecker.deadline import Deadline
from woodpecker.engines import names
from woodpecker.engines.base import BuildContext
from woodpecker.engines.registry import get_engine, parse_engines
from woodpecker.errors import (
    DynamicShapeError,
    ModelError,
    OptionsError,
    UnsupportedOpError,
    WoodpeckerError,
    first_line,
)
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.options import CompileOptions, Precision, ScheduleKind
from woodpecker.passes import PASSES
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.runtime.plan_schedule import PlanSchedule
from woodpecker.selection.accuracy import precision_report
from woodpecker.selection.library_first import LibraryRefusal, OriginalGraph
from woodpecker.selection.ort_reference import OnnxRuntimeRefusal
from woodpecker.selection.pipeline import (
    Selection,
    candidate_graphs,
    measure_libraries,
    select_plan,
)
from woodpecker.target import Target


def compile(model: Any, options: CompileOptions | None = None, *,
            target: "str | Target" = "cpu",
            input_shapes: Mapping[str, tuple[int, ...]] | None = None,
            input_values: Mapping[str, Any] | None = None, example_inputs: Any = None,
            progress: TextIO | None = None, deadline: Deadline | None = None,
            **option_fields: Any) -> CompiledModel:
    """Compile an ONNX model (path, bytes or ModelProto) or a torch.nn.Module.

    What to do is `options` (a `CompileOptions`; see woodpecker/options.py), whose fields may
    also be given as keyword arguments (`engines=`, `threads=`, `tune=`, `tuning_log=`,
    `schedule=`, …), replacing those of `options`. The options are recorded whole in the plan.

    A torch module needs `example_inputs` (a tensor or tuple of tensors) to be exported.
    `input_shapes` fixes dynamic dimensions; `input_values` binds inputs to fixed values,
    specialising the model to them. Progress of long work goes to `progress` (stderr).

    Generated kernels: with `tune`, the model's tasks are tuned into `tuning_log` (default:
    the shared log in the Woodpecker cache, always continued; a given non-empty log needs
    `resume`). With a tuning log, each node whose task has a tuned kernel is timed against the
    library engines and the fastest kept (selection/); layouts are then assigned and the
    conversions counted (assembly/). `schedule="memory"` rewrites concats where it pays and
    orders the nodes for the least peak of live activations (SERENITY, schedule/memory.py);
    with `memory_budget` (bytes) a MemoryBudgetError says when no order fits.
    `schedule="parallel"` keeps the file order, then runs independent Halide steps side by
    side where the whole plan gets faster (DOS, selection/parallel.py).
    With AGO's intensive fusions among the passes (`compile --fusion ago`) and a tuning log,
    the plan is timed against the one the same log gives the graph without them, and the
    faster kept. Library-first (`CompileOptions.starts_from_library`): the plan is the faster
    library's session over the original graph unless a plan with generated kernels runs
    faster (selection/pipeline.py says the order). `deadline` bounds the whole compile
    (default: the tuning budget from now).
    """
    opts = CompileOptions.from_kwargs(options, **option_fields)
    input_shapes, input_values = _shapes(input_shapes), _values(input_values)
    unknown = sorted(set(opts.passes or ()) - set(PASSES))
    if unknown:
        raise OptionsError(f"unknown pass(es) {', '.join(unknown)}; known: {', '.join(PASSES)}")
    if progress is not None and not callable(getattr(progress, "write", None)):
        raise OptionsError(f"progress must be a text stream (sys.stderr, a file), not a "
                           f"{type(progress).__name__}")
    # `--budget` is the whole compile: import and passes, tuning, selection, assembly
    if deadline is None:
        deadline = Deadline.after(opts.tune.budget_s if opts.tune is not None else None)
    if _is_torch_module(model):
        from woodpecker.frontend.torch_import import export_module
        model = export_module(model, example_inputs)
    proto = load_model_proto(model)
    tgt = Target.parse(target, opts.threads, opts.force_threads)
    if tgt.device is not None:
        raise WoodpeckerError(
            f"a plan for {tgt.device.describe()} is a GPU plan folder, not a CompiledModel: "
            "build it with woodpecker.compiler_gpu.compile_gpu(model, folder, target) "
            "(`woodpecker gpu-plan`), or compile for target cpu")
    allowed = parse_engines(opts.engines)
    meta = {"source_sha256": hashlib.sha256(proto.SerializeToString()).hexdigest(),
            "options": opts.to_json(), "engines_allowed": allowed}
    if isinstance(model, (str, os.PathLike)):
        meta["source"] = os.path.basename(os.fspath(model))
    zoo = {p.key: p.value for p in proto.metadata_props if p.key.startswith("woodpecker.")}
    if zoo:
        meta["metadata"] = zoo
    original = OriginalGraph(proto, input_shapes, input_values)
    try:
        graph = import_onnx(proto, input_shapes, input_values)
    except (UnsupportedOpError, DynamicShapeError) as e:
        # Woodpecker cannot plan it node by node (an opset the converter cannot convert, an
        # element type numpy has not, a shape the data decides): the libraries run the user's
        # graph whole, allocating its outputs (no arena: frontend/whole.py)
        if not any(get_engine(n).caps.multi_node for n in allowed):
            raise
        original.why = first_line(e)
        try:
            # (its build context takes the original graph's own opset)
            return _measured_precision(
                original.plan(_assembly(allowed, tgt, 0, meta, opts), progress, deadline),
                proto, tgt, opts, progress)
        except OnnxRuntimeRefusal:         # the reference refuses the file: its own line
            raise
        except ModelError as refusal:      # no library runs it either (LibraryRefusal, …)
            raise LibraryRefusal(f"{first_line(e)}; and {refusal}") from None
    original.known = {v.name: (list(v.shape), v.dtype) for v in graph.outputs}
    generated = (opts.tune is not None or opts.tuning_log is not None) and \
        names.HALIDE in allowed
    library = original if opts.starts_from_library else None
    graphs = candidate_graphs(graph, opts, generated)
    selection = Selection(graphs, _assembly(allowed, tgt, graph.opset, meta, opts), opts,
                          library=library)
    if generated:
        log = _open_log(opts, selection.assembly, progress)   # a bad log fails before timing
        # the libraries' whole-model sessions first, within their share: what the tuned plan
        # must beat, measured out of the tuning's time (config.LIBRARY_FIRST_SHARE)
        selection = measure_libraries(selection, progress, deadline.share(LIBRARY_FIRST_SHARE))
        selection.log = _tuned(graphs[0].graph, log, opts, selection.assembly, progress,
                               deadline)
    return _measured_precision(select_plan(selection, progress, deadline), proto, tgt, opts,
                               progress)


def _measured_precision(model: CompiledModel, proto, tgt: Target, opts: CompileOptions,
                        progress: TextIO | None) -> CompiledModel:
    """A lower-precision plan with its accuracy against ONNX Runtime's float32 measured and
    recorded (`plan.meta["precision"]`, selection/accuracy.py) and said."""
    if opts.precision is Precision.FP32:
        return model
    report = precision_report(model, proto.SerializeToString(), tgt.threads, opts.precision)
    model.plan.meta["precision"] = report.to_json()
    print(report.said(), file=progress or sys.stderr, flush=True)
    return model


def _assembly(allowed: list[str], tgt: Target, opset: int, meta: dict,
              opts: CompileOptions) -> AssemblyOptions:
    return AssemblyOptions(tuple(allowed),
                           BuildContext(tgt.threads, opset, precision=opts.precision), tgt, meta,
                           opts.arena, schedule=PlanSchedule(opts.schedule, opts.regions))


def _open_log(opts: CompileOptions, assembly: AssemblyOptions, progress: TextIO | None):
    """The tuning log selection takes generated kernels from (default: the shared log in the
    Woodpecker cache); records its path and any template excluded in `assembly.meta`."""
    from woodpecker.cache import cache_dir
    from woodpecker.engines.halide.templates import weight_expanding
    from woodpecker.tune.driver import open_log

    meta = assembly.meta
    path = opts.tuning_log if opts.tuning_log is not None else \
        os.fspath(cache_dir() / "tuning.jsonl")
    # a memory plan keeps the process small too: no kernel that multiplies its weights
    lean = weight_expanding() if opts.schedule is ScheduleKind.MEMORY else frozenset()
    if lean:
        meta["templates_excluded"] = sorted(lean)
    meta["tuning"] = {"log": path}
    return open_log(path, opts.resume or opts.tuning_log is None or opts.tune is None,
                    progress or sys.stderr, assembly.target, lean,
                    opts.database and (opts.tune is None or opts.tune.database))


def _tuned(graph, log, opts: CompileOptions, assembly: AssemblyOptions,
           progress: TextIO | None, deadline: Deadline):
    """`log` with `graph`'s tasks tuned into it first when the compile tunes, until
    `config.SELECTION_SHARE` of the time to `deadline` is left; records what it did in
    `assembly.meta` (`tuning`, `stages_s`)."""
    from woodpecker.tune.driver import tune_graph

    meta, tune = assembly.meta, opts.tune
    meta.setdefault("stages_s", {})
    if tune is None:
        return log
    n0, start = len(log.records), time.monotonic()
    tune_graph(graph, assembly.target, log, tune, progress or sys.stderr,
               deadline.share(1 - SELECTION_SHARE))
    seconds = meta["stages_s"]["tuning"] = round(time.monotonic() - start, 1)
    meta["tuning"].update({"search": tune.search, "seed": tune.seed, "budget_s": tune.budget_s,
                           "seconds": seconds, "measurements": len(log.records) - n0})
    return log


def _mapping(given: Any, what: str, of: str) -> "Mapping | None":
    """`given` where it is None or a mapping, else one OptionsError line naming `what`."""
    if given is not None and not isinstance(given, Mapping):
        raise OptionsError(f"{what} must be a dict {{input name: {of}}}, not a "
                           f"{type(given).__name__}")
    return given


def _shapes(given: Any) -> "dict[str, tuple[int, ...]] | None":
    """`input_shapes` as {name: tuple of ints}, or one OptionsError line."""
    if _mapping(given, "input_shapes", "shape") is None:
        return None
    out = {}
    for name, shape in given.items():
        dims = tuple(shape) if isinstance(shape, (tuple, list)) else None
        if not isinstance(name, str) or dims is None or not all(
                isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0
                for d in dims):
            raise OptionsError(f"input_shapes[{name!r}] must be a tuple of whole numbers (0 or "
                               f"more), got {shape!r}")
        out[name] = tuple(int(d) for d in dims)
    return out


def _values(given: Any) -> "dict[str, np.ndarray] | None":
    """`input_values` as {name: array}, or one OptionsError line."""
    if _mapping(given, "input_values", "array") is None:
        return None
    out = {}
    for name, value in given.items():
        if not isinstance(name, str):
            raise OptionsError(f"input_values names its inputs by str, not {name!r}")
        try:
            out[name] = np.asarray(value)
        except (ValueError, TypeError) as e:
            raise OptionsError(f"input_values[{name!r}] is not an array: {first_line(e)}") \
                from None
    return out


def _is_torch_module(model: Any) -> bool:
    if isinstance(model, (str, bytes, os.PathLike, onnx.ModelProto)):
        return False
    try:
        import torch
    except ImportError:
        return False
    return isinstance(model, torch.nn.Module)
