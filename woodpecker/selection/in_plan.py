"""In-plan choice among a task's finalists (WPK §2.5: time the tuned kernel in place).

Per-node selection (selection/per_node.py) times each finalist alone, on inputs it has just read and
weights made cold. In a plan a kernel reads what the previous kernel just wrote, split across
the cores by that kernel's parallel loop, and the ranking can change. Measured on MnasNet's
all-Halide plan (Zen 4, 2 threads): its 5×5 depthwise conv at 7² × 1152 with a per-channel-tile
padded image beat the bounds-checked one alone (0.038 vs 0.042 ms) but took 0.11-0.15 ms in
the plan against 0.10, and the plan picked by isolated timing ran 1.020× ONNX Runtime against
0.993× for the one before.

So, choices left open by the paper, made here: after per-node selection, the plan with every
node that has a tuned kernel on Halide is built once per finalist rank — variant k runs each
task's k-th finalist (by isolated time; its best where it has fewer) — and the variants are
profiled step by step (`CompiledModel.profile`), interleaved round by round. Each task keeps
the finalist whose variant had the least median step time summed over the task's nodes.
All tasks are varied at once, so a step's context (its producer's kernel) changes between
variants too; one pass of a few variants is cheap (a plan runs in milliseconds) where trying
each task alone would take a plan per finalist per task.
"""

from __future__ import annotations

import sys
from typing import TextIO

import numpy as np

from woodpecker.assembly import AssemblyOptions, assemble
from woodpecker.bench.compare import random_feeds
from woodpecker.config import IN_PLAN_ROUNDS, MIN_RUNS
from woodpecker.deadline import Deadline
from woodpecker.engines import names
from woodpecker.engines.choice import Choice, Choices, KernelSpec
from woodpecker.ir.graph import Graph
from woodpecker.runtime.compiled import CompiledModel


def choose_in_plan(graph: Graph, choices: Choices, assembly: AssemblyOptions,
                   rounds: int = IN_PLAN_ROUNDS, out: TextIO | None = None,
                   deadline: Deadline = Deadline.NONE) -> list[dict]:
    """Set each node's `Choice.kernel` to the finalist (of its `finalists`, which are then
    cleared) that ran fastest in the plan; returns one record per task with more than one
    finalist: its nodes, the median in-plan ms of each finalist, the choice. Past `deadline`
    no further finalist rank's plan is built (the finalists of the ranks not built are not
    chosen) and the rounds stop at `config.MIN_RUNS`: building the plans of four ranks took
    5-8 s of a 60-s resnet18 compile whose in-plan stage had 2.5 s."""
    out = out or sys.stderr
    groups: dict[int, tuple[list[int], dict[str, KernelSpec]]] = {}   # a task's nodes share it
    for i, node in enumerate(graph.nodes):
        named, choices[node.name].finalists = choices[node.name].finalists, {}
        if named:
            groups.setdefault(id(named), ([], named))[0].append(i)
    if not groups:
        return []
    ranks = max(len(named) for _, named in groups.values())
    models = []
    for k in range(ranks):
        if k and deadline.passed():     # building a plan takes seconds: no more ranks
            ranks = k
            break
        variant = {n.name: Choice(names.HALIDE, c.kernel, c.why) if c.kernel is not None else c
                   for n in graph.nodes for c in [choices[n.name]]}
        for nodes, named in groups.values():
            spec = list(named.values())[k if k < len(named) else 0]
            for i in nodes:
                variant[graph.nodes[i].name] = Choice(names.HALIDE, spec)
        models.append(CompiledModel(assemble(graph.copy(), variant, assembly)))
    feeds = random_feeds(models[0])
    # each node's step in the variants (assembly inserted conversions: match by name)
    laid = models[0].graph.nodes
    step_of = {laid[i].name: s for s, step in enumerate(models[0].steps) for i in step}
    times = np.zeros((rounds, ranks, len(models[0].steps)))
    done = 0
    while done < rounds and not (deadline.passed() and done >= MIN_RUNS):
        order = range(ranks) if done % 2 == 0 else reversed(range(ranks))
        for k in order:
            times[done, k] = models[k].profile(feeds, runs=1)
        done += 1
    median = np.median(times[:done], axis=0)
    report = []
    for nodes, named in groups.values():
        ms = {name: float(sum(median[k, step_of[graph.nodes[i].name]] for i in nodes))
              for k, name in enumerate(named) if k < ranks}
        best = min(ms, key=ms.get)
        for i in nodes:
            choice = choices[graph.nodes[i].name]
            choice.kernel = named[best]
            choice.why += f"; in-plan finalist {best}"
        print(f"  in plan, {graph.nodes[nodes[0]].name!r} ({len(nodes)} node(s)): "
              + ", ".join(f"{name} {t:.3f}" for name, t in ms.items()) + f" ms -> {best}",
              file=out, flush=True)
        report.append({"nodes": [graph.nodes[i].name for i in nodes], "finalists_ms": ms,
                       "chosen": best, "changed": best != next(iter(named))})
    return report
