"""How `woodpecker.InferenceSession` takes ONNX Runtime's `SessionOptions` and `RunOptions`:
every field honoured, or named in one warning line where ignoring it cannot change an output.

Contract — `read_session_options(options, proto, where)` gives the `Settings` a session is
built with:
- values that are part of the model: `add_initializer(name, OrtValue)` and
  `add_external_initializers(names, OrtValues)` replace those initializers (`initializers`:
  compiled in, and in the cache key by their sha256; one inside a subgraph, or of a type
  numpy holds only through ml_dtypes — bfloat16, float8, 4-bit —, runs the model on ORT's
  own session, `on_ort`); `add_free_dimension_override_by_name` /
  `_by_denotation` fix those dimensions (`shapes`: they become the inputs' shapes, as ORT's
  `get_inputs()` then shows them);
- `intra_op_num_threads` (> 0) the threads; `enable_profiling` / `profile_file_prefix` a
  Chrome-trace profile (`Profiler`); `optimized_model_filepath` is written by ONNX Runtime
  itself, with these very options (its optimised form of the model, as ORT writes it; the
  plan Woodpecker runs is the cached folder);
- `graph_optimization_level`: every level builds the same plan — Woodpecker's graph passes
  keep the model's results, as ORT's levels do — so it is accepted; `log_severity_level`,
  `log_verbosity_level`, `logid` accepted; `execution_mode`, `execution_order`,
  `inter_op_num_threads`, the memory-arena/pattern/reuse switches, `use_deterministic_compute`
  and `use_per_session_threads`, when not ORT's defaults, and providers added to the options,
  are named in one warning line (Woodpecker's plan has its own schedule and arena);
- `add_session_config_entry`: ORT gives no way to list the entries set, so the keys known are
  read: the harmless ones (`KNOWN_HARMLESS`) accepted, those that change what runs
  (`ON_ORT_KEYS`: a model in ORT's format, denormals as zero) run the model on ORT's session;
- `register_custom_ops_library`: ORT does not say which libraries were registered either, so a
  model with ops of a domain outside ONNX's and Microsoft's runs on ORT's own session with
  these options (`on_ort`), which holds the library's kernels.
ORT keeps initializers and free-dimension overrides in C++ where Python cannot read them, so
they are read by asking ONNX Runtime: tiny probe models built into ORT sessions with the
user's options (optimisation off, quiet, no profile or file written while built, then the
fields restored) — the model's inputs alone (its `get_inputs()` shapes are the overridden
ones), and its initializers as empty tensors of their types, each passed to an output (a run
gives every initializer ORT would replace; one ORT reads from an external file is probed
alone, pointing at no file: it builds only where the options supply it; one not supplied
by name is probed again with its own file name from an empty folder, which only a file the
options hold in memory — `add_external_initializers_from_files_in_memory` — satisfies). A
probe ORT refuses is the error ORT would raise for the session, one LoadFailure line.

`check_run_options(run_options)` (each `run`): `terminate` set is ORT's Fail; the log fields,
`logid`, `only_execute_path_to_fetches` accepted; known `add_run_config_entry` keys accepted
(the unknown cannot be listed). `AdapterProbe` says whether `add_active_adapter` gave values to
the model's overridable initializers (a probe run with those run options): such a call runs on
ORT's own session, which applies the adapter.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from woodpecker.errors import first_line
from woodpecker.ops.opaque import OP as OPAQUE
from woodpecker.session_api import LoadFailure, RunFailure, UnknownProvider

CPU = ["CPUExecutionProvider"]
_CPU = {"CPUExecutionProvider", "WoodpeckerExecutionProvider"}
STANDARD_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training"}
KNOWN_HARMLESS = (
    "session.intra_op.allow_spinning", "session.inter_op.allow_spinning",
    "session.force_spinning_stop", "session.disable_prepacking", "session.use_env_allocators",
    "session.dynamic_block_base", "session.intra_op_thread_affinities",
    "session.use_device_allocator_for_initializers", "session.disable_cpu_ep_fallback",
    "session.record_ep_graph_assignment_info", "session.save_model_format",
    "session.use_ort_model_bytes_directly", "session.disable_quant_qdq",
    "session.enable_quant_qdq_cleanup", "session.disable_double_qdq_remover",
    "optimization.disable_specified_optimizers", "session.qdqisint8allowed",
    "session.disable_aot_function_inlining", "session.graph_optimizations_loop_level",
    "session.disable_gemm_fast_gelu", "session.x64quantprecision",
)
ON_ORT_KEYS = {"session.load_model_format": "ORT", "session.set_denormal_as_zero": "1"}
KNOWN_RUN_KEYS = ("memory.enable_memory_arena_shrinkage", "gpu_graph_id",
                  "disable_synchronize_execution_providers", "run.qnn_perf_mode")
# (field, ORT's default): fields Woodpecker's plan has its own answer to
_SCHEDULE_FIELDS = (("execution_mode", ort.ExecutionMode.ORT_SEQUENTIAL),
                    ("execution_order", ort.ExecutionOrder.DEFAULT),
                    ("inter_op_num_threads", 0), ("enable_cpu_mem_arena", True),
                    ("enable_mem_pattern", True), ("enable_mem_reuse", True),
                    ("use_deterministic_compute", False), ("use_per_session_threads", True))
_QUIET = (("graph_optimization_level", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
          ("log_severity_level", 3), ("optimized_model_filepath", ""),
          ("enable_profiling", False))


@dataclass
class Settings:
    """What a session's options make of it (see the module's docstring)."""

    options: Any = None
    threads: int | None = None
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    shapes: dict[str, list] = field(default_factory=dict)
    profile_prefix: str | None = None
    optimized_path: str | None = None
    on_ort: str | None = None        # why the whole model runs on ORT's session


def config_entry(get: Any, key: str) -> str | None:
    try:
        return get(key)
    except Exception:       # ORT: "does not have configuration with key"
        return None


@contextmanager
def _quiet(so: Any):
    saved = [(name, getattr(so, name)) for name, _ in _QUIET]
    try:
        for name, value in _QUIET:
            setattr(so, name, value)
        yield so
    finally:
        for name, value in saved:
            setattr(so, name, value)


def _probe(graph: onnx.GraphProto, so: Any, where: str,
           folder: str | None = None, opset: int = 17) -> ort.InferenceSession:
    """ORT's session of a probe graph: from bytes, or from a file in `folder` (its external
    data is looked up there)."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 21 else 10
    source = model.SerializeToString()
    if folder is not None:
        source = os.path.join(folder, "probe.onnx")
        onnx.save_model(model, source)
    try:
        with _quiet(so):
            return ort.InferenceSession(source, so, providers=CPU)
    except Exception as e:
        raise LoadFailure(f"{where}: ONNX Runtime refuses the session options: "
                          f"{first_line(e)}") from None


def _inputs(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in proto.graph.initializer}
    return [vi for vi in proto.graph.input if vi.name not in inits]


def _probe_shapes(proto: onnx.ModelProto, so: Any, where: str) -> dict[str, list]:
    """{input: shape} where the options fixed a symbolic dimension of a tensor input."""
    ins = [vi for vi in _inputs(proto) if vi.type.WhichOneof("value") == "tensor_type" and
           any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)]
    if not ins:
        return {}
    outs = [helper.make_tensor_value_info(f"wp_probe_{i}", vi.type.tensor_type.elem_type,
                                          None) for i, vi in enumerate(ins)]
    nodes = [helper.make_node("Identity", [vi.name], [o.name]) for vi, o in zip(ins, outs)]
    sess = _probe(helper.make_graph(nodes, "probe", ins, outs), so, where)
    before = {vi.name: [d.dim_value if d.HasField("dim_value") else None
                        for d in vi.type.tensor_type.shape.dim] for vi in ins}
    out = {}
    for a in sess.get_inputs():
        fixed = [d if isinstance(d, int) and d > 0 else None for d in a.shape]
        if fixed != before[a.name]:
            out[a.name] = fixed
    return out


def _readable(t: onnx.TensorProto) -> bool:
    """Whether ORT hands an initializer of this type back as a numpy array."""
    return t.data_type not in (0, onnx.TensorProto.BFLOAT16) and t.data_type < 17


def _values(tensors: list[onnx.TensorProto], so: Any, where: str,
            folder: str | None = None) -> list[np.ndarray]:
    outs = [helper.make_tensor_value_info(f"wp_probe_{i}", t.data_type, None)
            for i, t in enumerate(tensors)]
    nodes = [helper.make_node("Identity", [t.name], [o.name]) for t, o in zip(tensors, outs)]
    sess = _probe(helper.make_graph(nodes, "probe", [], outs, tensors), so, where, folder)
    return sess.run(None, {})


def _in_memory(tensors: list[onnx.TensorProto], so: Any, where: str) -> dict[str, np.ndarray]:
    """{name: value} of the tensors whose external data file the options supply in memory
    (`add_external_initializers_from_files_in_memory`): each file's first tensor probed from
    an empty folder, where only a file in memory is found; then all of that file's."""
    by_file: dict[str, list[onnx.TensorProto]] = {}
    for t in tensors:
        location = ExternalDataInfo(t).location or ""
        if location and not os.path.isabs(location) and ".." not in location.split("/"):
            by_file.setdefault(location, []).append(t)
    out: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory(prefix="woodpecker-probe-") as empty:
        for group in by_file.values():
            try:
                _values(group[:1], so, where, empty)
            except LoadFailure:
                continue        # (not in memory: read from the model's folder)
            out.update(zip((t.name for t in group), _values(group, so, where, empty)))
    return out


def _absent(t: onnx.TensorProto) -> onnx.TensorProto:
    """`t` with its external data in a file that does not exist."""
    out = onnx.TensorProto()
    out.CopyFrom(t)
    for entry in out.external_data:
        if entry.key == "location":
            entry.value = f"woodpecker-probe-{uuid.uuid4().hex}.absent"
    return out


def _probe_initializers(proto: onnx.ModelProto, so: Any, where: str) -> dict[str, np.ndarray]:
    """{name: value} of each initializer the options replace."""
    tensors = [t for t in proto.graph.initializer if _readable(t)]
    inline = [helper.make_tensor(t.name, t.data_type, [0], []) for t in tensors
              if not uses_external_data(t)]
    out: dict[str, np.ndarray] = {}
    if inline:
        for t, v in zip(inline, _values(inline, so, where)):
            if v.shape != (0,):
                out[t.name] = v
    external = [_absent(t) for t in tensors if uses_external_data(t)]
    try:               # all supplied by the options: one probe
        out.update({t.name: v for t, v in zip(external, _values(external, so, where))}
                   if external else {})
    except LoadFailure:
        for t in external:
            try:
                out[t.name] = _values([t], so, where)[0]
            except LoadFailure:
                pass       # (not supplied by name: in memory, or read from the model's file)
    out.update(_in_memory([t for t in tensors if uses_external_data(t) and t.name not in out],
                          so, where))
    return out


def _subgraph_initializers(g: onnx.GraphProto) -> list[onnx.TensorProto]:
    """The initializers of every graph inside `g`'s nodes (If branches, Loop and Scan bodies),
    at any depth."""
    out = []
    for node in g.node:
        for a in node.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                        list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                out += [*sub.initializer, *_subgraph_initializers(sub)]
    return out


# the newest opset the probe of other initializers is written in (Cast from 4-bit ints)
_CAST_OPSET = 21


def _replaced_not_compiled(proto: onnx.ModelProto, so: Any, where: str) -> list[str]:
    """The initializers the options replace that a plan of Woodpecker's does not take in: those
    of types numpy holds only through ml_dtypes (bfloat16, float8, 4-bit) and those inside
    subgraphs (ORT replaces an initializer by name at any depth). Probed as empty tensors of
    their types, each cast to float (or passed through): a value back means replaced."""
    tensors = {t.name: t for t in [*(t for t in proto.graph.initializer if not _readable(t)),
                                   *_subgraph_initializers(proto.graph)]}
    if not tensors:
        return []
    probes = [helper.make_tensor(n, t.data_type, [0], []) for n, t in tensors.items()]
    outs = [helper.make_tensor_value_info(f"wp_probe_{i}", onnx.TensorProto.FLOAT
                                          if not _readable(t) else t.data_type, None)
            for i, t in enumerate(probes)]
    nodes = [helper.make_node("Cast", [t.name], [o.name], to=onnx.TensorProto.FLOAT)
             if not _readable(t) else helper.make_node("Identity", [t.name], [o.name])
             for t, o in zip(probes, outs)]
    try:
        sess = _probe(helper.make_graph(nodes, "probe", [], outs, probes), so, where,
                      opset=_CAST_OPSET)
        values = sess.run(None, {})
    except LoadFailure:
        return sorted(tensors)        # (a type the probe cannot cast: ORT decides them all)
    return [n for n, v in zip(tensors, values) if v.shape != (0,)]


def read_session_options(so: Any, proto: onnx.ModelProto, where: str) -> Settings:
    if so is None:
        return Settings()
    if not isinstance(so, ort.SessionOptions):
        raise LoadFailure(f"sess_options is an onnxruntime.SessionOptions, not a "
                          f"{type(so).__name__}")
    s = Settings(options=so, threads=so.intra_op_num_threads or None)
    s.initializers = _probe_initializers(proto, so, where)
    s.shapes = _probe_shapes(proto, so, where)
    s.profile_prefix = so.profile_file_prefix if so.enable_profiling else None
    s.optimized_path = so.optimized_model_filepath or None
    ignored = [f"{name}={getattr(so, name)}" for name, default in _SCHEDULE_FIELDS
               if getattr(so, name) != default]
    if so.has_providers():
        ignored.append("the providers added to them")
    if ignored:
        warnings.warn(f"Woodpecker's plan has its own schedule and memory: the session "
                      f"options' {', '.join(ignored)} ignored", UserWarning, stacklevel=3)
    for key, value in ON_ORT_KEYS.items():
        if config_entry(so.get_session_config_entry, key) == value:
            s.on_ort = f"session config entry {key}={value}"
    elsewhere = _replaced_not_compiled(proto, so, where)
    if elsewhere:
        s.on_ort = (f"the session options replace initializer(s) {', '.join(elsewhere[:3])}"
                    f"{' …' if len(elsewhere) > 3 else ''} (inside a subgraph, or of a type "
                    "Woodpecker's plans hold only in a library's model)")
    domains = {op.domain for op in proto.opset_import} - STANDARD_DOMAINS
    if domains:
        s.on_ort = f"ops of the domain(s) {', '.join(sorted(domains))} (custom ops)"
    return s


def check_run_options(ro: Any) -> None:
    if ro is None:
        return
    if not isinstance(ro, ort.RunOptions):
        raise RunFailure(f"run_options is an onnxruntime.RunOptions, not a "
                         f"{type(ro).__name__}")
    if ro.terminate:
        raise RunFailure("Exiting due to terminate flag being set to true.")


def check_providers(providers: "list | None", provider_options: "list | None",
                    unknown_raises: bool = False) -> None:
    """ORT's treatment of `providers` it cannot use: one warning line for those skipped (not
    CPU ones: CUDA, Azure, a misspelt name) and for any not in ORT's form (a name or a (name,
    options dict) pair; `provider_options` as long as `providers`). With `unknown_raises`
    (`set_providers`, which has no CPU fallback in ORT) a name no ORT build knows
    (`onnxruntime.get_all_providers()`) is ORT's RuntimeError instead."""
    providers = [providers] if isinstance(providers, str) else list(providers or [])
    if unknown_raises:
        known = {*ort.get_all_providers(), *_CPU}
        for p in providers:
            name = p[0] if isinstance(p, (tuple, list)) and len(p) == 2 else p
            if isinstance(name, str) and name not in known:
                raise UnknownProvider(f"Unknown Provider Type: {name}")
    skipped, malformed = [], []
    for p in providers:
        pair = isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[1], dict)
        name = p[0] if pair else p
        if not isinstance(name, str):
            malformed.append(f"{p!r} is no provider (a name or a (name, options dict) pair)")
        elif name not in _CPU:
            skipped.append(name)
    if providers and provider_options is not None and len(provider_options) != len(providers):
        malformed.append("provider_options is not as long as providers")
    said = ([f"provider(s) {', '.join(skipped)} skipped"] if skipped else []) + malformed
    if said:
        warnings.warn(f"Woodpecker runs on the CPU: {'; '.join(said)}", UserWarning,
                      stacklevel=3)


class AdapterProbe:
    """Whether a RunOptions' active LoRA adapters give values to the model's overridable
    initializers (the initializers also listed as graph inputs, IR 4 on)."""

    def __init__(self, proto: onnx.ModelProto, where: str) -> None:
        listed = {vi.name for vi in proto.graph.input}
        tensors = [helper.make_tensor(t.name, t.data_type, [0], []) for t in
                   proto.graph.initializer if t.name in listed and _readable(t)]
        self._session = None
        if tensors and proto.ir_version >= 4:
            ins = [helper.make_tensor_value_info(t.name, t.data_type, None) for t in tensors]
            outs = [helper.make_tensor_value_info(f"wp_probe_{i}", t.data_type, None)
                    for i, t in enumerate(tensors)]
            nodes = [helper.make_node("Identity", [t.name], [o.name])
                     for t, o in zip(tensors, outs)]
            so = ort.SessionOptions()
            self._session = _probe(helper.make_graph(nodes, "probe", ins, outs, tensors), so,
                                   where)

    def active(self, ro: Any) -> bool:
        if self._session is None or ro is None:
            return False
        return any(v.shape != (0,) for v in self._session.run(None, {}, ro))


class Profiler:
    """A Chrome-trace profile as ORT writes it: `<prefix>_<date>_<time>_<ms>.json`, a JSON
    list of complete ("X") events with microsecond `ts` since the session's start and `dur`."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.start_ns = time.time_ns()
        self._t0 = time.perf_counter_ns()
        self._events: list[dict] = []

    def event(self, cat: str, name: str, start_ns: int, dur_ns: int, **args: Any) -> None:
        self._events.append({"cat": cat, "pid": os.getpid(), "tid": os.getpid(),
                             "dur": dur_ns // 1000, "ts": (start_ns - self._t0) // 1000,
                             "ph": "X", "name": name, "args": args})

    def run(self, model: Any, feeds: dict, provider: str) -> dict[str, np.ndarray]:
        """A run of the CompiledModel with each step's time recorded in the profile, as
        `<provider>:<engine>`."""
        times = [0.0] * len(model.steps)
        start = time.perf_counter_ns()
        with model._lock:       # (the runtime's per-step clock: CompiledModel.profile's)
            model.activate()
            result = model._executor.run(model._validate(feeds), times)
        g, at = model.graph, start
        self.event("Session", "model_run", start, time.perf_counter_ns() - start)
        for step, t in zip(model.steps, times):
            node = g.nodes[step[0]]
            self.event("Node", f"{node.name}_kernel_time", at, int(t * 1e9),
                       op_name=node.attrs["op_type"] if node.op == OPAQUE else node.op,
                       provider=f"{provider}:{model.plan.engines[step[0]]}",
                       nodes=str(len(step)))
            at += int(t * 1e9)
        return result

    def end(self) -> str:
        now = datetime.now()
        path = f"{self.prefix}_{now:%Y-%m-%d_%H-%M-%S}_{now.microsecond // 1000:03d}.json"
        with open(path, "w") as f:
            json.dump(self._events, f)
        self._events = []
        return path
