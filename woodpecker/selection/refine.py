"""Plan-level confirmation of system-level exploration (WPK §2.5).

Per-node selection (selection/per_node.py) times each library on a one-node model. Inside a library
region ONNX Runtime does better than that: consecutive convs stay in its blocked NCHWc layout
without reorders and it fuses across nodes, so per-node timings overstate the library (on
mobilenet_v2 the per-node ORT times of its convs summed to about 1.5× ORT's whole-model time)
and a plan of per-node Halide winners ran 1.5× slower than the library-only plan.

So the per-node winners are confirmed on the whole plan. Choices left open by the paper, made
here: a candidate plan puts more nodes on their tuned kernels and is kept when, timed
interleaved against the current best plan on one seeded input, it takes at least
`config.REFINE_MARGIN` (2 %) less time: the median, over the interleaved rounds, of each trial
run's time over the best plan's run of the same round (`bench.timing.paired_ratio`). Two
medians compared instead let the machine's drift decide: shufflenet_v2's all-Halide plan was
kept in one 15-minute tuning run (7.92 vs 9.85 ms) and dropped in the next (7.40 vs 6.57 ms)
with nearly the same kernels. The margin guards against keeping a chain on noise: on
shufflenet_v2 a one-node chain was kept for 8.09 → 7.94 ms (1.9 %), and a Halide node amid
ONNX Runtime nodes splits their session, so a wrong keep costs more than it can win. Nodes
that have no timed library alternative (only numpy) keep their Halide kernel.

The candidates, in order: every per-node winner at once (by the margin); then every tuned node
(every timed node, and those per-node timing had no time for) on its tuned kernel, kept when
faster at all (paired ratio under 1) — the plan Woodpecker
exists to run (a library then runs a node only where it wins, WPK §2.5); only when neither was
kept, connected chains of winners (nodes joined by NHWC values, which share their layout
conversions), largest estimated per-node gain first, each by the margin. Per-node selection
charges each Halide node the layout conversions around it and cannot see that a whole network
in NHWC pays them only at its ends, while a node that loses alone by a little (resnet18's
stride-2 convs) splits a chain in two and makes both halves pay. Measured on resnet18:
per-node selection and chains kept 19 % of the FLOPs on Halide at 0.98× ONNX Runtime's
latency, while the all-Halide plan ran at 0.97×; on inception_v3 one chain was kept at 0.967
and the all-Halide plan then ran at 0.990 of that. Whole plans first also bound the work: a
chain trial costs two plans' worth of interleaved runs (ResNet-50's selection took 321 s
after a 300 s tuning budget, chain by chain), and `--budget` is the whole compile
(compiler.py). No candidate — whole plan or chain — is tried once the deadline has passed or
the time left is less than twice what the last one took (it, and the plan's assembly after
selection), so a plan check over a deep model does not overrun the budget by a trial.

When more than one candidate was kept, the result is timed once more against the plan it
started from (twice the runs), and the start plan comes back unless the result still saves the
margin: each keep is a comparison on a noisy machine, and small false gains add up (measured on
shufflenet_v2: three chains kept on 2-11 % gains each, and the plan then ran 1.14× ONNX Runtime
where the library plan had run 1.06×).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

import numpy as np

from woodpecker.assembly import AssemblyOptions, assemble
from woodpecker.bench.compare import random_feeds
from woodpecker.config import REFINE_MARGIN, REFINE_RUNS
from woodpecker.deadline import Deadline
from woodpecker.engines.choice import Choice, Choices
from woodpecker.engines.names import HALIDE
from woodpecker.ir.graph import Graph
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.selection.compare import Decision, Timed, decide

EVERY = "every tuned node"   # the candidates' labels
WINNERS = "every per-node winner"
BEST = "the best plan so far"
CONFIRMATION = "confirmation"    # the kept candidates together, against the plan they started
START = "the plan without Halide chains"


def halide_chains(graph: Graph, candidates: set[int]) -> list[list[int]]:
    """Connected components (through producer → consumer edges) of the candidate nodes,
    each as sorted node indices, in graph order of their first node."""
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    parent = {i: i for i in candidates}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in candidates:
        for v in graph.nodes[i].inputs:
            if v is not None and v.producer is not None and index[id(v.producer)] in candidates:
                parent[find(i)] = find(index[id(v.producer)])
    chains: dict[int, list[int]] = {}
    for i in sorted(candidates):
        chains.setdefault(find(i), []).append(i)
    return list(chains.values())


def plan_runner(graph: Graph, choices: Choices, assembly: AssemblyOptions):
    """A no-argument run of the plan `assembly` makes of `graph` (copied) with `choices`, on
    one seeded input."""
    model = CompiledModel(assemble(graph.copy(), choices, assembly))
    feeds = random_feeds(model)
    return lambda: model.run(feeds)


def refine_selection(graph: Graph, before: list[str], choices: Choices, records: list[dict],
                     assembly: AssemblyOptions, runs: int = REFINE_RUNS,
                     out: TextIO | None = None, deadline: Deadline = Deadline.NONE,
                     ) -> tuple[list[str], list[dict]]:
    """The engines to keep: the engines of `choices` with the Halide chains that do not speed
    up the whole plan given back to their engine in `before`, or every tuned node (a `records`
    entry, or a node left untimed whose choice carries its tuned kernel) on Halide when that
    plan is faster still;
    plus one record per candidate tried. `assembly` says how a plan (layouts, regions, arena)
    to time is assembled (assembly/). Past `deadline` no further chain is tried and a
    comparison under way stops at half its rounds."""
    out = out or sys.stderr
    gain = {r["node"]: r["total_ms"].get(r["library"], np.inf) - r["total_ms"][HALIDE]
            for r in records}
    names = [n.name for n in graph.nodes]
    selected = [choices[name].engine for name in names]
    timed = {i for i, name in enumerate(names) if name in gain and before[i] != HALIDE
             and np.isfinite(gain[name])}
    # nodes per-node timing had no time for, given their tuned kernel (per_node.py)
    untimed = {i for i, name in enumerate(names) if name not in gain and before[i] != HALIDE
               and selected[i] != HALIDE and choices[name].kernel is not None}
    tried = {i for i in timed if selected[i] == HALIDE}
    chains = sorted(halide_chains(graph, tried),
                    key=lambda c: -sum(gain[names[i]] for i in c))
    current = [before[i] if i in timed else e for i, e in enumerate(selected)]
    if not timed and not untimed:
        return selected, []
    report, seen = [], set()

    def runner(engines: list[str]):
        return plan_runner(graph, {name: Choice(e, choices[name].kernel if e == HALIDE else None)
                                   for name, e in zip(names, engines)}, assembly)

    best_run = runner(current)
    last = [0.0]    # seconds the last attempt took (building its plan, timing it)

    def time_for_one() -> bool:
        """Whether another attempt fits before `deadline`: it has not passed, and what is
        left covers the last attempt twice over (the attempt, then the plan's own assembly
        after selection) — a whole-plan trial of a deep model (Swin-T's: seconds to build)
        started just before the deadline ran the compile 11 s past its budget."""
        return not deadline.passed() and deadline.left() >= 2 * last[0]

    def attempt(label: str, nodes: list[int], bar: float) -> bool:
        """Time the plan with `nodes` also on Halide against the current best; keep it when
        the paired ratio is under `bar`."""
        nonlocal current, best_run
        trial = list(current)
        for i in nodes:
            trial[i] = HALIDE
        if trial == current or tuple(trial) in seen:   # e.g. one chain of every tuned node
            return False
        if not time_for_one():
            print(f"  plan check: budget spent, {label} not tried", file=out, flush=True)
            return False
        start = time.monotonic()
        seen.add(tuple(trial))
        trial_run = runner(trial)
        decision = decide(Timed(label, trial_run), Timed(BEST, best_run), runs, bar, deadline)
        print(f"  plan check, {len(nodes)} Halide node(s) from {names[nodes[0]]!r}: "
              f"{Decision.said(decision.to_json())}", file=out, flush=True)
        report.append({**decision.to_json(), "nodes": [names[i] for i in nodes]})
        if decision.kept:
            current, best_run = trial, trial_run
        last[0] = time.monotonic() - start
        return decision.kept

    # Whole-plan candidates first: every per-node winner, then every tuned node; chain by
    # chain only when neither was kept (what most budgets cannot afford on a deep model).
    whole = attempt(WINNERS, sorted(tried), 1 - REFINE_MARGIN) if len(chains) > 1 else False
    whole = attempt(EVERY, sorted(timed | untimed), 1.0) or whole
    for k, chain in enumerate(chains if not whole else []):
        if not time_for_one():
            print(f"  plan check: budget spent, {len(chains) - k} chain(s) not tried",
                  file=out, flush=True)
            break
        attempt(f"chain {k + 1}/{len(chains)}", chain, 1 - REFINE_MARGIN)
    if sum(r["kept"] for r in report) > 1 and time_for_one():
        start = [before[i] if i in timed else e for i, e in enumerate(selected)]
        decision = decide(Timed(CONFIRMATION, best_run), Timed(START, runner(start)), 2 * runs,
                          1 - REFINE_MARGIN, deadline)
        print(f"  plan check: {Decision.said(decision.to_json())}", file=out, flush=True)
        report.append({**decision.to_json(), "nodes": []})
        if not decision.kept:
            current = start
    return current, report
