"""Fused or apart (AGO §III: "fusion is kept only where it wins"): each of AGO's intensive
fusions in the graph (ops.INTENSIVE: a conv chain, attention) is timed against its parts as
the default pipeline has them (passes/unfuse.apart: an unfused chain keeps its separable
conv), each on its own best generated kernel, before per-node selection; where the parts are
faster the node is replaced by them (passes/unfuse.py), and per-node selection, the in-plan
choice and the whole-plan check then treat them as any other nodes.

Contract: `weigh_fusions(graph, choices, log, allowed, ctx, out=, deadline=)` returns one
record per intensive node it timed: its kernel's and its parts' median milliseconds and
whether it stays fused. Timed: the fused task's best usable tuned kernel against its parts run
one after another — each part with a task on its best usable tuned kernel, each without one
(attention's strided views of Q, K and V and its output transpose) on the numpy engine, as a
plan runs them — interleaved over `config.SELECTION_RUNS` rounds (bench/timing.py). A node whose
task has no usable record while every part's has is unfused without timing; a node with a part
that has no tuned kernel stays fused (a library runs either way). Choice: the parts' kernels
are timed on inputs of their own, not chained, as per-node selection times every kernel.

Kernel against kernels cannot see what the fusion changes around it (layout conversions, which
values stay in cache for the next kernel), so once selection is done the whole plan decides
too: `confirm_fusions(graph, choices, log, assembly, out=, deadline=)` times the plan as
chosen against the same plan with every fusion it runs on a generated kernel undone, each part
on its task's best tuned kernel (checked, as the plan check gives untimed nodes theirs; a part
without one on its library), interleaved over `config.REFINE_RUNS` rounds, and keeps the fused
plan only when its paired ratio (bench.timing.paired_ratio) is under 1; otherwise it unfuses
them in `graph` and `choices`. Fusion is then never kept where the same tuning runs the whole
plan faster without it (issue 31: "no zoo model slower"). Measured on the same tuning log
(closing note of issue 31): kernel-level weighing kept 3 of shufflenet_v2's 7 chains, and that
plan ran 1.010× the default pipeline's.

Last, selection (selection/pipeline.py) times the finished plan against the plan the same
tuning log gives the graph without AGO's passes, and keeps the faster:
`faster_plan(fused, unfused, out=, deadline=)` — paired over `config.REFINE_RUNS` interleaved
rounds on one seeded input, the fused plan kept when its paired ratio is under 1. It covers
what taking nodes apart cannot: attention apart is strided views on numpy, not the model's own
head split (vit_tiny from a 1-minute tuning log: the fused plan ran 1.154× the default
pipeline's, its attention kept over that apart form at 0.648).

A conv chain that selection left on a library is taken apart first
(`unfuse_on_libraries`): the fusion is there for a generated kernel, and apart (passes/unfuse:
the default pipeline's nodes) the library sees the very graph it has without AGO's passes
(mnasnet1_0 and mobilenet_v3_small, both plans all ONNX Runtime from one tuning log: 1.043×
and 1.016× with chains left fused on it, 60 paired rounds). Attention stays fused there: apart,
its head split is strided views on numpy, not the model's reshapes.
"""

from __future__ import annotations

import sys
from typing import TextIO

import numpy as np

from woodpecker.assembly import AssemblyOptions
from woodpecker.bench.compare import random_feeds
from woodpecker.bench.timing import time_interleaved
from woodpecker.config import REFINE_RUNS, SELECTION_RUNS
from woodpecker.deadline import Deadline
from woodpecker.engines import names
from woodpecker.engines.base import BuildContext
from woodpecker.engines.choice import Choice, Choices
from woodpecker.engines.registry import choose, get_engine
from woodpecker.ir.graph import Graph, Node
from woodpecker.ops import INTENSIVE, chain
from woodpecker.passes.unfuse import apart, unfuse
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.selection.compare import Decision, Timed, decide
from woodpecker.selection.per_node import best_tuned, best_tuned_spec
from woodpecker.selection.refine import plan_runner
from woodpecker.tasks import task_from_node
from woodpecker.tune.records import TuningLog

# the decisions' labels (selection/compare.Decision)
FUSED, APART = "fused", "apart"
WITH_AGO, WITHOUT_AGO = "plan with AGO's fusions", "plan without AGO's fusions"


def _kernel_runner(task, log: TuningLog, threads: int, out: TextIO):
    """A no-argument call of the best usable tuned kernel of `task` on random inputs; None
    without one (or without a task)."""
    if task is None:
        return None
    best = best_tuned(task, log, threads, out)
    return None if best is None else best.run


def _part_runner(node: Node, log: TuningLog, ctx: BuildContext, out: TextIO):
    """A part as a plan runs it: on its tuned kernel when a task computes it (None without a
    tuned one), else (data movement) on the numpy engine, on random inputs."""
    task = task_from_node(node)
    if task is not None:
        return _kernel_runner(task, log, ctx.threads, out)
    kernel = get_engine(names.NUMPY).build(node, ctx)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(v.shape).astype(np.float32) for v in node.inputs
            if v is not None and v.data is None]
    return lambda: kernel(*args)


def weigh_fusions(graph: Graph, choices: Choices, log: TuningLog, allowed: list[str],
                  ctx: BuildContext, runs: int = SELECTION_RUNS, out: TextIO | None = None,
                  deadline: Deadline = Deadline.NONE) -> list[dict]:
    out = out or sys.stderr
    records = []
    for node in [n for n in graph.nodes if n.op in INTENSIVE]:
        if deadline.passed():
            break
        fused = _kernel_runner(task_from_node(node), log, ctx.threads, out)
        parts = [_part_runner(part, log, ctx, out) for part in apart(node)]
        if any(p is None for p in parts):
            continue
        record = {"node": node.name, "op": node.op, "fused_ms": None, "parts_ms": None}
        if fused is not None:
            times = time_interleaved({"fused": fused, "parts": lambda: [p() for p in parts]},
                                     runs, 2, block=3, deadline=deadline)
            record.update({k: float(np.median(v)) for k, v in
                           (("fused_ms", times["fused"]), ("parts_ms", times["parts"]))})
        record["fused"] = fused is not None and record["fused_ms"] <= record["parts_ms"]
        records.append(record)
        said = "no tuned kernel" if fused is None else f"{record['fused_ms']:.3f} ms"
        parts_said = "" if record["parts_ms"] is None else f" {record['parts_ms']:.3f} ms"
        print(f"  fusion {node.name!r} ({node.op}): fused {said}, apart{parts_said} -> "
              f"{'fused' if record['fused'] else 'apart'}", file=out, flush=True)
        if not record["fused"]:
            del choices[node.name]
            for p in unfuse(graph, node):
                choices[p.name] = Choice(choose(p, allowed, ctx), why="library preference")
    return records


def confirm_fusions(graph: Graph, choices: Choices, log: TuningLog, assembly: AssemblyOptions,
                    runs: int = REFINE_RUNS, out: TextIO | None = None,
                    deadline: Deadline = Deadline.NONE) -> dict | None:
    """The whole-plan check of the fusions `choices` run on generated kernels (module
    docstring); returns its record, None where no fusion runs on one. Past `deadline` the
    comparison stops at half its rounds."""
    out = out or sys.stderr
    fused = [n.name for n in graph.nodes
             if n.op in INTENSIVE and choices[n.name].engine == names.HALIDE]
    if not fused:
        return None
    print(f"checking {len(fused)} fusion(s) on the whole plan against their parts",
          file=out, flush=True)
    ctx, allowed = assembly.context, list(assembly.allowed)
    apart_graph = graph.copy()
    by_name = {n.name: n for n in apart_graph.nodes}
    apart_choices = {name: c for name, c in choices.items() if name not in fused}
    for name in fused:
        for part in unfuse(apart_graph, by_name[name]):
            task = task_from_node(part)
            spec = None if task is None else best_tuned_spec(task, log, ctx.threads, out)
            apart_choices[part.name] = (
                Choice(names.HALIDE, spec, "whole-plan fusion check: its best tuned kernel")
                if spec is not None else
                Choice(choose(part, allowed, ctx), why="library preference"))
    decision = decide(Timed(FUSED, plan_runner(graph, choices, assembly)),
                      Timed(APART, plan_runner(apart_graph, apart_choices, assembly)), runs,
                      deadline=deadline)
    record = {**decision.to_json(), "nodes": fused}
    print(f"  whole plan: {Decision.said(record)}", file=out, flush=True)
    if not record["kept"]:
        by_name = {n.name: n for n in graph.nodes}
        for name in fused:
            del choices[name]
            for part in unfuse(graph, by_name[name]):
                choices[part.name] = apart_choices[part.name]
    return record


def unfuse_on_libraries(graph: Graph, choices: Choices, allowed: list[str],
                        ctx: BuildContext) -> list[str]:
    """Take apart each conv chain `choices` run on a library, its parts on their library
    preference (module docstring); returns the chains' names."""
    left = [n.name for n in graph.nodes
            if n.op == chain.OP and not get_engine(choices[n.name].engine).caps.generated]
    by_name = {n.name: n for n in graph.nodes}
    for name in left:
        del choices[name]
        for part in unfuse(graph, by_name[name]):
            choices[part.name] = Choice(choose(part, allowed, ctx), why="library preference")
    return left


def faster_plan(fused: CompiledModel, unfused: CompiledModel, runs: int = REFINE_RUNS,
                out: TextIO | None = None, deadline: Deadline = Deadline.NONE) -> dict:
    """`fused` against `unfused` (module docstring): the record of the decision, `kept`
    saying whether the fused plan stays. Past `deadline` it stops at half its rounds."""
    feeds = random_feeds(fused)
    record = decide(Timed.plan(WITH_AGO, fused, feeds), Timed.plan(WITHOUT_AGO, unfused, feeds),
                    runs, deadline=deadline).to_json()
    print(f"  {Decision.said(record)}", file=out or sys.stderr, flush=True)
    return record
