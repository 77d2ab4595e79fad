"""Which library runs each library region of a plan: ONNX Runtime's regions against OpenVINO's
(issue 50; WPK §2.5's system-level exploration, here between the libraries themselves; the
thesis's XLVM, ch. 5: engines declare what they run, one selector maps the work to them).

Contract: `choose_libraries(graph, choices, assembly, out=, deadline=)` moves library regions
of the plan `choices` describe to another multi-node library where the whole plan runs faster
there, updating `choices`, and returns one record per candidate tried (selection/compare's
Decision shape, with `engine` and `nodes` added; or `kept: False` and `why`).

A region is a maximal run of consecutive nodes on multi-node libraries or on numpy (the data
movement that assembly absorbs into the adjacent region, assembly/regions.py) holding at least
one library node. For each other allowed multi-node library, in the order allowed:
1. every region whose library nodes it all runs (`Engine.supports`, its typed capabilities)
   moves to it at once — the plan is checked (its outputs against the current plan's on one
   seeded input, config.TOLERANCE relative to the largest magnitude, as library-first checks
   a library) and timed paired against the current plan (`decide`, bar 1.0: faster at all);
2. where that was not kept and more than one region could move, region by region, most nodes
   first, each kept only by `config.REFINE_MARGIN` (a region boundary moved on noise costs a
   session call), until `deadline`.
Choice written down here: regions move whole, never node by node — a library's speed comes
from its fusions and layouts across a region (issue 50: ORT regions over Woodpecker's graph
0–6 % slower than ORT; OpenVINO 1.5–2.5× ONNX Runtime on the set's models on Zen 4), which a
per-node timing cannot see.
"""

from __future__ import annotations

import sys
from typing import TextIO

from woodpecker.assembly import AssemblyOptions, assemble
from woodpecker.bench.compare import random_feeds
from woodpecker.config import REFINE_MARGIN, REFINE_RUNS, TOLERANCE
from woodpecker.deadline import Deadline
from woodpecker.engines.choice import Choice, Choices
from woodpecker.engines.names import NUMPY
from woodpecker.engines.registry import get_engine
from woodpecker.errors import WoodpeckerError, first_line
from woodpecker.ir.graph import Graph
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.selection.compare import Decision, Timed, decide
from woodpecker.selection.library_first import outputs_agree

CURRENT = "the plan so far"    # the decisions' base label


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


def choose_libraries(graph: Graph, choices: Choices, assembly: AssemblyOptions,
                     runs: int = REFINE_RUNS, out: TextIO | None = None,
                     deadline: Deadline = Deadline.NONE) -> list[dict]:
    out = out or sys.stderr
    ctx, by_name = assembly.context, {n.name: n for n in graph.nodes}
    current = _Plan(graph, choices, assembly)
    records: list[dict] = []
    for name in [e for e in assembly.allowed if get_engine(e).caps.multi_node]:
        engine = get_engine(name)
        movable = [r for r in library_regions(graph, current.choices)
                   if any(current.choices[n].engine != name for n in r)
                   and all(engine.supports(by_name[n], ctx) for n in r)]
        if not movable:
            continue
        trials = [(f"every library region on {name}", sum(movable, []), 1.0)]
        if len(movable) > 1:
            trials += [(f"a region of {len(r)} node(s) on {name}", r, 1 - REFINE_MARGIN)
                       for r in sorted(movable, key=len, reverse=True)]
        for k, (label, nodes, bar) in enumerate(trials):
            if k == 1 and records[-1]["kept"]:
                break     # every region moved at once: none is left to try alone
            if k and deadline.passed():
                break
            trial = dict(current.choices)
            trial.update({n: Choice(name, why=f"library regions: {label}") for n in nodes})
            record = current.against(_Plan(graph, trial, assembly), label, runs, bar,
                                     deadline)
            records.append({**record, "engine": name, "nodes": nodes})
            said = record["why"] if "why" in record else Decision.said(record)
            print(f"  library regions: {said}", file=out, flush=True)
            if record["kept"]:
                current = current.kept
    choices.update(current.choices)
    return records


class _Plan:
    """A candidate plan: `choices` over `graph` assembled (on a copy) and run on one seeded
    input; `against(other, …)` checks `other`'s outputs and times it against this one."""

    def __init__(self, graph: Graph, choices: Choices, assembly: AssemblyOptions) -> None:
        self.choices = choices
        self.model = CompiledModel(assemble(graph.copy(), choices, assembly))
        self.kept: _Plan | None = None

    def against(self, other: "_Plan", label: str, runs: int, bar: float,
                deadline: Deadline) -> dict:
        feeds = random_feeds(self.model)
        try:
            want, got = self.model.run(feeds), other.model.run(feeds)
        except WoodpeckerError as e:
            return {"kept": False, "why": f"{label}: not run: {first_line(e)[:160]}"}
        bad = next((k for k, w in want.items() if not outputs_agree(got[k], w)), None)
        if bad is not None:
            return {"kept": False, "why": f"{label}: output {bad!r} differs from the plan's "
                                          f"by more than {TOLERANCE:g} relative"}
        decision = decide(Timed.plan(label, other.model, feeds),
                          Timed.plan(CURRENT, self.model, feeds), runs, bar, deadline)
        self.kept = other if decision.kept else None
        return decision.to_json()
