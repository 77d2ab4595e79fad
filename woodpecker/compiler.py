"""The compile pipeline: frontend → passes → engine per node → plan (DESIGN.md)."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TextIO

import onnx

from woodpecker.assembly import AssemblyOptions, assemble, reordered
from woodpecker.config import IN_PLAN_SHARE, PER_NODE_SHARE, SELECTION_SHARE
from woodpecker.deadline import Deadline
from woodpecker.engines import names
from woodpecker.engines.base import BuildContext
from woodpecker.engines.choice import Choice, Choices
from woodpecker.engines.registry import choose, get_engine, parse_engines
from woodpecker.errors import DynamicShapeError, ModelError, UnsupportedOpError, first_line
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.ops import INTENSIVE
from woodpecker.options import CompileOptions
from woodpecker.passes import DEFAULT, MEMORY, optimize
from woodpecker.passes import INTENSIVE as INTENSIVE_PASSES
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.schedule.memory import MemoryBudgetError, format_bytes, schedule_memory
from woodpecker.selection.library_first import LibraryRefusal
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
    the plan is timed against the one the same compile makes without them, from the same log,
    and the faster kept (`_against_unfused`). `deadline` bounds the whole compile (default:
    the tuning budget from now).
    """
    opts = CompileOptions.from_kwargs(options, **option_fields)
    # `--budget` is the whole compile: import and passes, tuning, selection, assembly
    if deadline is None:
        deadline = Deadline.after(opts.tune.budget_s if opts.tune is not None else None)
    if _is_torch_module(model):
        from woodpecker.frontend.torch_import import export_module
        model = export_module(model, example_inputs)
    proto = load_model_proto(model)
    tgt = Target.parse(target, opts.threads, opts.force_threads)
    allowed = parse_engines(opts.engines)
    meta = {"source_sha256": hashlib.sha256(proto.SerializeToString()).hexdigest(),
            "options": opts.to_json(), "engines_allowed": allowed,
            "library_regions": opts.regions}
    if isinstance(model, (str, os.PathLike)):
        meta["source"] = os.path.basename(os.fspath(model))
    zoo = {p.key: p.value for p in proto.metadata_props if p.key.startswith("woodpecker.")}
    if zoo:
        meta["metadata"] = zoo
    try:
        graph = import_onnx(proto, input_shapes, input_values)
    except (UnsupportedOpError, DynamicShapeError) as e:
        # Woodpecker cannot plan it node by node (an opset the converter cannot convert, an
        # element type numpy has not, a shape the data decides): the libraries run the user's
        # graph whole, allocating its outputs (no arena: frontend/whole.py)
        if not any(get_engine(n).caps.multi_node for n in allowed):
            raise
        try:
            return _whole_on_library(proto, opts, tgt, allowed, meta, input_shapes,
                                     input_values, progress, deadline, why=first_line(e))
        except ModelError as refusal:      # no library runs it either (LibraryRefusal, …)
            raise LibraryRefusal(f"{first_line(e)}; and {refusal}") from None
    known = {v.name: (list(v.shape), v.dtype) for v in graph.outputs}
    generated = (opts.tune is not None or opts.tuning_log is not None) and \
        names.HALIDE in allowed
    if opts.starts_from_library and not generated:
        # no generated kernel can be chosen: the plan is the faster library's session
        try:
            return _whole_on_library(proto, opts, tgt, allowed, meta, input_shapes,
                                     input_values, progress, deadline, known=known)
        except LibraryRefusal:
            pass    # the node-level plan says which node no engine runs, and why
    passes = opts.passes if opts.passes is not None else \
        MEMORY if opts.schedule == "memory" else DEFAULT
    stats = optimize(graph, passes)
    memory = _schedule(graph, opts.schedule, opts.memory_budget,
                       fuse=set(MEMORY) <= set(passes))
    ctx = BuildContext(tgt.threads, graph.opset)
    choices = {n.name: Choice(choose(n, allowed, ctx), why="library preference")
               for n in graph.nodes}
    meta = {**meta, "passes": stats, "schedule": memory}
    assembly = AssemblyOptions(tuple(allowed), ctx, tgt, meta, opts.arena)
    unfused = tuple(p for p in passes if p not in INTENSIVE_PASSES)
    against = generated and unfused != passes and any(n.op in INTENSIVE for n in graph.nodes)
    if generated:
        # selection's candidate plans: no exact arena placement (only the plan compiled)
        _generated_kernels(graph, choices, opts, replace(assembly, final=False), progress,
                           deadline, selection_share=0.5 if against else 1.0)
    plan = assemble(graph, choices, assembly)
    if opts.schedule == "memory":
        plan = _memory_after_assembly(plan, opts.memory_budget)
    compiled = CompiledModel(plan)
    if opts.schedule == "parallel":
        from woodpecker.selection.parallel import schedule_parallel
        compiled = schedule_parallel(compiled, progress, deadline)
    if against and any(n.op in INTENSIVE for n in compiled.graph.nodes):
        # (selection may have taken every fusion apart: the plans would be of one graph)
        compiled = _against_unfused(compiled, proto, opts, unfused, tgt, input_shapes,
                                    input_values, progress, deadline)
    if not opts.starts_from_library or not generated:
        return compiled
    try:
        library = _whole_on_library(proto, opts, tgt, allowed, meta, input_shapes,
                                    input_values, progress, deadline, known=known)
    except LibraryRefusal:
        return compiled    # no library runs the original graph: Woodpecker's plan does
    return _against_library(compiled, library, progress, deadline)


def _whole_on_library(proto, opts: CompileOptions, tgt: Target, allowed: list[str],
                      meta: dict, input_shapes, input_values, progress: TextIO | None,
                      deadline: Deadline, why: str | None = None,
                      known=None) -> CompiledModel:
    """The faster allowed library running the user's original graph as one session
    (frontend/whole.py, selection/library_first.py); `why` Woodpecker could not plan it node by
    node, when that is the reason; `known`: the node-level import's output types, where there
    is one. LibraryRefusal (one line, each library's reason) where no
    library runs it."""
    from woodpecker.frontend.whole import whole_graph
    from woodpecker.selection.library_first import fastest_library, library_plans

    whole = whole_graph(proto, input_shapes, input_values, known)
    out = progress or sys.stderr
    if why is not None:
        print(f"Woodpecker has no node-level plan for this model ({why}); the libraries run "
              "its original graph", file=out, flush=True)
    # no arena: the library allocates the outputs it returns (no copy out of an arena; a
    # dimension the data decides is fine)
    assembly = AssemblyOptions(tuple(allowed), BuildContext(tgt.threads, whole.opset), tgt,
                               {**meta, "schedule": {"kind": "file"}}, arena=False)
    plans, refused = library_plans(whole, assembly)
    library, record = fastest_library(plans, out, deadline)
    library.plan.meta["library_first"] = {**record, **({"refused": refused} if refused else {}),
                                          **({"why": why} if why else {})}
    return library


def _against_library(ours: CompiledModel, library: CompiledModel, progress: TextIO | None,
                     deadline: Deadline) -> CompiledModel:
    """`ours` where it has a generated kernel and runs faster than `library` (paired), else
    `library` carrying what the compile measured (tuning, selection) in its meta."""
    from woodpecker.selection.library_first import keep_faster

    generated = any(get_engine(e).caps.generated for e in ours.plan.engines)
    record = library.plan.meta["library_first"]
    if generated:
        kept, record["against"] = keep_faster(ours, library, progress, deadline)
        if kept:
            ours.plan.meta["library_first"] = record
            return ours
    else:
        record["against"] = {"kept": "library", "why": "no generated kernel in the plan"}
    for key in ("tuning", "stages_s", "selection", "in_plan", "plan_check", "fusion",
                "fusion_check", "against_unfused", "passes"):
        if key in ours.plan.meta:
            library.plan.meta[key] = ours.plan.meta[key]
    return library


def _against_unfused(fused: CompiledModel, proto, opts: CompileOptions,
                     passes: tuple[str, ...], target: Target, input_shapes, input_values,
                     progress: TextIO | None, deadline: Deadline) -> CompiledModel:
    """`fused` (a plan with AGO's intensive fusions) or the plan compiled with `passes` (the
    same without them) from the same tuning log, no tuning, whichever runs faster
    (selection/fusion.faster_plan); the result records the comparison in
    `meta["against_unfused"]` and the options asked for."""
    from woodpecker.selection.fusion import faster_plan

    print("compiling the plan without AGO's fusions from the same tuning log, to compare",
          file=progress or sys.stderr, flush=True)
    log = fused.plan.meta["tuning"]["log"]     # the log the fused plan was selected from
    try:
        unfused = compile(proto, replace(opts, passes=passes, tune=None, tuning_log=log,
                                         resume=True, library_first=False),
                          target=target, input_shapes=input_shapes, input_values=input_values,
                          progress=progress, deadline=deadline)
    except MemoryBudgetError:
        return fused
    record = faster_plan(fused, unfused, out=progress, deadline=deadline)
    kept = fused if record["kept"] else unfused
    if not record["kept"]:
        for key in ("options", "tuning", "fusion", "fusion_check"):
            if key in fused.plan.meta:
                kept.plan.meta[key] = fused.plan.meta[key]
    kept.plan.meta["against_unfused"] = record
    return kept


def _schedule(graph, schedule: str, budget: int | None, fuse: bool) -> dict:
    """Order the graph's nodes; returns what the plan records about it. With `fuse` (the
    memory pipeline's passes ran), the memory schedule fuses the separable pairs its rewriting
    left where the peak allows."""
    if schedule in ("file", "parallel"):
        return {"kind": schedule}
    result = schedule_memory(graph, rewrite=True, budget=budget, fuse=fuse)
    return {"kind": "memory", "peak_bytes": result.peak, "optimal": result.report.optimal,
            "rewrites": result.rewrites, "fused_separable": result.fused,
            "seconds": round(result.seconds, 3),
            **({"budget_bytes": budget} if budget is not None else {})}


def _memory_after_assembly(plan, budget: int | None):
    """The memory-scheduled plan once more ordered for the least peak if assembly added nodes
    (layout conversions around generated kernels hold activations of their own), and its
    arena — all its activation memory — checked against `budget`: a MemoryBudgetError unless
    it fits (the plan records the budget, `meta["schedule"]["budget_bytes"]`)."""
    if plan.meta.get("layout_conversions"):
        g = plan.graph.copy()
        result = schedule_memory(g, rewrite=False, budget=budget)
        index = {n.name: i for i, n in enumerate(plan.graph.nodes)}
        sched = dict(plan.meta["schedule"], peak_bytes=result.peak,
                     optimal=result.report.optimal, after_assembly=True)
        plan = reordered(plan, [index[n.name] for n in g.nodes], schedule=sched)
    sched = plan.meta["schedule"]
    if budget is None:
        return plan
    if plan.arena is None:
        raise MemoryBudgetError("a memory budget needs the arena (do not turn it off)")
    if plan.every:    # regions may hold up to the budget: fewer steps (runtime/regions.py)
        larger = reordered(plan, range(len(plan.graph.nodes)),
                           schedule=dict(sched, region_bytes=budget))
        if larger.arena.size <= budget:
            plan = larger
    if plan.arena.size > budget:
        raise MemoryBudgetError(
            f"the plan's arena needs {format_bytes(plan.arena.size)}, over the memory budget "
            f"of {format_bytes(budget)} (the least peak of live activations "
            f"{'is' if sched['optimal'] else 'found is'} {format_bytes(sched['peak_bytes'])})")
    return plan


def _is_torch_module(model: Any) -> bool:
    if isinstance(model, (str, bytes, os.PathLike, onnx.ModelProto)):
        return False
    try:
        import torch
    except ImportError:
        return False
    return isinstance(model, torch.nn.Module)


def _generated_kernels(graph, choices: Choices, opts: CompileOptions,
                       assembly: AssemblyOptions, progress: TextIO | None,
                       deadline: Deadline, selection_share: float = 1.0) -> None:
    """Tune (optionally), select kernels by measurement per node, pick each task's finalist in
    the plan (selection/in_plan.py), then confirm the winners on the whole plan
    (selection/refine.py; plans built by assembly/); updates `choices`, fills
    `assembly.meta` (with each stage's seconds in `stages_s`). Tuning ends when
    `config.SELECTION_SHARE` of the time to `deadline` is left; the selection stages split
    that (config.PER_NODE_SHARE, IN_PLAN_SHARE), each stopping new work when its share is
    spent; `selection_share` of the time left after tuning is this selection's (the rest:
    the plan without AGO's fusions, `_against_unfused`)."""
    from woodpecker.cache import cache_dir
    from woodpecker.engines.halide.templates import weight_expanding
    from woodpecker.selection.fusion import weigh_fusions
    from woodpecker.selection.in_plan import choose_in_plan
    from woodpecker.selection.per_node import select_kernels
    from woodpecker.selection.refine import refine_selection
    from woodpecker.tune.session import open_log, tune_graph

    progress = progress or sys.stderr
    meta, tune = assembly.meta, opts.tune
    path = opts.tuning_log if opts.tuning_log is not None else \
        os.fspath(cache_dir() / "tuning.jsonl")
    # a memory plan keeps the process small too: no kernel that multiplies its weights
    lean = weight_expanding() if opts.schedule == "memory" else frozenset()
    if lean:
        meta["templates_excluded"] = sorted(lean)
    log = open_log(path, opts.resume or opts.tuning_log is None or tune is None, progress,
                   assembly.target, lean)
    stages = meta["stages_s"] = {}
    clock = [time.monotonic()]

    def lap(stage: str) -> None:
        now = time.monotonic()
        stages[stage] = round(now - clock[0], 1)
        clock[0] = now

    if tune is not None:
        n0 = len(log.records)
        tune_graph(graph, assembly.target, log, tune, progress,
                   deadline.share(1 - SELECTION_SHARE))
        lap("tuning")
        meta["tuning"] = {"log": path, "search": tune.search, "seed": tune.seed,
                          "budget_s": tune.budget_s, "seconds": stages["tuning"],
                          "measurements": len(log.records) - n0}
    else:
        meta["tuning"] = {"log": path}
    deadline = deadline.share(selection_share)
    if any(n.op in INTENSIVE for n in graph.nodes):
        print("weighing each fusion against its parts on their own kernels", file=progress,
              flush=True)
        meta["fusion"] = weigh_fusions(graph, choices, log, list(assembly.allowed),
                                       assembly.context, out=progress,
                                       deadline=deadline.share(PER_NODE_SHARE))
        lap("fusion")
    print("selecting kernels: timing tuned Halide kernels against the libraries",
          file=progress, flush=True)
    before = [choices[n.name].engine for n in graph.nodes]
    meta["selection"] = select_kernels(graph, choices, list(assembly.allowed), assembly.context,
                                       log, out=progress, regions=meta["library_regions"],
                                       deadline=deadline.share(PER_NODE_SHARE))
    lap("per_node")
    if meta["selection"]:
        print("choosing among each task's finalists in the plan", file=progress, flush=True)
        meta["in_plan"] = choose_in_plan(graph, choices, assembly, out=progress,
                                         deadline=deadline.share(IN_PLAN_SHARE))
        lap("in_plan")
        print("checking the chosen Halide kernels on the whole plan", file=progress, flush=True)
        engines, meta["plan_check"] = refine_selection(graph, before, choices,
                                                       meta["selection"], assembly,
                                                       out=progress, deadline=deadline)
        lap("plan_check")
        for node, engine in zip(graph.nodes, engines):
            choice = choices[node.name]
            if engine != choice.engine:
                choice.why += f"; whole-plan check: {engine}"
            choice.engine = engine
        if any(n.op in INTENSIVE for n in graph.nodes):
            _check_fusions(graph, choices, log, assembly, progress, deadline)
            lap("fusion_check")
    for choice in choices.values():
        if choice.engine != names.HALIDE:
            choice.kernel = None


def _check_fusions(graph, choices: Choices, log, assembly: AssemblyOptions,
                   progress: TextIO, deadline: Deadline) -> None:
    """After the plan check: conv chains left on a library taken apart, then the fusions on
    generated kernels kept only where the whole plan is faster with them
    (selection/fusion.py); `plan.meta["fusion"]` records say which were taken apart."""
    from woodpecker.selection.fusion import confirm_fusions, unfuse_on_libraries

    meta = assembly.meta
    on_library = unfuse_on_libraries(graph, choices, list(assembly.allowed), assembly.context)
    check = meta["fusion_check"] = confirm_fusions(graph, choices, log, assembly, out=progress,
                                                   deadline=deadline)
    apart = set() if check is None or check["kept"] else set(check["nodes"])
    for record in meta.get("fusion", []):
        if record["node"] in on_library or record["node"] in apart:
            record.update(fused=False,
                          whole_plan="library" if record["node"] in on_library else "apart")
