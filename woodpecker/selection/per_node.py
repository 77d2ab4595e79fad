"""System-level exploration (WPK §2.5): for every node with a tuned kernel (conv, dense, pool),
time that kernel and each library engine on the node's own shapes, count the layout conversions
each choice brings, and keep the fastest.

Choices left open by the paper, made here:
- A tuned kernel must match the numpy reference on a seeded input before it is timed; one that
  fails to build or differs is reported and never chosen.
- Identical nodes (one task) share the kernel timings; conversions are charged per node, in
  graph order: an NHWC Halide candidate (conv, pool) pays an NCHW→NHWC copy for each run-time
  input it reads in NHWC whose producer is not an NHWC Halide node, and an NHWC→NCHW copy
  when some consumer cannot take NHWC (it is not a node whose NHWC task has a faster Halide
  kernel, or the value is a graph output); a library candidate, or a Halide kernel in the
  node's own layout (dense), pays the NHWC→NCHW copy of each input an NHWC Halide node
  produced.
- With library regions (runtime/steps.py) a Halide node amid ONNX Runtime nodes splits their
  session in two: the Halide candidate is charged two session calls (measured on a near-empty
  session) — the call the split adds, and the one the per-node library timing includes but a
  node inside a region does not pay.
- Timing is interleaved in blocks (see bench/timing.py) on one seeded input; the tuned
  candidate is the fastest of the finalists (selection/finalists.py: the best record of each
  template and parallel split) in that same run.
- Every allowed library is timed and recorded, but the tuned kernel competes with the library
  the preference order picked for the node (ONNX Runtime where it runs the node), not with all of
  them: measured on ResNet-18, letting per-node winners mix torch kernels between ONNX Runtime
  ones made the whole plan slower (56 ms vs 37 ms) although each torch kernel won alone — torch's
  OpenMP threads keep spinning after each call and slow the next kernel, which per-node timing
  cannot see.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from woodpecker.bench.timing import time_interleaved
from woodpecker.config import SELECTION_RUNS, UNTIMED_KERNELS_SHARE
from woodpecker.deadline import Deadline
from woodpecker.engines import names
from woodpecker.engines.base import BuildContext
from woodpecker.engines.choice import Choice, Choices, KernelSpec
from woodpecker.engines.halide.templates import template_module
from woodpecker.engines.ort_engine import call_overhead_ms
from woodpecker.engines.registry import get_engine
from woodpecker.engines.torch_engine import settle_threads
from woodpecker.ir.graph import Graph, Node, runtime_positions
from woodpecker.selection.candidates import Candidate, time_candidates
from woodpecker.selection.finalists import finalist_candidates, leaders
from woodpecker.tasks import NHWC, Task, library_inputs
from woodpecker.tune.extract import extract_tasks
from woodpecker.tune.records import TuningLog, TuningRecord

# the libraries a tuned kernel is timed against; the one the preference order picked competes
LIBRARIES = (names.ONNXRUNTIME, names.TORCH)
HALIDE = names.HALIDE


@dataclass
class GroupTiming:
    task: Task
    kernel_ms: dict[str, float]                 # engine -> median ms of the bare kernel
    specs: dict[str, KernelSpec]                # finalist -> its kernel, fastest first
    finalists_ms: dict[str, float] = field(default_factory=dict)   # finalist -> median ms
    nodes: list[str] = field(default_factory=list)

    @property
    def spec(self) -> KernelSpec:
        """The fastest finalist alone."""
        return next(iter(self.specs.values()))


def _copy_ms(shape: tuple[int, ...], perm: tuple[int, ...], runs: int) -> float:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    t = time_interleaved({"copy": lambda: np.ascontiguousarray(x.transpose(perm))}, runs, 2)
    return float(np.median(t["copy"]))


def buildable(task: Task):
    """A predicate on the task's records: the config fits its template's current knobs
    (records from an older version of a template, with knobs since added or renamed, are
    passed over rather than failing to build). Each template's space is built once."""
    spaces: dict[str, object] = {}

    def usable(record: TuningRecord) -> bool:
        name = record.template
        if name not in spaces:
            try:
                spaces[name] = template_module(name).space(task)
            except ImportError:
                spaces[name] = None
        return spaces[name] is not None and spaces[name].in_domain(record.config)

    return usable


def _untimed_kernels(groups: list, choices: Choices, log: TuningLog, ctx: BuildContext,
                     out: TextIO, deadline: Deadline) -> None:
    """Give the nodes of tasks left untimed their task's best tuned kernel (checked against
    the reference, not timed), their engine unchanged, until `deadline`: the whole-plan check
    tries every tuned node on its kernel (selection/refine.py), and a small untimed node left
    on a library amid generated ones splits their NHWC chain with layout conversions —
    DenseNet-121 with 16 untimed tasks: that plan ran 1.027× the library plan, where the plan
    with them on their kernels ran 0.87× (benchmarks/results/
    builds_densenet121_prefix_views.json)."""
    for g in groups:
        if deadline.passed():
            return
        spec = best_tuned_spec(g.task, log, ctx.threads, out)
        if spec is None:
            continue
        for name in g.nodes:
            choices[name] = Choice(choices[name].engine, spec,
                                   "not timed (selection budget spent); its best tuned kernel "
                                   "is tried in the whole-plan check")


def best_tuned(task: Task, log: TuningLog, threads: int, out: TextIO) -> Candidate | None:
    """`task`'s best usable record in `log` as a candidate (selection/finalists.py: its kernel
    built and checked against the reference, not timed); None without one that passes."""
    records = leaders(log, task, buildable(task))[:1]
    found = finalist_candidates(task, records, threads,
                                lambda msg: print(f"  {msg}", file=out))
    return found[0] if found else None


def best_tuned_spec(task: Task, log: TuningLog, threads: int, out: TextIO) -> KernelSpec | None:
    """The kernel spec of `best_tuned`; None without one."""
    best = best_tuned(task, log, threads, out)
    return None if best is None else best.spec


def _time_group(task: Task, records: list[TuningRecord], node: Node, allowed: list[str],
                ctx: BuildContext, runs: int, out: TextIO,
                deadline: Deadline = Deadline.NONE) -> GroupTiming | None:
    """Time the finalists (see selection/finalists.py) and the libraries' kernels of the node
    interleaved, all as candidates (selection/candidates.py); the fastest finalist is the
    node's Halide candidate."""
    finalists = finalist_candidates(task, records, ctx.threads,
                                    lambda msg: print(f"  {msg}", file=out))
    if not finalists:
        return None
    libraries = _library_candidates(task, node, allowed, ctx)
    times = time_candidates(finalists + libraries, runs, {names.TORCH: settle_threads},
                            deadline)
    halide_ms = {c.name: times[c.label] for c in finalists}
    ranked = sorted(finalists, key=lambda c: halide_ms[c.name])
    return GroupTiming(task, {HALIDE: halide_ms[ranked[0].name],
                              **{c.engine: times[c.label] for c in libraries}},
                       {c.name: c.spec for c in ranked}, finalists_ms=halide_ms)


def _library_candidates(task: Task, node: Node, allowed: list[str],
                        ctx: BuildContext) -> list[Candidate]:
    """The node's kernel in each allowed library of `LIBRARIES` that runs it, called on the
    task's seeded inputs in the node's layout, after the Halide pool's rest hook as in a plan
    (runtime/compiled.py)."""
    own = library_inputs(task, node, task.random_inputs(0))
    rest = get_engine(HALIDE).rest_hook() or (lambda: None)
    out = []
    for name in LIBRARIES:
        if name in allowed and get_engine(name).supports(node, ctx):
            lib = get_engine(name).build(node, ctx)
            out.append(Candidate(name, name, (lambda k: lambda: (rest(), k(*own)))(lib)))
    return out


def select_kernels(graph: Graph, choices: Choices, allowed: list[str], ctx: BuildContext,
                   log: TuningLog, runs: int = SELECTION_RUNS, out: TextIO | None = None,
                   regions: bool = False, deadline: Deadline = Deadline.NONE) -> list[dict]:
    """Put each timed node's choice on its tuned kernel where that wins, and give every timed
    node's choice its `kernel` (also where it lost: the plan check may try it; the caller
    drops it from nodes that do not run it) and its `finalists`;
    returns one record per timed node: candidates with their times, conversions, winner.
    `regions`: the plan runs consecutive ONNX Runtime nodes as one session. Tasks are timed
    most work first (FLOPs over all their nodes) until `UNTIMED_KERNELS_SHARE` of the time to
    `deadline` is left; those left then keep their library, their choices given their best
    tuned kernel (`_untimed_kernels`) until `deadline`."""
    out = out or sys.stderr
    by_name = {n.name: n for n in graph.nodes}
    timing: dict[str, GroupTiming] = {}
    groups = sorted(extract_tasks(graph), key=lambda g: -g.task.flops * len(g.nodes))
    timing_until = deadline.share(1 - UNTIMED_KERNELS_SHARE)
    for k, g in enumerate(groups):
        if timing_until.passed():
            print(f"  budget: {len(groups) - k} smaller task(s) not timed, left to the "
                  "libraries (their best tuned kernels go to the whole-plan check)",
                  file=out, flush=True)
            _untimed_kernels(groups[k:], choices, log, ctx, out, deadline)
            break
        records = leaders(log, g.task, buildable(g.task))
        if not records:
            continue
        t = _time_group(g.task, records, by_name[g.nodes[0]], allowed, ctx, runs, out,
                        timing_until)
        if t is not None:
            t.nodes = g.nodes
            timing.update({name: t for name in g.nodes})
    if not timing:
        return []

    def hopeful(node: Node) -> bool:
        """Likely to run as an NHWC Halide kernel (its kernel beats every library alone)."""
        t = timing.get(node.name)
        return t is not None and t.task.layout == NHWC and t.kernel_ms[HALIDE] < min(
            [v for k, v in t.kernel_ms.items() if k != HALIDE], default=np.inf)

    copy_cache: dict[tuple, float] = {}
    split_ms = 2 * call_overhead_ms(ctx.threads) if regions else 0.0

    def copy_ms(shape, perm) -> float:
        key = (tuple(shape), perm)
        if key not in copy_cache:
            copy_cache[key] = _copy_ms(tuple(shape), perm, runs)
        return copy_cache[key]

    records = []
    for node in graph.nodes:
        t = timing.get(node.name)
        if t is None:
            continue
        positions = runtime_positions(node)
        data = [node.inputs[i] for i in positions]
        from_halide = [v for v in data if v.producer is not None
                       and choices[v.producer.name].engine == HALIDE
                       and timing[v.producer.name].task.layout == NHWC]
        lib_conv = sum(copy_ms([v.shape[i] for i in (0, 2, 3, 1)], (0, 3, 1, 2))
                       for v in from_halide)
        halide_conv = lib_conv
        if t.task.layout == NHWC:
            out_v = node.outputs[0]
            needs_nchw = out_v in graph.outputs or not all(hopeful(c) for c in out_v.consumers)
            halide_conv = sum(copy_ms(v.shape, (0, 2, 3, 1)) for i, v in zip(positions, data)
                              if v not in from_halide and t.task.input_layout(i) == NHWC)
            if needs_nchw:
                n, c, h, w = out_v.shape
                halide_conv += copy_ms((n, h, w, c), (0, 3, 1, 2))
        library = choices[node.name].engine
        split = split_ms if get_engine(library).caps.multi_node else 0.0
        totals = {k: v + (halide_conv + split if k == HALIDE else lib_conv)
                  for k, v in t.kernel_ms.items()}
        contenders = [k for k in totals if k in (HALIDE, library)]
        winner = min(contenders, key=totals.get) if library in totals else HALIDE
        why = ", ".join(f"{k} {totals[k]:.3f}" for k in sorted(contenders, key=totals.get))
        choices[node.name] = Choice(winner, t.spec, f"per-node timing (ms): {why}",
                                    t.specs if len(t.specs) > 1 else {})
        records.append({"node": node.name, "op": node.op, "task": t.task.describe(),
                        "library": library,
                        "kernel_ms": t.kernel_ms, "total_ms": totals,
                        "halide_finalists_ms": t.finalists_ms,
                        "conversion_ms": {HALIDE: halide_conv, "library": lib_conv},
                        "region_split_ms": split,
                        "winner": winner})
    return records
