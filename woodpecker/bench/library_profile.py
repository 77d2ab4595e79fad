"""A plan's library steps as the libraries themselves profile them (`inspect`, `report`).

Contract: `library_steps(model)` is the indices of `model.steps` that are library sessions —
a step on ONNX Runtime or OpenVINO that is the user's whole graph (the library-first plan's
one `Opaque` node, frontend/whole.py) or a region of several nodes (runtime/steps.py).
`profile_library_steps(model, runs)` returns one `LibraryProfile` per such step: the step's
model — for a saved plan its file in the plan folder, read once and checked against the sha256
plan.json's engine section records (`models`, by the step's first node; files.verified_bytes),
else the bytes the engine builds it from (engines/onnx_step.step_bytes) — built again with the
library's profiler on, on the plan's threads and precision, run once to warm up and then `runs`
times on random inputs of the step's shapes and types; its per-node times summed by the
library's op type (`OpTypeRow`: count of nodes of that type in one run, milliseconds per run,
share of the step's summed node time); and its FLOPs from its own ONNX graph (imported with
frontend/onnx_import, `ops.OPS[op].flops` summed; None where the import refuses it). A step the
profiler cannot run (no such library installed, inputs it refuses) has no rows and says why
(`why`); nothing here raises for it. With `runs` 0 only the FLOPs are computed.

Profilers: ONNX Runtime's (`SessionOptions.enable_profiling`; `end_profiling()` writes a
Chrome-trace JSON whose `Node` events named `<node>_kernel_time` carry the op type in
`args.op_name` and the duration in microseconds; the warm-up run, the first `model_run`
event, is left out), and OpenVINO's performance counters (`PERF_COUNT` in the compile
config; `get_profiling_info()` after each inference: per executed node its `node_type`,
`real_time` and `exec_type` — the kernel that ran, e.g. `jit_avx512_FP32`). The op types are
the library's own names after its graph optimisations: ONNX Runtime's fused `FusedConv` or
layout `ReorderOutput`, OpenVINO's `Convolution`, `Eltwise`, `Reorder`. Why: a library-first
plan is one session of the whole model, and without this `inspect` showed one `opaque:model`
node with 0 FLOPs (issue 76). The times are the profilers' own, which add per-node overhead;
they are for the split between op types, not for comparing plans (bench/compare.py does that).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from woodpecker.engines import names
from woodpecker.errors import first_line
from woodpecker.files import inside, verified_bytes
from woodpecker.ir.graph import Node, Value
from woodpecker.ir.steps import step_io
from woodpecker.ops import OPS
from woodpecker.ops.opaque import OP as OPAQUE
from woodpecker.ops.opaque import WHOLE_MODEL
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.runtime.plan import read_plan_json

# the engines whose steps are library sessions profiled here, and what their step models are
# called in errors (as engines/*_engine.py call them)
LIBRARIES = {names.ONNXRUNTIME: "ONNX Runtime model", names.OPENVINO: "OpenVINO model"}
# what measured each library's rows (said by `inspect` and `report`)
PROFILERS = {names.ONNXRUNTIME: "ONNX Runtime's profiler",
             names.OPENVINO: "OpenVINO's performance counters"}


@dataclass(frozen=True)
class OpTypeRow:
    """One op type of a library step's profile: `count` nodes of it in one run, `ms` their
    summed time per run, `share` of the step's summed node time; `kernels`: the
    implementations that ran (OpenVINO's exec_type; empty for ONNX Runtime)."""

    op_type: str
    count: int
    ms: float
    share: float
    kernels: tuple[str, ...] = ()


@dataclass
class LibraryProfile:
    """A library step's profile (module docstring): `step` its index in `model.steps`,
    `engine`, `nodes` the plan nodes it runs, `first` the first one's name, `whole` whether
    it is the user's whole graph (the library-first plan's one node), `flops` from its ONNX
    graph (None: its import refused), `runs` profiled, `rows` by time (largest first), `why`
    where there are no rows."""

    step: int
    engine: str
    nodes: int
    first: str
    whole: bool = False
    flops: int | None = None
    runs: int = 0
    rows: list[OpTypeRow] = field(default_factory=list)
    why: str | None = None

    @property
    def ms(self) -> float:
        """The step's summed node time per run (the profiler's)."""
        return sum(r.ms for r in self.rows)

    def to_json(self) -> dict:
        return {**asdict(self), "ms": self.ms}

    def said(self) -> str:
        """One line: the step, what it runs, its FLOPs, and who profiled it (or why not)."""
        what = "the whole model" if self.whole else \
            f"{self.nodes} node(s) from {self.first!r}"
        flops = "FLOPs unknown" if self.flops is None else f"{self.flops / 1e6:.2f} MFLOPs"
        head = f"library step {self.step}: {self.engine} session of {what}, {flops}"
        if self.why:
            return f"{head}; {self.why}"
        if not self.rows:
            return f"{head}; not profiled (0 runs)"
        return (f"{head}; {PROFILERS[self.engine]} over {self.runs} runs: {self.ms:.3f} ms "
                "per run in its nodes")

    def table(self) -> str:
        """The rows as text (`inspect`)."""
        lines = [f"  {'op type':<28} {'count':>5} {'ms/run':>9} {'share':>7}"]
        lines += [f"  {r.op_type[:28]:<28} {r.count:>5} {r.ms:>9.3f} {r.share:>7.1%}"
                  + (f"  {', '.join(r.kernels)}" if r.kernels else "") for r in self.rows]
        return "\n".join(lines)


def is_library_step(nodes: list[Node], engine: str) -> bool:
    """Whether a step of `nodes` on `engine` is a library session (module docstring)."""
    return engine in LIBRARIES and (len(nodes) > 1 or nodes[0].op == OPAQUE)


def library_steps(model: CompiledModel) -> list[int]:
    g, engines = model.graph, model.plan.engines
    return [k for k, step in enumerate(model.steps)
            if is_library_step([g.nodes[i] for i in step], engines[step[0]])]


def profile_library_steps(model: CompiledModel, runs: int) -> list[LibraryProfile]:
    """One `LibraryProfile` per library step of `model` (module docstring)."""
    plan, g = model.plan, model.graph
    sections = None
    out = []
    for k in library_steps(model):
        nodes = [g.nodes[i] for i in model.steps[k]]
        engine = plan.engines[model.steps[k][0]]
        ins, outs = step_io(nodes, g, plan.every)
        prof = LibraryProfile(k, engine, len(nodes), nodes[0].name, whole=len(nodes) == 1 and
                              nodes[0].attrs.get("op_type") == WHOLE_MODEL)
        try:
            if plan.directory is not None and sections is None:
                sections = read_plan_json(plan.directory)["engines"]
            data = _step_model(model, nodes, ins, outs, engine, sections)
        except Exception as e:  # noqa: BLE001 - a plan error or the exporter's: said, not raised
            prof.why = f"no step model: {first_line(e)}"
            out.append(prof)
            continue
        prof.flops = _flops(data, ins)
        if runs > 0:
            try:
                feeds = _feeds(ins)
                threads = plan.target.run_threads
                times = _ort(data, feeds, threads, runs) if engine == names.ONNXRUNTIME else \
                    _openvino(data, feeds, threads, plan.precision, runs)
                prof.rows, prof.runs = _rows(times, runs), runs
            except Exception as e:  # noqa: BLE001 - the libraries raise their own types
                prof.why = f"{engine} could not profile the step: {first_line(e)}"
        out.append(prof)
    return out


def with_step_flops(profiles: list[LibraryProfile], steps: list[list[int]],
                    rows: list[dict]) -> None:
    """A one-node library step's FLOPs from its graph into its node's row of
    `CompiledModel.node_table()` (`rows`): the whole model, 0 FLOPs to Woodpecker as an Opaque
    node, then counts as what it computes (`inspect`, `report`)."""
    for p in profiles:
        if p.flops is not None and len(steps[p.step]) == 1:
            rows[steps[p.step][0]]["flops"] = p.flops


def _step_model(model: CompiledModel, nodes: list[Node], ins: list[Value], outs: list[Value],
                engine: str, sections: dict | None) -> bytes:
    """The step's model: the plan folder's file, checked, or the bytes the engine builds."""
    plan = model.plan
    if plan.directory is None:
        from woodpecker.engines.onnx_step import step_bytes

        return step_bytes(nodes, ins, outs, model.graph.opset, model.graph.source)
    what = LIBRARIES[engine]
    entry = (sections or {}).get(engine, {}).get("models", {}).get(nodes[0].name)
    if entry is None:
        raise ValueError(f"plan.json names no {what} for the step at node {nodes[0].name!r}")
    return verified_bytes(inside(plan.directory, entry["file"], what), entry["sha256"], what)


def _flops(data: bytes, ins: list[Value]) -> int | None:
    """The FLOPs of the step's ONNX graph at the step's input shapes (None: not importable)."""
    from woodpecker.frontend.onnx_import import import_onnx, load_model_proto

    try:
        proto = load_model_proto(data)
        names_in = {i.name for i in proto.graph.input}
        graph = import_onnx(proto, {v.name: tuple(v.shape) for v in ins if v.name in names_in})
        return sum(int(OPS[n.op].flops(n)) for n in graph.nodes)
    except Exception:  # noqa: BLE001 - a graph Woodpecker cannot import has no count
        return None


def _feeds(ins: list[Value], seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs of the step's shapes and types (as bench/compare.random_feeds makes)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in ins:
        shape, dtype = tuple(max(d, 1) for d in v.shape), np.dtype(v.dtype)
        if np.issubdtype(dtype, np.floating):
            feeds[v.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[v.name] = rng.integers(0, 2, shape).astype(bool)
        elif np.issubdtype(dtype, np.integer):
            feeds[v.name] = rng.integers(0, 10, shape).astype(dtype)
        else:
            feeds[v.name] = np.full(shape, "a", dtype=object)
    return feeds


# per node of a profile: (op type, node name, microseconds over the profiled runs, kernel)
Times = list[tuple[str, str, float, str]]


def _ort(data: bytes, feeds: dict, threads: int, runs: int) -> Times:
    """ONNX Runtime's profile of the step (module docstring), warm-up run left out."""
    import onnxruntime as ort

    from woodpecker.engines.ort_engine import session_options

    def session(folder: str, layout: bool):
        so = session_options(threads, layout)
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(folder, "step")
        return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])

    with tempfile.TemporaryDirectory(prefix="woodpecker-profile-") as folder:
        try:
            sess = session(folder, True)
        except Exception:  # noqa: BLE001 - as the engine does: without the layout passes
            sess = session(folder, False)
        given = {i.name for i in sess.get_inputs()}
        feeds = {k: v for k, v in feeds.items() if k in given}
        for _ in range(runs + 1):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    if isinstance(events, dict):      # some releases wrap the events
        events = events.get("traceEvents", [])
    starts = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    after = starts[1] if len(starts) > 1 else 0     # the second run's start
    times: dict[tuple[str, str], float] = defaultdict(float)
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time") and e.get("ts", 0) >= after:
            op = e.get("args", {}).get("op_name", "?")
            times[(op, name.removesuffix("_kernel_time"))] += float(e.get("dur", 0))
    return [(op, node, us, "") for (op, node), us in times.items()]


def _openvino(data: bytes, feeds: dict, threads: int, precision, runs: int) -> Times:
    """OpenVINO's performance counters over the runs after a warm-up (module docstring)."""
    import openvino as ov

    from woodpecker.config import OPENVINO_COMPILE_LIMIT_S, OPENVINO_PROBE_OPS
    from woodpecker.engines.openvino_engine import compile_config
    from woodpecker.engines.openvino_probe import bounded_compile

    core = ov.Core()
    read = core.read_model(data)
    ops = len(read.get_ops())
    config = {**compile_config(threads, ops >= OPENVINO_PROBE_OPS, precision), "PERF_COUNT": True}
    compiled = bounded_compile(core, read, data, config, ops, OPENVINO_COMPILE_LIMIT_S,
                               OPENVINO_PROBE_OPS)
    request = compiled.create_infer_request()
    names_in = {n for port in compiled.inputs for n in port.get_names()}
    inputs = {compiled.input(k): v for k, v in feeds.items() if k in names_in}
    request.infer(inputs)
    times: dict[tuple[str, str], float] = defaultdict(float)
    kernels: dict[tuple[str, str], str] = {}
    for _ in range(runs):
        request.infer(inputs)
        for p in request.get_profiling_info():
            if p.status != p.Status.EXECUTED:     # not run, or optimised out
                continue
            times[(p.node_type, p.node_name)] += p.real_time.total_seconds() * 1e6
            kernels[(p.node_type, p.node_name)] = p.exec_type
    return [(op, node, us, kernels[(op, node)]) for (op, node), us in times.items()]


def _rows(times: Times, runs: int) -> list[OpTypeRow]:
    """The nodes' times summed by op type, per run, largest first."""
    by: dict[str, list] = {}
    for op, _, us, kernel in times:
        acc = by.setdefault(op, [0, 0.0, []])
        acc[0] += 1
        acc[1] += us / runs / 1e3
        if kernel and kernel not in acc[2]:
            acc[2].append(kernel)
    total = sum(ms for _, ms, _ in by.values()) or 1.0
    rows = [OpTypeRow(op, n, ms, ms / total, tuple(k)) for op, (n, ms, k) in by.items()]
    return sorted(rows, key=lambda r: (-r.ms, r.op_type))
