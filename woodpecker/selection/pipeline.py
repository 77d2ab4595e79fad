"""Selection's one entry point: from the candidate graphs and the libraries' sessions of the
user's original graph to the plan (WPK §2.5 system-level exploration; AGO's "fusion kept only
where it wins"; the thesis's XLVM, ch. 5: one selector over engines that declare what they run).

Contract: `select_plan(selection, out, deadline)` returns the compiled plan. `selection` holds
- `graphs`: `GraphCandidate`s — the graph after the passes asked for, and, where those include
  AGO's intensive fusions and generated kernels may be chosen, the same graph after the passes
  without them (`candidate_graphs`); each is ordered as the compile's schedule asks;
- `log`: the tuning log to take generated kernels from, None when none may be chosen;
- `library`: the user's original graph to run whole on each allowed library
  (selection/library_first.py), None when the compile is not library-first;
- `assembly`: the engines allowed, build context, target and the plan's metadata so far;
- `baseline`: step 1's plan where the compile measured it already (`measure_libraries`: a
  compile that tunes does so first, before the tuning, within config.LIBRARY_FIRST_SHARE).

What it does, in order, each decision a paired measurement (selection/compare.decide):
1. No generated kernel can be chosen and the compile is library-first: the plan *is* the faster
   library's session over the original graph — or Woodpecker's graph (its passes' rewrite) with
   every node on a library, timed in the same rounds, where that is faster by the margin
   (selection/libraries.rewrite_plans, library_first.fastest_library). Where no library runs
   the original graph, the node-level plan says which node no engine runs, and why.
2. Per graph candidate, node by node (`_node_selection`): AGO's fusions weighed against their
   parts (fusion.weigh_fusions), each tuned kernel against the libraries (per_node), each
   task's finalists in the plan (in_plan), the chosen kernels on the whole plan (refine), the
   fusions on the whole plan (fusion.confirm_fusions), the library of each library region
   (libraries.py: ONNX Runtime's regions moved to OpenVINO where the whole plan runs faster)
   and whether the regions run the file's nodes or Woodpecker's rewrite of them;
   then assembly, the memory schedule's
   re-ordering and arena check, DOS's parallel stages (parallel.py).
3. The plan with AGO's fusions against the plan without them, from the same log (when the
   first still runs a fusion), the faster kept (`meta["against_unfused"]`); the first takes
   `config.UNFUSED_PLAN_SHARE` of the selection time, the second the rest.
4. The plan against step 1's plan (`meta["library_first"]["against"]`): a plan with a
   generated kernel is kept only where it is faster by config.REFINE_MARGIN; one without
   *is* step 1's plan. Steps 2 and 3 end early enough to leave this comparison its time
   (library_first.against_seconds), so `--budget` bounds the compile.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from typing import TextIO

from woodpecker.assembly import AssemblyOptions, assemble, reordered
from woodpecker.config import IN_PLAN_SHARE, PER_NODE_SHARE, UNFUSED_PLAN_SHARE
from woodpecker.deadline import Deadline
from woodpecker.engines import names
from woodpecker.engines.choice import Choice, Choices
from woodpecker.engines.registry import choose, get_engine
from woodpecker.errors import KernelFailure, first_line
from woodpecker.ir.graph import Graph
from woodpecker.ops import INTENSIVE
from woodpecker.options import CompileOptions, ScheduleKind
from woodpecker.passes import DEFAULT, MEMORY, optimize
from woodpecker.passes import INTENSIVE as INTENSIVE_PASSES
from woodpecker.passes.precision import lower_precision
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.schedule.memory import MemoryBudgetError, format_bytes, schedule_memory
from woodpecker.selection.library_first import (
    LibraryRefusal,
    OriginalGraph,
    against_seconds,
    keep_faster,
)
from woodpecker.tune.records import TuningLog

# what a plan measured that the library's session, when it is kept instead, carries on
MEASURED = ("tuning", "stages_s", "selection", "in_plan", "plan_check", "fusion",
            "fusion_check", "library_choice", "against_unfused", "passes", "templates_excluded")


@dataclass
class GraphCandidate:
    """`graph` after `passes` (`stats`: what each did), ordered as `schedule` records."""

    label: str
    graph: Graph
    passes: tuple[str, ...]
    stats: dict
    schedule: dict
    untouched: Graph | None = None   # a copy selection does not rewrite (for rewrite_plans)

    def assembly(self, base: AssemblyOptions) -> AssemblyOptions:
        """`base` with this graph's passes and schedule in the plan's metadata."""
        return replace(base, meta={**base.meta, "passes": self.stats, "schedule": self.schedule,
                                   "stages_s": dict(base.meta.get("stages_s", {}))})


def candidate_graphs(graph: Graph, opts: CompileOptions, generated: bool,
                     ) -> list[GraphCandidate]:
    """The graphs selection plans from `graph` (the import, rewritten in place for the first):
    after the passes `opts` asks for, and — with generated kernels and AGO's intensive fusions
    among those passes — after the same passes without them (module docstring, step 3)."""
    passes = tuple(opts.passes) if opts.passes is not None else \
        MEMORY if opts.schedule is ScheduleKind.MEMORY else DEFAULT
    unfused = tuple(p for p in passes if p not in INTENSIVE_PASSES)
    todo = [("passes asked for", graph, passes)]
    if generated and unfused != passes:
        todo.append(("without AGO's fusions", graph.copy(), unfused))
    out = []
    for k, (label, g, p) in enumerate(todo):
        if k and not any(n.op in INTENSIVE for n in graph.nodes):
            break     # no intensive fusion in the first: the second would be the same graph
        stats = optimize(g, p)
        lowered = lower_precision(g, opts.precision)
        if lowered:
            stats = {**stats, "lower_precision": lowered}
        schedule = _schedule(g, opts.schedule, opts.memory_budget, fuse=set(MEMORY) <= set(p))
        out.append(GraphCandidate(label, g, p, stats, schedule, g.copy()))
    return out


@dataclass
class Selection:
    """What selection chooses from (module docstring)."""

    graphs: list[GraphCandidate]
    assembly: AssemblyOptions
    opts: CompileOptions
    log: TuningLog | None = None
    library: OriginalGraph | None = None
    baseline: CompiledModel | None = None   # `library`'s plan, measured before tuning


def measure_libraries(selection: Selection, out: TextIO | None = None,
                      deadline: Deadline = Deadline.NONE) -> Selection:
    """`selection` with its library baseline measured now (step 1's plan; the compile does
    this before tuning, so the whole-model comparisons come first and out of the tuning's
    time), or with no library where none runs the original graph."""
    if selection.library is None:
        return selection
    try:
        baseline = selection.library.plan(selection.assembly, out or sys.stderr, deadline,
                                          _rewrites(selection))
    except LibraryRefusal:
        return replace(selection, library=None)   # the node-level plan says which node, why
    return replace(selection, baseline=baseline)


def select_plan(selection: Selection, out: TextIO | None = None,
                deadline: Deadline = Deadline.NONE) -> CompiledModel:
    out = out or sys.stderr
    if selection.library is not None and selection.baseline is None:
        selection = measure_libraries(selection, out, deadline)
    library = selection.baseline
    if selection.log is None and library is not None:
        return library
    end = deadline     # step 4's: cut to its least rounds should the steps before run late
    if library is not None and selection.log is not None:
        deadline = deadline.less(against_seconds(library))   # kept for step 4
    first, *others = selection.graphs
    plan = _graph_plan(first, selection, out,
                       deadline.share(UNFUSED_PLAN_SHARE) if others else deadline)
    for other in others:
        if not any(n.op in INTENSIVE for n in plan.graph.nodes):
            break     # selection took every fusion apart: the plans would be of one graph
        print("planning the graph without AGO's fusions from the same tuning log, to compare",
              file=out, flush=True)
        try:
            alternative = _graph_plan(other, selection, out, deadline)
        except MemoryBudgetError:
            continue
        plan = _with_or_without_ago(plan, alternative, out, deadline)
    if selection.log is None or library is None:
        return plan    # (no library runs the original graph: Woodpecker's plan does)
    return _against_library(plan, library, out, end)


def _rewrites(selection: Selection):
    """What makes the plans of Woodpecker's graph (the first candidate, as its passes left
    it) with every node on the libraries (selection/libraries.rewrite_plans)."""
    from woodpecker.selection.libraries import rewrite_plans

    first = selection.graphs[0]
    if first.untouched is None:
        return None
    return lambda: rewrite_plans(first.untouched, first.assembly(selection.assembly))


def _graph_plan(candidate: GraphCandidate, selection: Selection, out: TextIO,
                deadline: Deadline) -> CompiledModel:
    """The plan of one graph candidate (module docstring, step 2)."""
    from woodpecker.selection.parallel import schedule_parallel

    graph, base, opts = candidate.graph, selection.assembly, selection.opts
    assembly = candidate.assembly(base)
    choices = {n.name: Choice(choose(n, list(base.allowed), base.context),
                              why="library preference") for n in graph.nodes}
    if selection.log is not None:
        # selection's candidate plans: no exact arena placement (only the plan compiled)
        _node_selection(graph, choices, selection.log, replace(assembly, final=False), out,
                        deadline)
    plan = assemble(graph, choices, assembly)
    if opts.schedule is ScheduleKind.MEMORY:
        plan = _memory_after_assembly(plan, opts.memory_budget)
    compiled = CompiledModel(plan)
    if opts.schedule is ScheduleKind.PARALLEL:
        compiled = schedule_parallel(compiled, out, deadline)
    return compiled


def _with_or_without_ago(fused: CompiledModel, unfused: CompiledModel, out: TextIO,
                         deadline: Deadline) -> CompiledModel:
    """The faster of the plan with AGO's fusions and the plan without (fusion.faster_plan);
    the one kept records the decision and what the fused plan's fusions measured."""
    from woodpecker.selection.fusion import faster_plan

    record = faster_plan(fused, unfused, out=out, deadline=deadline)
    kept = fused if record["kept"] else unfused
    if not record["kept"]:
        for key in ("fusion", "fusion_check"):
            if key in fused.plan.meta:
                kept.plan.meta[key] = fused.plan.meta[key]
    kept.plan.meta["against_unfused"] = record
    return kept


def _against_library(ours: CompiledModel, library: CompiledModel, out: TextIO,
                     deadline: Deadline = Deadline.NONE) -> CompiledModel:
    """`ours` where it has a generated kernel and runs faster than `library` (paired, in the
    time `select_plan` kept for it; past `deadline`, in its least rounds), else `library`
    carrying what the compile measured (tuning, selection) in its meta."""
    generated = any(get_engine(e).caps.generated for e in ours.plan.engines)
    record = library.plan.meta["library_first"]
    if generated:
        start = time.monotonic()
        kept, record["against"] = keep_faster(ours, library, out, deadline)
        record["against"]["seconds"] = round(time.monotonic() - start, 2)
        if kept:
            ours.plan.meta["library_first"] = record
            return ours
    else:
        record["against"] = {"kept": False, "why": "no generated kernel in the plan"}
    for key in MEASURED:
        if key in ours.plan.meta:
            library.plan.meta[key] = ours.plan.meta[key]
    return library


def _node_selection(graph: Graph, choices: Choices, log: TuningLog, assembly: AssemblyOptions,
                    out: TextIO, deadline: Deadline) -> None:
    """Select kernels by measurement per node, pick each task's finalist in the plan
    (selection/in_plan.py), then confirm the winners on the whole plan (selection/refine.py;
    plans built by assembly/); updates `choices`, fills `assembly.meta` (with each stage's
    seconds in `stages_s`). The stages split the time to `deadline` (config.PER_NODE_SHARE,
    IN_PLAN_SHARE), each stopping new work when its share is spent."""
    from woodpecker.selection.fusion import weigh_fusions
    from woodpecker.selection.per_node import select_kernels

    meta, allowed = assembly.meta, list(assembly.allowed)
    stages, clock = meta["stages_s"], [time.monotonic()]

    def lap(stage: str) -> None:
        now = time.monotonic()
        stages[stage] = round(now - clock[0], 1)
        clock[0] = now

    if any(n.op in INTENSIVE for n in graph.nodes):
        print("weighing each fusion against its parts on their own kernels", file=out,
              flush=True)
        meta["fusion"] = weigh_fusions(graph, choices, log, allowed, assembly.context, out=out,
                                       deadline=deadline.share(PER_NODE_SHARE))
        lap("fusion")
    print("selecting kernels: timing tuned Halide kernels against the libraries",
          file=out, flush=True)
    meta["selection"] = select_kernels(graph, choices, allowed, assembly.context, log, out=out,
                                       regions=assembly.schedule.library_regions,
                                       deadline=deadline.share(PER_NODE_SHARE))
    lap("per_node")
    tuned = {n.name: [c.kernel, *c.finalists.values()] for n in graph.nodes
             for c in [choices[n.name]] if c.kernel is not None}
    for _ in range(len(tuned) + 1):
        try:
            return _in_the_plan(graph, choices, log, assembly, out, deadline, lap)
        except KernelFailure as e:
            # a kernel checked alone that fails in the plan (issue 50's tuned run: a weight
            # handed over in another rank on PP-OCR's recognizer): its nodes go back to their
            # library, reported, and the stages run again
            failed = [name for name, specs in tuned.items()
                      if any(s is not None and s.file == e.file for s in specs)]
            if not failed:
                raise
            print(f"  {first_line(e)}: its node(s) {', '.join(failed[:4])} go back to the "
                  "libraries", file=out, flush=True)
            meta.setdefault("kernels_failed", []).append(
                {"file": e.file, "nodes": failed, "why": first_line(e)})
            meta["selection"] = [r for r in meta["selection"] if r["node"] not in failed]
            for name in failed:
                del tuned[name]
                if name in choices:
                    node = next(n for n in graph.nodes if n.name == name)
                    choices[name] = Choice(choose(node, allowed, assembly.context),
                                           why=f"its tuned kernel failed in the plan ({e.file})")


def _in_the_plan(graph: Graph, choices: Choices, log: TuningLog, assembly: AssemblyOptions,
                 out: TextIO, deadline: Deadline, lap) -> None:
    """The stages after per-node timing (`_node_selection`), which run whole plans."""
    from woodpecker.selection.in_plan import choose_in_plan
    from woodpecker.selection.libraries import choose_libraries
    from woodpecker.selection.refine import refine_selection

    meta, allowed = assembly.meta, list(assembly.allowed)
    if meta["selection"]:
        print("choosing among each task's finalists in the plan", file=out, flush=True)
        meta["in_plan"] = choose_in_plan(graph, choices, assembly, out=out,
                                         deadline=deadline.share(IN_PLAN_SHARE))
        lap("in_plan")
        print("checking the chosen Halide kernels on the whole plan", file=out, flush=True)
        before = [choose(n, allowed, assembly.context) for n in graph.nodes]
        engines, meta["plan_check"] = refine_selection(graph, before, choices,
                                                       meta["selection"], assembly,
                                                       out=out, deadline=deadline)
        lap("plan_check")
        for node, engine in zip(graph.nodes, engines):
            choice = choices[node.name]
            if engine != choice.engine:
                choice.why += f"; whole-plan check: {engine}"
            choice.engine = engine
        if any(n.op in INTENSIVE for n in graph.nodes):
            _check_fusions(graph, choices, log, assembly, out, deadline)
            lap("fusion_check")
    for choice in choices.values():
        if choice.engine != names.HALIDE:
            choice.kernel = None
    if any(get_engine(e).caps.multi_node for e in allowed) and \
            any(c.engine == names.HALIDE for c in choices.values()):
        if deadline.passed():   # its first plans build sessions of every region: seconds
            print("library regions: budget spent, left on their preferred library", file=out,
                  flush=True)
            meta["library_choice"] = [{"kept": False, "why": "budget spent"}]
            return
        print("choosing the library of each library region, and its nodes, on the whole plan",
              file=out, flush=True)
        meta["library_choice"] = choose_libraries(graph, choices, assembly, out=out,
                                                  deadline=deadline)
        lap("libraries")


def _check_fusions(graph: Graph, choices: Choices, log: TuningLog, assembly: AssemblyOptions,
                   out: TextIO, deadline: Deadline) -> None:
    """After the plan check: conv chains left on a library taken apart, then the fusions on
    generated kernels kept only where the whole plan is faster with them
    (selection/fusion.py); `plan.meta["fusion"]` records say which were taken apart."""
    from woodpecker.selection.fusion import confirm_fusions, unfuse_on_libraries

    meta = assembly.meta
    on_library = unfuse_on_libraries(graph, choices, list(assembly.allowed), assembly.context)
    check = meta["fusion_check"] = confirm_fusions(graph, choices, log, assembly, out=out,
                                                   deadline=deadline)
    apart = set() if check is None or check["kept"] else set(check["nodes"])
    for record in meta.get("fusion", []):
        if record["node"] in on_library or record["node"] in apart:
            record.update(fused=False,
                          whole_plan="library" if record["node"] in on_library else "apart")


def _schedule(graph: Graph, schedule: ScheduleKind, budget: int | None, fuse: bool) -> dict:
    """Order the graph's nodes; returns what the plan records about it. With `fuse` (the
    memory pipeline's passes ran), the memory schedule fuses the separable pairs its rewriting
    left where the peak allows."""
    if schedule is not ScheduleKind.MEMORY:
        return {"kind": schedule.value}
    result = schedule_memory(graph, rewrite=True, budget=budget, fuse=fuse)
    return {"kind": schedule.value, "peak_bytes": result.peak, "optimal": result.report.optimal,
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
        plan = reordered(plan, [index[n.name] for n in g.nodes], meta={"schedule": sched})
    sched = plan.meta["schedule"]
    if budget is None:
        return plan
    if plan.arena is None:
        raise MemoryBudgetError("a memory budget needs the arena (do not turn it off)")
    if plan.every:    # regions may hold up to the budget: fewer steps (runtime/steps.py)
        larger = reordered(plan, range(len(plan.graph.nodes)),
                           replace(plan.schedule, region_bytes=budget),
                           meta={"schedule": dict(sched, region_bytes=budget)})
        if larger.arena.size <= budget:
            plan = larger
    if plan.arena.size > budget:
        raise MemoryBudgetError(
            f"the plan's arena needs {format_bytes(plan.arena.size)}, over the memory budget "
            f"of {format_bytes(budget)} (the least peak of live activations "
            f"{'is' if sched['optimal'] else 'found is'} {format_bytes(sched['peak_bytes'])})")
    return plan
