"""Library-first plans: the faster library running the user's original graph is where every
plan starts, and what it must beat.

Contract: `library_plans(whole, assembly)` builds, for each allowed library engine that
declares it can run the whole-model Opaque node (frontend/whole.py: the user's graph as
written), the plan of that one node on that engine — one session over the original graph, so
the library keeps its own fusions and layouts. `fastest_library(plans, …)` times them paired
and interleaved (selection/compare.py) and returns the faster with its record; where no
library runs the model, `LibraryRefusal` says in one line why each refused. A library is
among them only where its outputs agree with ONNX Runtime's (`_check_outputs`): within
config.TOLERANCE, or within config.LIBRARY_SPREAD_FACTOR times how far ORT's own outputs move
with its graph optimisations off, where the model's float noise is larger than that (a
detector's boxes, a deep net's sigmoid map). `keep_faster`
times a Woodpecker plan (generated kernels, rewritten graph) against that library plan and
keeps the Woodpecker plan only where the paired ratio says it is faster by the margin
(config.REFINE_MARGIN) — so no compile ends slower than the faster library, within the
measurement's noise.

Paper: Woodpecker-DL §2.5 (system-level exploration) compares generated kernels with the
libraries; the thesis's XLVM (ch. 5) has engines declare what they run and one selector map
work to them. Choice written down here: the libraries are compared with each other first, on
the whole model, because a plan with no generated kernel should *be* the faster library
(issue 50 measured all-ONNX-Runtime plans over Woodpecker's rewritten graph 0–6 % slower
than ONNX Runtime itself, and OpenVINO 1.5× ahead of ONNX Runtime on a depthwise CNN).

ONNX Runtime is the reference: where it is allowed and installed and cannot build a
session of the whole graph, the model is refused with its own line unless the refusal is one
of its gaps (selection/ort_reference.py says which).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TextIO

import numpy as np
import onnx

from woodpecker.assembly import AssemblyOptions, assemble
from woodpecker.bench.compare import random_feeds
from woodpecker.config import (
    LIBRARY_FIRST_MAX_RUNS,
    LIBRARY_FIRST_RUNS,
    LIBRARY_FIRST_SECONDS,
    LIBRARY_SPREAD_FACTOR,
    MIN_RUNS,
    REFINE_MARGIN,
    TOLERANCE,
)
from woodpecker.deadline import Deadline
from woodpecker.engines.choice import Choice
from woodpecker.engines.names import ONNXRUNTIME
from woodpecker.engines.ort_engine import new_session
from woodpecker.engines.registry import get_engine
from woodpecker.errors import ModelError, UnsupportedOpError, WoodpeckerError, first_line
from woodpecker.frontend.qdq_unsigned import unsigned_activations
from woodpecker.frontend.qoperator import qdq_form
from woodpecker.frontend.whole import whole_graph
from woodpecker.ir.graph import Graph
from woodpecker.options import ScheduleKind
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.selection.compare import Decision, Timed, compare_plans, decide
from woodpecker.selection.ort_reference import OnnxRuntimeRefusal, ort_refusal

# ONNX Runtime's outputs for the given feeds with its graph optimisations off
Spread = Callable[[dict[str, np.ndarray]], list[np.ndarray]]
# the label of the plans of the user's graph with uint8 activations (frontend/qdq_unsigned.py)
UNSIGNED = "the file with uint8 activations"
# the label of the plans of a QOperator file's QDQ form (frontend/qoperator.py)
QDQ_FORM = "the file in QDQ form"
# the labels of the decision against the library (selection/compare.Decision)
WOODPECKER, LIBRARY = "Woodpecker's plan", "the library's session"


class LibraryRefusal(ModelError):
    """No allowed library engine runs the model (each one's reason in the message)."""


@dataclass
class OriginalGraph:
    """The user's model to run whole on a library, at the compile's input shapes and values;
    `known`: the node-level import's output types, where there is one; `why`: why Woodpecker
    has no node-level plan of it, where that is the reason it runs whole."""

    proto: onnx.ModelProto
    input_shapes: Mapping[str, tuple[int, ...]] | None = None
    input_values: Mapping[str, np.ndarray] | None = None
    known: dict | None = None
    why: str | None = None

    def plan(self, assembly: AssemblyOptions, out: TextIO | None = None,
             deadline: Deadline = Deadline.NONE,
             rewrites: Callable[[], dict[str, CompiledModel]] | None = None) -> CompiledModel:
        """The faster allowed library running the graph as one session (frontend/whole.py,
        `library_plans`, `fastest_library`) — or, where measurably faster, one of the plans
        `rewrites()` makes (Woodpecker's graph on the libraries) — its record in
        `meta["library_first"]`; LibraryRefusal (one line, each library's reason) where no
        library runs the graph."""
        out, start = out or sys.stderr, time.monotonic()
        whole = whole_graph(self.proto, self.input_shapes, self.input_values, self.known)
        # no arena: the library allocates the outputs it returns (no copy out of an arena; a
        # dimension the data decides is fine)
        assembly = replace(assembly, context=replace(assembly.context, opset=whole.opset),
                           meta={**assembly.meta, "schedule": {"kind": ScheduleKind.FILE.value}},
                           schedule=replace(assembly.schedule, kind=ScheduleKind.FILE),
                           arena=False)
        others = rewrites() if rewrites is not None else {}
        others.update(self._unsigned(assembly))
        others.update(self._qdq_form(assembly))
        try:
            checked = library_plans(whole, assembly, others, self._unoptimized(assembly))
        except LibraryRefusal:
            self._reference_refuses(assembly)
            raise
        if ONNXRUNTIME in checked.refused:
            self._reference_refuses(assembly)
        refused = checked.refused
        if self.why is not None:   # said once a library runs it (not before a refusal)
            print(f"Woodpecker has no node-level plan for this model ({self.why}); the "
                  "libraries run its original graph", file=out, flush=True)
        library, record = fastest_library(checked.plans, out, deadline, rewrites=others)
        library.plan.meta["library_first"] = {
            **record, **({"refused": refused} if refused else {}),
            **({"agreement": checked.agreement} if checked.agreement else {}),
            **({"why": self.why} if self.why else {}),
            "seconds": round(time.monotonic() - start, 2)}
        return library

    def _reference_refuses(self, assembly: AssemblyOptions) -> None:
        """OnnxRuntimeRefusal where ONNX Runtime is allowed and cannot build a session of the
        user's file (the module says which refusals do not count)."""
        if ONNXRUNTIME not in assembly.allowed or not get_engine(ONNXRUNTIME).available():
            return
        why = ort_refusal(self.proto, assembly.target.threads)
        if why is not None:
            raise OnnxRuntimeRefusal(f"ONNX Runtime refuses this model: {why}")

    def _unsigned(self, assembly: AssemblyOptions) -> dict[str, CompiledModel]:
        """The plans of the user's graph with its int8 activations carried as uint8 (the same
        model: frontend/qdq_unsigned.py), on each library that runs it; none where the graph
        has no such activations. Checked and timed with the other rewrites."""
        return self._rewritten(unsigned_activations(self.proto), UNSIGNED, assembly)

    def _qdq_form(self, assembly: AssemblyOptions) -> dict[str, CompiledModel]:
        """The plans of a QOperator file's QDQ form (the same model in standard ops:
        frontend/qoperator.py) on each library that runs it; none for other files. Checked
        and timed with the other rewrites."""
        return self._rewritten(self._qdq, QDQ_FORM, assembly)

    @cached_property
    def _qdq(self) -> onnx.ModelProto | None:
        """A QOperator file's QDQ form, convs included (None for other files, and for one
        whose rewrite cannot tell a tensor's type: the libraries then run it as written)."""
        try:
            return qdq_form(self.proto, conv=True)
        except UnsupportedOpError:
            return None

    def _rewritten(self, proto: onnx.ModelProto | None, label: str,
                   assembly: AssemblyOptions) -> dict[str, CompiledModel]:
        if proto is None:
            return {}
        whole = whole_graph(proto, self.input_shapes, self.input_values, self.known)
        plans, _ = session_plans(whole, assembly)
        return {f"{label} on {name}": plan for name, plan in plans.items()}

    def _unoptimized(self, assembly: AssemblyOptions) -> Spread:
        """ONNX Runtime running the user's graph as written (a QOperator file in its QDQ
        form), no graph optimisation: how far the same math in another order moves the
        outputs (`_check_outputs`)."""
        def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            session = new_session((self._qdq or self.proto).SerializeToString(),
                                  assembly.target.threads, optimize=False)
            given = {**{k: np.asarray(v) for k, v in (self.input_values or {}).items()},
                     **feeds}
            wanted = {i.name for i in session.get_inputs()}
            return session.run(None, {k: v for k, v in given.items() if k in wanted})
        return run


@dataclass
class LibraryPlans:
    """`plans`: engine name → the plan running the whole graph on it, for each library that
    runs it and agrees with ONNX Runtime; `refused`: engine (or rewrite label) → why not;
    `agreement`: label → how far its outputs differed from the reference's and how far they
    were allowed to (`_check_outputs`), where the model's own float noise set the bar."""

    plans: dict[str, CompiledModel]
    refused: dict[str, str]
    agreement: dict[str, dict]


def library_plans(whole: Graph, assembly: AssemblyOptions,
                  extra: dict[str, CompiledModel] | None = None,
                  spread: Spread | None = None) -> LibraryPlans:
    """The plan running `whole`'s one node on each allowed engine that runs it and agrees
    with ONNX Runtime (`_check_outputs`, `spread` as there), and why each other library is
    not among them. LibraryRefusal where none runs it. `extra` plans (by label) are checked
    against the same reference, those that disagree dropped (their reasons among the
    refused)."""
    plans, refused = session_plans(whole, assembly)
    agreement: dict[str, dict] = {}
    _check_outputs(plans, refused, extra, spread, agreement,
                   assembly.context.precision.tolerance)
    if not plans:
        why = "; ".join(f"{k}: {v}" for k, v in refused.items()) or "no library engine allowed"
        raise LibraryRefusal(f"no library runs this model ({why})")
    return LibraryPlans(plans, refused, agreement)


def session_plans(whole: Graph, assembly: AssemblyOptions,
                  ) -> tuple[dict[str, CompiledModel], dict[str, str]]:
    """Engine name → the plan running `whole`'s one node on it, for each allowed library
    engine that builds it; and engine name → why each other did not."""
    plans, refused = {}, {}
    for name in assembly.allowed:
        engine = get_engine(name)
        if not engine.caps.multi_node:
            continue
        # one copy per library, asked and built on the same node: the session its `accepts`
        # made is the one the plan's step uses (engines keep it per node)
        graph = whole.copy()
        node = graph.nodes[0]
        reason = engine.refusal(node, assembly.context)
        if reason is not None:
            refused[name] = reason
            continue
        choices = {node.name: Choice(name, why="library-first: the user's original graph")}
        try:
            plans[name] = CompiledModel(assemble(graph, choices, assembly))
        except Exception as e:  # noqa: BLE001 - a library's own error while building
            refused[name] = f"{type(e).__name__}: {first_line(e)}"
    return plans, refused


def _check_outputs(plans: dict[str, CompiledModel], refused: dict[str, str],
                   extra: dict[str, CompiledModel] | None = None,
                   spread: Spread | None = None,
                   agreement: dict[str, dict] | None = None,
                   tolerance: float = TOLERANCE) -> None:
    """Drop from `plans` (and from `extra`: further plans, never the reference) each whose
    outputs on one seeded input differ from the reference's (ONNX Runtime's where it is among
    `plans`, else the first plan's) by more than `tolerance` (config.TOLERANCE; a
    low-precision compile's `Precision.tolerance`) relative to the reference's
    largest magnitude (NaN where it has NaN) — or, where `spread(feeds)` (ONNX Runtime's
    outputs with its graph optimisations off) moves further from the reference than that, by
    more than config.LIBRARY_SPREAD_FACTOR times that movement: the model's own float noise.
    Those kept by the second bar are recorded in `agreement`."""
    extra = {} if extra is None else extra
    agreement = {} if agreement is None else agreement
    if len(plans) + len(extra) < 2:
        return
    reference = ONNXRUNTIME if ONNXRUNTIME in plans else next(iter(plans))
    feeds = random_feeds(plans[reference])
    groups = (plans, extra)
    try:
        want = list(plans[reference].run(feeds).values())
    except WoodpeckerError as e:   # random inputs the model refuses (indices, divisors, shapes)
        for group in groups:
            for name in [n for n in group if n != reference]:
                refused[name] = f"not checked against {reference}: {first_line(e)[:120]}"
                del group[name]
        return
    noise: list[float] = []

    def allowed(k: int) -> float:
        if spread is not None and not noise:
            try:
                noise.extend(relative_difference(g, w) for g, w in zip(spread(feeds), want))
            except Exception:  # noqa: BLE001 - ORT's own error without its optimisations
                noise.append(0.0)
        moved = noise[k] if k < len(noise) else 0.0
        # (1 + 1e-5): the differences are of float32 values, rounded alike
        bar = LIBRARY_SPREAD_FACTOR * moved * (1 + 1e-5) if np.isfinite(moved) else 0.0
        return max(tolerance, bar)

    for group in groups:
        for name in [n for n in group if n != reference]:
            try:
                got = list(group[name].run(feeds).values())
            except WoodpeckerError as e:   # e.g. an output shape the library computes otherwise
                refused[name] = f"failed where {reference} ran: {first_line(e)[:160]}"
                del group[name]
                continue
            differs = [relative_difference(g, w) for g, w in zip(got, want)]
            over = [k for k, d in enumerate(differs) if d > tolerance]
            if not over:
                continue
            bad = next((k for k in over if differs[k] > allowed(k)), None)
            if bad is not None:
                refused[name] = (f"its output {bad} differs from {reference}'s by "
                                 f"{differs[bad]:.2g} relative (allowed {allowed(bad):.2g})")
                del group[name]
            else:
                agreement[name] = {"max_rel_diff": max(differs[k] for k in over),
                                   "allowed": min(allowed(k) for k in over),
                                   "ort_unoptimized": max((n for n in noise if np.isfinite(n)),
                                                          default=0.0)}


def relative_difference(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference of `got` from `want` relative to `want`'s largest finite
    magnitude (NaN and infinities where `want` has them match; inf where the shapes differ or
    integers differ at all)."""
    if got.shape != want.shape:
        return float("inf")
    if want.dtype.kind not in "fc":
        return 0.0 if np.array_equal(got, want) else float("inf")
    if want.size == 0:
        return 0.0
    wide = np.complex128 if "c" in (want.dtype.kind, got.dtype.kind) else np.float64
    g, w = got.astype(wide), want.astype(wide)
    nan = np.isnan(w)
    if not np.array_equal(np.isnan(g), nan):
        return float("inf")
    g, w = g[~nan], w[~nan]
    with np.errstate(invalid="ignore"):      # inf - inf: equal infinities, no difference
        diff = np.where(g == w, 0.0, np.abs(g - w))
    finite = np.abs(w[np.isfinite(w)])
    scale = max(float(finite.max()) if finite.size else 0.0, 1e-30)
    return float(diff.max(initial=0.0)) / scale


def outputs_agree(got: np.ndarray, want: np.ndarray, tolerance: float = TOLERANCE) -> bool:
    return relative_difference(got, want) <= tolerance


def fastest_library(plans: dict[str, CompiledModel], out: TextIO | None = None,
                    deadline: Deadline = Deadline.NONE, rounds: int = LIBRARY_FIRST_RUNS,
                    rewrites: dict[str, CompiledModel] | None = None,
                    ) -> tuple[CompiledModel, dict]:
    """The faster of `plans` by a paired, interleaved measurement, and its record (medians,
    ratios, the engine kept). `rewrites` (Woodpecker's graph run by the libraries,
    selection/libraries.rewrite_plans) are timed in the same rounds, and the fastest of them
    is returned instead where its paired ratio to the faster library is under
    1 − config.REFINE_MARGIN: Woodpecker's rewrite replaces the user's graph only where it is
    measurably faster (`record["rewrite"]`)."""
    out = out or sys.stderr
    rewrites = rewrites or {}
    everything = {**plans, **rewrites}
    if len(everything) == 1:  # nothing to compare (the others refused, or failed the check)
        name, plan = next(iter(plans.items()))
        return plan, {"engine": name, "median_ms": {}, "ratio": {name: 1.0}, "rounds": 0,
                      "fastest": name}
    feeds = random_feeds(next(iter(plans.values())))
    runs = {k: (lambda m=m: m.run(feeds)) for k, m in everything.items()}
    # past the deadline, the fewest calls a median is kept of: the sessions' builds (MaxViT's
    # rewrites, 7 s) count in the comparisons' share of the budget too (config.py)
    comparison = compare_plans(runs, _rounds(list(runs.values()), rounds), deadline, MIN_RUNS)
    kept = chosen = comparison.fastest_of(plans)
    record = {"engine": kept, **comparison.to_json()}
    if rewrites:
        best = comparison.fastest_of(rewrites)
        ratio = comparison.paired(kept, best)
        chosen = best if ratio < 1 - REFINE_MARGIN else kept
        record["rewrite"] = {"best": best, "paired_ratio": ratio, "bar": 1 - REFINE_MARGIN,
                             "kept": chosen == best}
    times = ", ".join(f"{k} {ms:.3g} ms" for k, ms in comparison.median_ms.items())
    print(f"library-first: {times} -> {chosen}", file=out, flush=True)
    return everything[chosen], record


def _rounds(runs: list[Callable[[], object]], least: int) -> int:
    """Calls per plan: at least `least`, more for fast plans while the comparison stays within
    config.LIBRARY_FIRST_SECONDS (config.py says why), timed from one call of each."""
    spent = 0.0
    for run in runs:
        run()    # a warm-up call, timed
        t0 = time.perf_counter()
        run()
        spent += time.perf_counter() - t0
    # 3 calls a round, 2 of them timed (selection/compare.py)
    fit = int(LIBRARY_FIRST_SECONDS / max(spent * 1.5, 1e-9))
    return max(least, min(LIBRARY_FIRST_MAX_RUNS, fit))


def against_seconds(library: CompiledModel) -> float:
    """About how long `keep_faster` takes against `library` (its record's median, both plans
    run alike): the time selection leaves for it before the deadline."""
    record = library.plan.meta.get("library_first", {})
    # one call of each plan (the slowest library's median; a Woodpecker plan up to 1.25× it)
    both = 2.25 * max(record.get("median_ms", {}).values(), default=0.0) / 1e3
    # `_rounds`: LIBRARY_FIRST_RUNS timed calls of each at least, 3 per round with 2 timed, as
    # many more as fit LIBRARY_FIRST_SECONDS; then 4 untimed calls each (its own 2, 2 warm-ups);
    # twice, where a keep inside the rounds' spread takes a second window (compare.decide)
    return 2 * (max(LIBRARY_FIRST_SECONDS, LIBRARY_FIRST_RUNS * 1.5 * both) + 4 * both)


def keep_faster(ours: CompiledModel, library: CompiledModel, out: TextIO | None = None,
                deadline: Deadline = Deadline.NONE,
                rounds: int = LIBRARY_FIRST_RUNS) -> tuple[bool, dict]:
    """Whether `ours` (a plan with generated kernels) runs faster than `library` by the
    margin (paired ratio under 1 − config.REFINE_MARGIN; where the rounds' spread leaves that
    in doubt, in a second window too: compare.decide's `confirm`), and the decision's record
    (selection/compare.Decision). A margin, not 1.0: ddddocr's detector kept a plan of
    generated kernels and OpenVINO regions at paired 0.991 in its 3-minute compile that ran
    1.14× the faster library in the benchmark's three-runtime rounds — a wrong keep costs more
    than the margin can win."""
    feeds = random_feeds(library)
    candidate, against = Timed.plan(WOODPECKER, ours, feeds), Timed.plan(LIBRARY, library, feeds)
    try:
        decision = decide(candidate, against, _rounds([candidate.run, against.run], rounds),
                          1 - REFINE_MARGIN, deadline, confirm=True)
    except WoodpeckerError as e:   # random inputs the model refuses: nothing to time on
        return False, {"kept": False, "why": f"not timed: {first_line(e)[:160]}"}
    record = decision.to_json()
    print(f"against the library's own session: {Decision.said(record)}",
          file=out or sys.stderr, flush=True)
    return decision.kept, record

