"""`woodpecker.InferenceSession`: a drop-in for `onnxruntime.InferenceSession`, so switching an
ONNX Runtime program to Woodpecker is one line.

    sess = woodpecker.InferenceSession("model.onnx")     # was: onnxruntime.InferenceSession(…)
    outputs = sess.run(None, {"input": x})               # a list, in the model's output order
    [i.name for i in sess.get_inputs()]; sess.get_outputs()

Contract: `run(output_names, input_feed, run_options=None)` returns the outputs named (all, in
the model's order, for None or []) as numpy arrays; a feed that is not an array (a nested list,
a scalar) is made one of the input's declared element type, a str, bytes or void array for
a string input is taken as ORT takes it (str objects), an array of another dtype is refused.
`get_inputs()`/`get_outputs()` give ORT's NodeArg fields (`name`, `shape` — a symbolic
dimension as its name —, `type` as "tensor(float)" or "seq(tensor(float))"); the rest of
ORT's session API answers as ORT's CPU session does (`get_providers`, `set_providers`,
`get_provider_options`, `io_binding`/`run_with_iobinding`, `run_async`,
`run_with_ort_values`, `end_profiling`, `get_profiling_start_time_ns`, the memory infos and
`get_input_epdevices`,
`get_provider_graph_assignment_info` — a subgraph per plan step, named by its engine; ORT's
Fail unless `session.record_ep_graph_assignment_info` is "1" —, `get_overridable_initializers`,
`get_session_options`, `get_modelmeta`). Every `SessionOptions` and `RunOptions` field is
honoured or named in one warning line (session_options.py: replaced initializers and
free-dimension overrides are compiled in and keyed; profiling writes a Chrome trace;
`optimized_model_filepath` is ORT's own). ORT's own session of the model, with the options
given, runs what no plan of Woodpecker's can: values that are no tensors (sequences,
optionals, maps), ops of a custom domain, a call whose RunOptions hold an active LoRA adapter
or whose feed overrides an initializer, a model whose outputs are all graph inputs (an input
that is also an output otherwise comes back copied, not compiled). `providers` it cannot use
(CUDA, Azure, a misspelt name) are skipped with one warning line, as ORT skips them, and the
session runs on the CPU; `set_providers` given a name ORT does not know raises as ORT does.
A path's external data is read from beside the model file (bytes': from the working
directory), never from outside that folder. Each error raised here is both a Woodpecker error
and the exception ORT raises for that mistake (session_api.py), in one line.

The first session for a model compiles it (the default pipeline: graph passes, ONNX Runtime
regions, and the generated kernels a tuning log already holds for its tasks — the shared log in
the Woodpecker cache unless `tuning_log=` names one; `tune="3m"` tunes once for that long) and
saves the plan in the cache (cache.py: an entry per key document, recorded beside plan.json as
source.json) under everything that defines its result: the sha256 of the model's bytes and of
each external data file it names, of each initializer the options replace, the input shapes,
the options, the target, and the versions of Woodpecker, onnx and each engine's library. Later
sessions for the same key load that plan; one whose record differs, or that no longer loads (a
damaged folder), is compiled again. A
model with dynamic dimensions is compiled for the shapes of the first feed that has them
(`input_shapes=` fixes them up front), one plan per set of shapes, as ONNX Runtime serves any.
The cache is kept under `SESSION_CACHE_BYTES` (env `WOODPECKER_SESSION_CACHE_BYTES`, "2GiB"):
after each save the least recently used plans (a load marks its plan used) are removed until
the rest fit, never the plan just saved.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime

from woodpecker.cache import cache_dir, entry_key, save_entry, source_differs, touch
from woodpecker.compiler import compile as wp_compile
from woodpecker.engines import names
from woodpecker.errors import PlanError, WoodpeckerError, first_line
from woodpecker.ops.opaque import OP as OPAQUE
from woodpecker.options import CompileOptions
from woodpecker.runtime.compiled import CompiledModel, load
from woodpecker.schedule.memory import parse_bytes
from woodpecker.session_api import AssignedNode as Node
from woodpecker.session_api import AssignedSubgraph as Subgraph
from woodpecker.session_api import (
    InvalidArgument,
    InvalidFeed,
    IOBinding,
    LoadFailure,
    MissingInput,
    ModelMetadata,
    NodeArg,
    NotRecorded,
    args,
    cpu_ep_device,
    cpu_memory_info,
    np_dtype,
    string_array,
)
from woodpecker.session_model import (
    external_digests,
    inlined,
    model_config,
    parse,
    read_model,
    replaced,
    without,
)
from woodpecker.session_options import (
    CPU,
    AdapterProbe,
    Profiler,
    Settings,
    check_providers,
    check_run_options,
    config_entry,
    read_session_options,
)
from woodpecker.target import Target
from woodpecker.version import __version__

PROVIDER = "WoodpeckerExecutionProvider"
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"

# The most bytes the sessions' plan folders may hold together before the least recently used
# are removed: room for a few dozen mid-sized models' plans (a ResNet-50 plan holds its 100 MB
# of weights at least), never unbounded. Env WOODPECKER_SESSION_CACHE_BYTES overrides it.
SESSION_CACHE_BYTES = 4 << 30


def _fmt(shape) -> str:
    return "x".join(map(str, shape)) if len(shape) else "scalar"


@cache
def _versions() -> dict[str, str | None]:
    """The versions of the libraries a plan's result depends on (None: not installed): onnx's,
    and each engine's distribution (named as the engine), read from the installed metadata, so
    none is imported for this."""
    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {"woodpecker": __version__, "onnx": onnx.__version__,
            **{engine: version(engine) for engine in names.ALL},
            names.ONNXRUNTIME: onnxruntime.__version__}   # (any of its distributions)


def cache_limit() -> int:
    """The byte limit of the sessions' cache: env WOODPECKER_SESSION_CACHE_BYTES ("2GiB",
    "500000000"), else SESSION_CACHE_BYTES; a bad value is one WoodpeckerError line."""
    text = os.environ.get("WOODPECKER_SESSION_CACHE_BYTES")
    try:
        return parse_bytes(text) if text else SESSION_CACHE_BYTES
    except WoodpeckerError as e:
        raise WoodpeckerError(f"WOODPECKER_SESSION_CACHE_BYTES: {e}") from None


def _digest(a: np.ndarray) -> str:
    body = repr(a.tolist()).encode() if a.dtype == object else np.ascontiguousarray(a).tobytes()
    return hashlib.sha256(f"{a.dtype.str}{list(a.shape)}".encode() + body).hexdigest()


def _tensor(vi: onnx.ValueInfoProto) -> bool:
    return vi.type.WhichOneof("value") == "tensor_type"


class InferenceSession:
    """See the module's docstring. Woodpecker's own keywords: `tune` (a budget such as "3m",
    seconds, or True for the default: tune the model's kernels once, before its first plan is
    saved), `tuning_log`, `engines`, `threads` (instead of `sess_options.intra_op_num_threads`),
    `input_shapes` ({input: shape} for dynamic dimensions), `cache` (the folder for plans;
    default: `<Woodpecker cache>/sessions`), `progress` (where compile progress goes)."""

    def __init__(self, path_or_bytes: "str | os.PathLike | bytes", sess_options: Any = None,
                 providers: "list | None" = None, provider_options: "list | None" = None, *,
                 tune: "str | float | bool | None" = None,
                 tuning_log: "str | os.PathLike | None" = None,
                 engines: str | None = None, threads: int | None = None,
                 input_shapes: "dict[str, tuple[int, ...]] | None" = None,
                 cache: "str | os.PathLike | None" = None, progress: Any = None) -> None:
        check_providers(providers, provider_options)
        data, self._base, self._where = read_model(path_or_bytes)
        self._source = data if isinstance(path_or_bytes, (bytes, bytearray, memoryview)) \
            else os.fspath(path_or_bytes)       # what ORT's own session is built from
        original = parse(data, self._where)    # external data not read in (see _plan)
        self._sha = hashlib.sha256(data).hexdigest()
        self._options = sess_options = model_config(sess_options, original, self._where)
        self._settings: Settings = read_session_options(sess_options, original, self._where)
        self._proto = replaced(original, self._settings.initializers)
        self._overrides = {k: _digest(v) for k, v in self._settings.initializers.items()}
        self._external = external_digests(self._proto, self._base, self._where)
        threads = threads or self._settings.threads
        log = tuning_log if tuning_log is not None else cache_dir() / "tuning.jsonl"
        self._compile_options = CompileOptions(
            engines=engines, threads=threads, tune=tune,
            tuning_log=os.fspath(log) if tune or Path(log).exists() else None, resume=True)
        self._target = Target.parse("cpu", threads)
        self._cache = Path(cache) if cache is not None else cache_dir() / "sessions"
        self._limit = cache_limit()
        self._progress = progress
        g = self._proto.graph
        inits = {i.name for i in g.initializer}
        graph_inputs = [vi for vi in g.input if vi.name not in inits]
        fixed = {**self._settings.shapes, **(input_shapes or {})}
        declared = args(graph_inputs)
        self._inputs = [NodeArg(a.name, list(fixed.get(a.name) or a.shape), a.type)
                        if a.name in self._settings.shapes else a for a in declared]
        self._overridable = args([vi for vi in g.input if vi.name in inits]) \
            if self._proto.ir_version >= 4 else []
        self._dtypes = {vi.name: np_dtype(vi) for vi in graph_inputs}
        self._outputs = args(list(g.output))
        self._output_names = [o.name for o in self._outputs]
        # inputs that are outputs too: the plan computes the rest, the run gives them copied
        self._passed = {vi.name for vi in graph_inputs} & set(self._output_names)
        self._models: dict[tuple, CompiledModel] = {}
        self._lock = threading.Lock()
        self._ort_session: Any = None
        self._adapters: AdapterProbe | None = None
        self._profiler = Profiler(self._settings.profile_prefix) \
            if self._settings.profile_prefix is not None else None
        self.loaded_from_cache = False   # whether the last plan built was a cached one
        # no plan of Woodpecker's takes values that are no tensors: ORT's own session runs them
        self._on_ort = self._settings.on_ort or next(
            (f"{vi.name!r} is a {args([vi])[0].type}" for vi in [*graph_inputs, *g.output]
             if not _tensor(vi)), None) or ("every output is an input" if self._passed ==
                                            set(self._output_names) else None)
        if self._settings.optimized_path or self._on_ort:
            self._ort()      # (ORT writes optimized_model_filepath as it builds)
        self._dynamic = any(not isinstance(d, int) or d <= 0 for a in declared for d in a.shape)
        # the shape each feed must have: a dimension of None takes any size
        self._shapes = {a.name: tuple(fixed[a.name]) if a.name in fixed else
                        tuple(d if isinstance(d, int) and d > 0 else None for d in a.shape)
                        for a in self._inputs}
        self._fixed: CompiledModel | None = None   # the one plan, shapes known up front
        if not self._on_ort and all(d is not None for s in self._shapes.values() for d in s):
            self._fixed = self._model_for(self._shapes)

    def _ort(self) -> Any:
        """ONNX Runtime's own session of the model, with the options given."""
        with self._lock:
            if self._ort_session is None:
                try:
                    self._ort_session = onnxruntime.InferenceSession(
                        self._source, self._options, providers=CPU)
                except Exception as e:
                    raise LoadFailure(f"{self._where}: ONNX Runtime's session of the model: "
                                      f"{first_line(e)}") from None
            return self._ort_session

    # -- ONNX Runtime's API ---------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return list(self._overridable)

    def get_providers(self) -> list[str]:
        return [PROVIDER, "CPUExecutionProvider"]

    def get_provider_options(self) -> dict:
        return {PROVIDER: {}, "CPUExecutionProvider": {}}

    def set_providers(self, providers: "list | None" = None,
                      provider_options: "list | None" = None) -> None:
        """The session stays on the CPU; those it cannot use are named in one warning line, a
        name ORT does not know is ORT's RuntimeError."""
        check_providers(providers, provider_options, unknown_raises=True)

    def get_session_options(self) -> Any:
        if self._options is None:
            self._options = onnxruntime.SessionOptions()
        return self._options

    def get_modelmeta(self) -> ModelMetadata:
        p = self._proto
        return ModelMetadata(p.producer_name, p.graph.name, p.domain, p.doc_string,
                             p.graph.doc_string, p.model_version,
                             {m.key: m.value for m in p.metadata_props})

    def get_input_memory_infos(self) -> list:
        return [cpu_memory_info() for _ in self._inputs]

    def get_output_memory_infos(self) -> list:
        return [cpu_memory_info() for _ in self._outputs]

    def get_input_epdevices(self) -> list:
        return [cpu_ep_device() for _ in self._inputs]

    def get_provider_graph_assignment_info(self) -> list[Subgraph]:
        """Per step of the plan (a node, or a library's region): the engine that runs it as
        `ep_name` ("WoodpeckerExecutionProvider:<engine>"), its nodes; the model's nodes under
        "CPUExecutionProvider" where ORT's own session runs the model, under
        "WoodpeckerExecutionProvider" before a dynamic model's first plan (its engines are
        chosen for the shapes of its first feed). As in ORT, only when the session config
        entry `session.record_ep_graph_assignment_info` is "1" (else ORT's Fail)."""
        so = self._settings.options
        if so is None or config_entry(so.get_session_config_entry, RECORD_ASSIGNMENT) != "1":
            raise NotRecorded(f"Session configuration entry '{RECORD_ASSIGNMENT}' must be set "
                              'to "1" to retrieve EP graph assignment information.')
        model = self._fixed or next(iter(self._models.values()), None)
        if self._on_ort or model is None:
            return [Subgraph("CPUExecutionProvider" if self._on_ort else PROVIDER, tuple(
                Node(n.name, n.op_type, n.domain) for n in self._proto.graph.node))]
        g, engines = model.graph, model.plan.engines
        return [Subgraph(f"{PROVIDER}:{engines[step[0]]}", tuple(
            Node(g.nodes[i].name, g.nodes[i].attrs["op_type"] if g.nodes[i].op ==
                         OPAQUE else g.nodes[i].op) for i in step)) for step in model.steps]

    def end_profiling(self) -> str:
        """The profile's file name (written now; "" when profiling is off)."""
        return self._profiler.end() if self._profiler else ""

    def get_profiling_start_time_ns(self) -> int:
        """When profiling began (ns since the epoch); 0 when it is off, as in ORT."""
        return self._profiler.start_ns if self._profiler else 0

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: Any = None) -> None:
        iobinding._run(run_options)

    def run_with_ort_values(self, output_names: "list[str] | None",
                            input_dict_ort_values: Mapping[str, Any],
                            run_options: Any = None) -> list:
        feeds = {k: v.numpy() if isinstance(v, onnxruntime.OrtValue) else v
                 for k, v in input_dict_ort_values.items()}
        return [onnxruntime.OrtValue.ortvalue_from_numpy(r)
                for r in self.run(output_names, feeds, run_options)]

    def run_async(self, output_names: "list[str] | None", input_feed: Mapping[str, Any],
                  callback: Any, user_data: Any, run_options: Any = None) -> None:
        """Run in a thread; then `callback(outputs, user_data, error)` ("" when none)."""
        def work():
            try:
                results, err = self.run(output_names, input_feed, run_options), ""
            except Exception as e:
                results, err = [], first_line(e)
            callback(results, user_data, err)

        threading.Thread(target=work, daemon=True).start()

    def run(self, output_names: "list[str] | None", input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """The outputs named in `output_names` (None or []: all), computed from `input_feed`
        ({input name: array, nested list or scalar})."""
        check_run_options(run_options)
        known = self._output_names
        wanted = list(output_names) if output_names else known
        for name in wanted:
            if name not in known:
                raise InvalidArgument(f"unknown output {name!r}; the model's outputs are: "
                                      f"{', '.join(known)}")
        if self._on_ort or self._ort_call(input_feed, run_options):
            return self._ort().run(wanted, input_feed, run_options)
        feeds = self._feeds(input_feed)
        model = self._fixed or self._model_for({a.name: feeds[a.name].shape
                                                for a in self._inputs})
        result = model.run(feeds) if self._profiler is None else \
            self._profiler.run(model, feeds, PROVIDER)
        result.update({name: np.array(feeds[name]) for name in self._passed})   # (copies)
        return [result[name] for name in wanted]

    def _ort_call(self, input_feed: Any, run_options: Any) -> bool:
        """Whether this call is ORT's: an overridable initializer fed, or an adapter active."""
        if not self._overridable:
            return False
        if isinstance(input_feed, Mapping) and any(a.name in input_feed
                                                   for a in self._overridable):
            return True
        if run_options is not None and self._adapters is None:
            self._adapters = AdapterProbe(self._proto, self._where)
        return run_options is not None and self._adapters.active(run_options)

    def _feeds(self, input_feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The feeds as arrays of the inputs' types and shapes, or one error line of ORT's
        type for the mistake."""
        if not isinstance(input_feed, Mapping):
            raise InvalidArgument(f"the inputs are a dict {{name: array}}, not a "
                                  f"{type(input_feed).__name__}")
        listing = ", ".join(a.name for a in self._inputs)
        missing = [a.name for a in self._inputs if a.name not in input_feed]
        if missing:
            raise MissingInput(f"Required inputs ({missing}) are missing from input feed "
                               f"({list(input_feed)}).")
        for name in (n for n in input_feed if n not in self._shapes):
            raise InvalidArgument(f"unknown input {name!r}; the model's inputs are: {listing}")
        feeds = {}
        for a in self._inputs:
            v, dtype, shape = input_feed[a.name], self._dtypes[a.name], self._shapes[a.name]
            if isinstance(v, np.ndarray):
                if v.dtype.kind in "USV" and dtype == np.dtype(object):
                    v = string_array(v)         # str, bytes or void arrays, as ORT takes them
                if dtype is not None and v.dtype != dtype:
                    raise InvalidArgument(f"input {a.name!r} has dtype {v.dtype}, expected "
                                          f"{dtype}")
            else:
                try:
                    v = np.asarray(v, dtype=dtype)
                except (TypeError, ValueError, OverflowError) as e:
                    raise InvalidFeed(f"input {a.name!r}: no {dtype} array can be made of the "
                                      f"{type(v).__name__} given ({first_line(e)})") from None
            if len(v.shape) != len(shape) or any(d is not None and d != n
                                                 for d, n in zip(shape, v.shape)):
                want = [d if d is not None else s for d, s in zip(shape, a.shape)]
                raise InvalidArgument(f"input {a.name!r} has shape {_fmt(v.shape)}, expected "
                                      f"{_fmt(want)}")
            feeds[a.name] = v
        return feeds

    # -- plans ------------------------------------------------------------------------------
    def _model_for(self, shapes: dict[str, tuple]) -> CompiledModel:
        key = tuple(sorted(shapes.items()))
        model = self._models.get(key)
        if model is not None:
            return model
        with self._lock:
            if key not in self._models:
                self._models[key] = self._plan(dict(key))
            return self._models[key]

    def key_document(self, shapes: dict[str, tuple]) -> dict[str, Any]:
        """What a plan for `shapes` is built from: the cache key is its sha256, and the plan's
        folder records it (source.json)."""
        return {"model": self._sha, "external_data": dict(self._external),
                "shapes": {k: list(v) for k, v in shapes.items()},
                "options": self._compile_options.to_json(), "target": self._target.record_key,
                "versions": _versions(),
                **({"initializers": dict(self._overrides)} if self._overrides else {})}

    def _plan(self, shapes: dict[str, tuple]) -> CompiledModel:
        doc = self.key_document(shapes)
        folder = self._cache / entry_key(doc)
        if (folder / "plan.json").exists():
            why = source_differs(folder, doc)
            if why is None:
                try:
                    model = load(folder)
                    touch(folder)
                    self.loaded_from_cache = True
                    return model
                except PlanError as e:
                    why = f"it does not load ({e})"
            print(f"woodpecker: compiling again: the cached plan {folder}: {why}",
                  file=self._progress or sys.stderr)
        proto = without(inlined(self._proto, self._base, self._external, self._where),
                         self._passed)
        model = wp_compile(proto, self._compile_options, target=self._target,
                           input_shapes=shapes if self._dynamic else None,
                           progress=self._progress)
        save_entry(folder, doc, lambda d: model.save(d, force=True), self._limit)
        self.loaded_from_cache = False
        return model
