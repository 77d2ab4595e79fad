"""Plan assembly: a graph whose engine per node is decided becomes a runnable `Plan`.

Contract: `assemble(graph, choices, options)` rewrites `graph` in place — NHWC layouts and the
conversions between them around generated kernels (`layout.py`), cheap data movement absorbed
into adjacent library regions (`regions.py`), Concat parts and reshapes written in place
(`inplace.py`) — then places every activation in one arena (schedule/arena.py) and returns the
plan, whose `PlanSchedule` (runtime/plan_schedule.py) is `options.schedule` with a memory
plan's region starts placed here. Selection (selection/) calls it on copies of the graph to
time candidate plans; the compiler calls it once on the final choice. It needs nothing from the
layers above it: what it needs of the compile is `AssemblyOptions`, plain data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from woodpecker.assembly.inplace import concat_aliases
from woodpecker.assembly.layout import assign_layouts
from woodpecker.assembly.regions import absorb_movement, arena_region_starts
from woodpecker.config import ARENA_EXACT_S
from woodpecker.engines import names
from woodpecker.engines.base import BuildContext
from woodpecker.engines.choice import Choice, Choices
from woodpecker.engines.registry import MOVEMENT, get_engine
from woodpecker.ir.graph import Graph
from woodpecker.options import ScheduleKind
from woodpecker.runtime.plan import Plan
from woodpecker.runtime.plan_schedule import PlanSchedule
from woodpecker.schedule.arena import plan_arena
from woodpecker.target import Target


@dataclass(frozen=True)
class AssemblyOptions:
    """What assembly needs of a compile: the engines allowed, the build context and target, the
    plan's metadata so far (copied into each plan: provenance), whether to plan an arena, and
    the plan's schedule (its kind, whether consecutive library nodes run as one region; the
    regions a memory plan's arena needs are placed here). `final`: the plan is the compile's
    result, whose memory-scheduled arena is placed exactly (a MILP of up to
    config.ARENA_EXACT_S); the candidate plans selection times take the greedy placement."""

    allowed: tuple[str, ...]
    context: BuildContext
    target: Target
    meta: dict[str, Any] = field(default_factory=dict)
    arena: bool = True
    final: bool = True
    schedule: PlanSchedule = PlanSchedule()


def assemble(graph: Graph, choices: Choices, options: AssemblyOptions) -> Plan:
    """The plan of `graph` (rewritten in place) with each node's `choices` (copied, then
    extended by the conversions inserted): NHWC layouts and their conversions around generated
    kernels, movement nodes absorbed into library regions, the arena."""
    meta = dict(options.meta)
    choices = {n.name: choices[n.name] for n in graph.nodes}
    if any(get_engine(c.engine).caps.generated for c in choices.values()):
        meta["layout_conversions"] = assign_layouts(graph, choices)
    elif "selection" in meta:
        meta["layout_conversions"] = 0
    regions = [e for e in options.allowed if get_engine(e).caps.multi_node]
    if options.schedule.library_regions and regions:
        nodes, ctx = graph.nodes, options.context

        def movable(i: int, region: str) -> bool:
            n = nodes[i]
            return get_engine(choices[n.name].engine).caps.views and n.op in MOVEMENT and \
                get_engine(region).supports(n, ctx)

        engines = absorb_movement([choices[n.name].engine for n in nodes], movable, regions,
                                  names.NUMPY)
        for n, e in zip(graph.nodes, engines):
            if e != choices[n.name].engine:
                choices[n.name] = Choice(e, why="data movement inside a library region")
    plan = Plan(graph, choices, options.target, meta, schedule=options.schedule,
                precision=options.context.precision)
    _place(plan, options.arena, options.final)
    return plan


def reordered(plan: Plan, order: Sequence[int], schedule: PlanSchedule | None = None,
              meta: dict[str, Any] | None = None) -> Plan:
    """A copy of `plan` with its nodes in `order` (node indices; topological), its `schedule`
    (default: the plan's) and `meta` entries set, the in-place parts and the arena placed anew
    for its steps. A schedule with `stages` (selection/parallel.py) runs consecutive nodes at
    the same time (runtime/stages.py), each stage one step, so its operators' inputs and
    outputs never share space."""
    graph = plan.graph.copy()
    graph.nodes = [graph.nodes[i] for i in order]
    new = Plan(graph, dict(plan.choices), plan.target, dict(plan.meta, **(meta or {})),
               directory=plan.directory, schedule=schedule or plan.schedule,
               precision=plan.precision)
    _place(new, plan.arena is not None)
    return new


def _place(plan: Plan, arena: bool, final: bool = True) -> None:
    """Concat parts written in place and the arena, for the plan's steps (fills `arena`)."""
    graph, meta, engines = plan.graph, plan.meta, plan.engines
    # In-place concats make a whole live from its first part: not under the memory schedule,
    # whose peak (and budget) counts the parts as values of their own.
    memory = plan.schedule.kind is ScheduleKind.MEMORY
    every = memory and plan.schedule.library_regions
    # a memory plan's regions write every value into the arena and hold at most the order's
    # peak, or `region_bytes` (a budget) where more
    starts = tuple(graph.nodes[i].name for i in
                   arena_region_starts(graph, engines, plan.schedule.region_bytes)) \
        if every else ()
    plan.schedule = replace(plan.schedule, every=every, region_starts=starts)
    steps = plan.steps()
    aliases = {} if memory else concat_aliases(graph, engines, steps)
    # the memory schedule's footprint is the point: its arena is placed exactly where the
    # greedy placements leave a gap above the live bound
    plan.arena = plan_arena(graph, steps, aliases, ARENA_EXACT_S if memory and final else 0.0,
                            plan.every) if arena else None
    if plan.arena is not None:
        meta["arena"] = {"size": plan.arena.size, "lower_bound": plan.arena.lower_bound,
                         "method": plan.arena.method}
