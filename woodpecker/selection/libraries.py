"""Which library runs each library region of a plan: ONNX Runtime's regions against OpenVINO's
(issue 50; WPK §2.5's system-level exploration, here between the libraries themselves; the
thesis's XLVM, ch. 5: engines declare what they run, one selector maps the work to them).

Contract: `choose_libraries(graph, choices, assembly, out=, deadline=)` moves library regions
of the plan `choices` describe to another multi-node library where the whole plan runs faster
there, updating `choices`, then chooses what the regions run (below), and returns one record
per candidate tried (selection/compare's Decision shape, with `engine` and `nodes` added; or
`kept: False` and `why`).

A region is a maximal run of consecutive nodes on multi-node libraries or on numpy (the data
movement that assembly absorbs into the adjacent region, assembly/regions.py) holding at least
one library node. For each other allowed multi-node library, in the order allowed:
1. every region whose library nodes it all runs (`Engine.supports`, its typed capabilities)
   moves to it at once — the plan is checked (its outputs against the current plan's on one
   seeded input, config.TOLERANCE relative to the largest magnitude, as library-first checks
   a library) and timed paired against the current plan (`decide`, bar 1.0: faster at all);
2. where that was not kept and more than one region could move, region by region, most nodes
   first, each kept only by `config.REFINE_MARGIN` (a region boundary moved on noise costs a
   session call), while the longest trial so far still fits before `deadline` (which the
   stage moves earlier by its first plan's build time: the final plan's build comes after).
3. last, the plan with its regions made from Woodpecker's nodes (its passes' rewrite,
   frontend/onnx_export.py) instead of the file's (engines/onnx_step.original_region), kept
   only by the margin: a library region runs the user's own nodes unless the rewrite is
   measurably faster
   (`benchmarks/original_regions.py`, Zen 4: equal within 1 % on 7 of 10 models, the rewrite
   ahead on transformer_encoder, 0.893 of ONNX Runtime against 1.006, and PP-OCRv4's
   detector, 0.925 against 1.008); kept, it clears `graph.source`.
Choice written down here: regions move whole, never node by node — a library's speed comes
from its fusions and layouts across a region (issue 50: ORT regions over Woodpecker's graph
0–6 % slower than ORT; OpenVINO 1.5–2.5× ONNX Runtime on the set's models on Zen 4), which a
per-node timing cannot see.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from woodpecker.assembly import AssemblyOptions, assemble
from woodpecker.bench.compare import random_feeds
from woodpecker.config import REFINE_MARGIN, REFINE_RUNS
from woodpecker.deadline import Deadline
from woodpecker.engines.choice import Choice, Choices
from woodpecker.engines.names import NUMPY
from woodpecker.engines.registry import choose, get_engine
from woodpecker.errors import WoodpeckerError, first_line
from woodpecker.ir.graph import Graph
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.selection.compare import Decision, Timed, decide
from woodpecker.selection.library_first import outputs_agree

CURRENT = "the plan so far"    # the decisions' base label
REWRITE = "regions of Woodpecker's nodes"


def library_regions(graph: Graph, choices: Choices) -> list[list[str]]:
    """The plan's library regions (module docstring): each as the names of its library nodes,
    in graph order."""
    regions, run = [], []
    for node in graph.nodes:
        engine = choices[node.name].engine
        if get_engine(engine).caps.multi_node:
            run.append(node.name)
        elif engine != NUMPY and run:
            regions.append(run)
            run = []
    return regions + ([run] if run else [])


def movable_regions(graph: Graph, choices: Choices, name: str, ctx,
                    ask: bool = True) -> list[list[str]]:
    """The library regions `choices` put on other libraries that library `name` runs whole
    (its `supports`, node by node; without `ask`, what it `declares`: no one-node build)."""
    engine, by_name = get_engine(name), {n.name: n for n in graph.nodes}
    runs = (lambda n: engine.supports(n, ctx)) if ask else engine.declares
    return [r for r in library_regions(graph, choices)
            if any(choices[n].engine != name for n in r)
            and all(runs(by_name[n]) for n in r)]


def choose_libraries(graph: Graph, choices: Choices, assembly: AssemblyOptions,
                     runs: int = REFINE_RUNS, out: TextIO | None = None,
                     deadline: Deadline = Deadline.NONE) -> list[dict]:
    out = out or sys.stderr
    start = time.monotonic()
    current = _Plan(graph, choices, assembly)
    # the plan selection assembles after this stage takes about as long to build: its time is
    # kept; a trial (a plan built, checked, timed against this one) starts only where the
    # longest so far — at first, a build and the timing at the current plan's first call —
    # still ends before the deadline (RAFT's 3-minute compile started one 1 s before its
    # deadline, which ended 2.7 s after it; its final plan then took 2.2 s to build)
    build_s = time.monotonic() - start
    deadline = deadline.less(build_s)
    longest = build_s + current.timing_seconds(runs)
    records: list[dict] = []

    def trial(label: str, make: Callable[[], _Plan], bar: float, **extra) -> bool:
        """Build the candidate (`make`) and time it against the current plan, if the longest
        trial so far still fits before the deadline; whether it was kept."""
        nonlocal current, longest
        if deadline.left() < longest:
            return False
        began = time.monotonic()
        plan = make()
        record = current.against(plan, label, runs, bar, deadline)
        records.append({**record, **extra})
        longest = max(longest, time.monotonic() - began)
        said = record["why"] if "why" in record else Decision.said(record)
        print(f"  library regions: {said}", file=out, flush=True)
        if record["kept"]:
            current = plan
        return record["kept"]

    for name in [e for e in assembly.allowed if get_engine(e).caps.multi_node]:
        movable = movable_regions(graph, current.choices, name, assembly.context)
        tries = [(f"every library region on {name}", sum(movable, []), 1.0)] if movable else []
        if len(movable) > 1:
            tries += [(f"a region of {len(r)} node(s) on {name}", r, 1 - REFINE_MARGIN)
                      for r in sorted(movable, key=len, reverse=True)]
        for k, (label, nodes, bar) in enumerate(tries):
            if k == 1 and records[-1]["kept"]:
                break     # every region moved at once: none is left to try alone
            if deadline.left() < longest:
                break
            moved = dict(current.choices)
            moved.update({n: Choice(name, why=f"library regions: {label}") for n in nodes})
            trial(label, lambda moved=moved: _Plan(graph, moved, assembly), bar, engine=name,
                  nodes=nodes)
    # (no plan built that would end past the deadline: Swin-T's regions take seconds to build)
    if graph.source is not None and any(len(s) > 1 for s in current.model.steps) and \
            trial(REWRITE, lambda: _Plan(graph, current.choices, assembly, rewrite=True),
                  1 - REFINE_MARGIN, engine=None, nodes=[]):
        graph.source = None
    choices.update(current.choices)
    return records


class _Plan:
    """A candidate plan: `choices` over `graph` assembled (on a copy; with `rewrite`, its
    regions made from Woodpecker's nodes) and run on one seeded input; `against(other, …)`
    checks `other`'s outputs and times it against this one."""

    def __init__(self, graph: Graph, choices: Choices, assembly: AssemblyOptions,
                 rewrite: bool = False) -> None:
        self.choices = choices
        copy = graph.copy()
        if rewrite:
            copy.source = None
        self.model = CompiledModel(assemble(copy, choices, assembly))

    def timing_seconds(self, runs: int) -> float:
        """About how long `against` times this plan and another like it: `runs` calls each
        (3 a round, 2 timed) and warm-ups, at the seconds of one call now (a first call:
        slower, so the estimate errs long)."""
        feeds = random_feeds(self.model)
        start = time.monotonic()
        try:
            self.model.run(feeds)
        except WoodpeckerError:
            return 0.0
        return 2 * (2 + runs * 1.5) * (time.monotonic() - start)

    def against(self, other: "_Plan", label: str, runs: int, bar: float,
                deadline: Deadline) -> dict:
        feeds = random_feeds(self.model)
        try:
            want, got = self.model.run(feeds), other.model.run(feeds)
        except WoodpeckerError as e:
            return {"kept": False, "why": f"{label}: not run: {first_line(e)[:160]}"}
        tolerance = self.model.plan.precision.tolerance
        bad = next((k for k, w in want.items() if not outputs_agree(got[k], w, tolerance)),
                   None)
        if bad is not None:
            return {"kept": False, "why": f"{label}: output {bad!r} differs from the plan's "
                                          f"by more than {tolerance:g} relative"}
        return decide(Timed.plan(label, other.model, feeds),
                      Timed.plan(CURRENT, self.model, feeds), runs, bar, deadline).to_json()


def rewrite_plans(graph: Graph, assembly: AssemblyOptions) -> dict[str, CompiledModel]:
    """Woodpecker's graph (its passes' rewrite) with every node on the libraries: for each
    allowed multi-node library, the plan with every region it runs moved to it, its regions
    made from Woodpecker's nodes; by label, plans of the same engines once."""
    plans: dict[str, CompiledModel] = {}
    seen = set()
    allowed, ctx = list(assembly.allowed), assembly.context
    for name in [e for e in allowed if get_engine(e).caps.multi_node]:
        copy = graph.copy()
        copy.source = None
        choices = {n.name: Choice(choose(n, allowed, ctx), why="library preference")
                   for n in copy.nodes}
        # what it declares: a region it cannot build after all fails to build (skipped),
        # one it computes otherwise fails the outputs check (library_first._check_outputs)
        for region in movable_regions(copy, choices, name, ctx, ask=False):
            choices.update({n: Choice(name, why=f"{REWRITE} on {name}") for n in region})
        engines = tuple(choices[n.name].engine for n in copy.nodes)
        if engines in seen:
            continue
        seen.add(engines)
        try:
            plans[f"Woodpecker's graph on {name}"] = CompiledModel(assemble(copy, choices,
                                                                            assembly))
        except Exception:  # noqa: BLE001 - a library's own error while building a region
            continue
    return plans
