"""`woodpecker.InferenceSession`: a drop-in for `onnxruntime.InferenceSession`, so switching an
ONNX Runtime program to Woodpecker is one line.

    sess = woodpecker.InferenceSession("model.onnx")     # was: onnxruntime.InferenceSession(…)
    outputs = sess.run(None, {"input": x})               # a list, in the model's output order
    [i.name for i in sess.get_inputs()]; sess.get_outputs()

Contract: `run(output_names, input_feed, run_options=None)` returns the outputs named (all, in
the model's order, for None or []) as numpy arrays; a feed that is not an array (a nested list,
a scalar) is made one of the input's declared element type, an array of another dtype is
refused. `get_inputs()`/`get_outputs()` give ORT's NodeArg fields (`name`, `shape` — a
symbolic dimension as its name —, `type` as "tensor(float)"); `get_providers()`,
`get_modelmeta()`, `get_session_options()` answer as ORT's do; `sess_options.
intra_op_num_threads` (when > 0) sets the threads. `providers` (names or (name, options) pairs,
`provider_options`) it cannot use (CUDA, Azure, a misspelt name) are skipped with one warning
line, as ORT skips them, and the session runs on the CPU. A path's external data is read from
beside the model file (bytes': from the working directory), never from outside that folder.
Each error raised here is both a Woodpecker error (`ModelError`, `InputError` …) and the
exception ORT raises for that mistake (`onnxruntime.capi.onnxruntime_pybind11_state`:
NoSuchFile: no model file; InvalidProtobuf: no ONNX model; Fail: external data missing or
short; InvalidArgument: an unknown input or output name, a wrong dtype or shape; a missing
input is a ValueError, as in ORT), in one line.

The first session for a model compiles it (the default pipeline: graph passes, ONNX Runtime
regions, and the generated kernels a tuning log already holds for its tasks — the shared log in
the Woodpecker cache unless `tuning_log=` names one; `tune="3m"` tunes once for that long) and
saves the plan in the cache (cache.py: an entry per key document, recorded beside plan.json as
source.json) under everything that defines its result: the sha256 of the model's bytes and of
each external data file it names, the input shapes, the options, the target, and the versions
of Woodpecker, onnx and each engine's library. Later sessions for the same key load that plan;
one whose record differs, or that no longer loads (a damaged folder), is compiled again. A
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
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data
from onnxruntime.capi import onnxruntime_pybind11_state as _ort

from woodpecker.cache import cache_dir, entry_key, save_entry, source_differs, touch
from woodpecker.compiler import compile as wp_compile
from woodpecker.engines import names
from woodpecker.errors import InputError, ModelError, PlanError, WoodpeckerError, first_line
from woodpecker.files import sha256_file
from woodpecker.options import CompileOptions
from woodpecker.runtime.compiled import CompiledModel, load
from woodpecker.schedule.memory import parse_bytes
from woodpecker.target import Target
from woodpecker.version import __version__

PROVIDER = "WoodpeckerExecutionProvider"
_CPU = {"CPUExecutionProvider", PROVIDER}

# The most bytes the sessions' plan folders may hold together before the least recently used
# are removed: room for a few dozen mid-sized models' plans (a ResNet-50 plan holds its 100 MB
# of weights at least), never unbounded. Env WOODPECKER_SESSION_CACHE_BYTES overrides it.
SESSION_CACHE_BYTES = 4 << 30


# -- errors: Woodpecker's and ONNX Runtime's types at once ---------------------------------
class NoSuchFile(ModelError, _ort.NoSuchFile):
    """The model file does not exist (ORT: NoSuchFile)."""


class InvalidProtobuf(ModelError, _ort.InvalidProtobuf):
    """The file or bytes are no ONNX model: garbage, truncated, a folder (ORT: InvalidProtobuf)."""


class InvalidModel(ModelError, _ort.InvalidArgument):
    """The bytes parse but hold no graph (ORT: InvalidArgument)."""


class LoadFailure(ModelError, _ort.Fail):
    """The model file cannot be read, or an external data file is missing, too short or
    outside the model's folder (ORT: Fail)."""


class InvalidArgument(InputError, _ort.InvalidArgument):
    """An unknown input or output name, a feed of the wrong dtype or shape (ORT:
    InvalidArgument)."""


class MissingInput(InputError, ValueError):
    """A model input not in the feed (ORT: ValueError)."""


class InvalidFeed(InputError, RuntimeError):
    """A feed no array of the input's type can be made of (ORT: RuntimeError)."""


@dataclass(frozen=True)
class NodeArg:
    """An input or output as ONNX Runtime describes it."""

    name: str
    shape: list[int | str | None]
    type: str


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]


def _args(values: list[onnx.ValueInfoProto]) -> list[NodeArg]:
    out = []
    for vi in values:
        t = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in t.shape.dim]
        kind = onnx.TensorProto.DataType.Name(t.elem_type).lower()
        out.append(NodeArg(vi.name, shape, f"tensor({kind})"))
    return out


def _np_dtype(vi: onnx.ValueInfoProto) -> "np.dtype | None":
    """The numpy dtype of an input's declared element type (None: none numpy has)."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    except (KeyError, TypeError, ValueError):
        return None


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


# -- reading the model as ONNX Runtime does --------------------------------------------------
def _read(path_or_bytes: "str | os.PathLike | bytes") -> tuple[bytes, Path, str]:
    """The model's bytes, the folder its external data lies in, and how to name it."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes), Path.cwd(), "the model bytes"
    path = Path(path_or_bytes)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NoSuchFile(f"model file not found: {path}") from None
    except IsADirectoryError:
        raise InvalidProtobuf(f"{path} is a folder, not an ONNX model file") from None
    except OSError as e:
        raise LoadFailure(f"cannot read the model file {path}: {e.strerror}") from None
    return data, path.absolute().parent, str(path)


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    try:
        proto = onnx.load_from_string(data)
    except Exception as e:   # protobuf raises DecodeError, and other types for some garbage
        raise InvalidProtobuf(f"{where} is not an ONNX model: protobuf parsing failed "
                              f"({first_line(e)})") from None
    if not proto.HasField("graph"):
        raise InvalidModel(f"{where} holds no graph (is it an ONNX model?)")
    return proto


def _external_tensors(proto: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [t for t in _get_all_tensors(proto) if uses_external_data(t)]


def _external_file(base: Path, info: ExternalDataInfo, tensor: str, where: str) -> Path:
    """Where a tensor's external data lies: a relative name inside `base`, links resolved."""
    path = base / (info.location or "\0")
    if not info.location or "\0" in info.location or Path(info.location).is_absolute() or \
            not path.resolve().is_relative_to(base.resolve()):
        raise LoadFailure(f"{where}: the external data of {tensor!r} is named "
                          f"{info.location!r}, not a file inside the model's folder {base}")
    if not path.is_file():
        raise LoadFailure(f"{where}: the external data file {info.location!r} of "
                          f"{tensor!r} does not exist in {base}")
    return path


def _external_digests(proto: onnx.ModelProto, base: Path, where: str) -> dict[str, str]:
    """{location: sha256} of every external data file the model names, each checked to hold
    the bytes its tensors claim."""
    sizes: dict[str, int] = {}
    for t in _external_tensors(proto):
        info = ExternalDataInfo(t)
        path = _external_file(base, info, t.name, where)
        size = sizes.setdefault(info.location, path.stat().st_size)
        end = (info.offset or 0) + (info.length or 0)
        if end > size:
            raise LoadFailure(f"{where}: the external data of {t.name!r} ends at byte "
                              f"{end} of {info.location!r}, which holds {size}")
    return {loc: sha256_file(base / loc) for loc in sorted(sizes)}


def _inlined(proto: onnx.ModelProto, base: Path, digests: dict[str, str],
             where: str) -> onnx.ModelProto:
    """A copy of `proto` with its external data read in from the very bytes whose sha256 the
    session's key holds (a file rewritten since is one error line, never a plan saved under
    the old key)."""
    if not digests:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    blobs: dict[str, bytes] = {}
    for t in _external_tensors(out):
        info = ExternalDataInfo(t)
        if info.location not in blobs:
            blob = _external_file(base, info, t.name, where).read_bytes()
            if hashlib.sha256(blob).hexdigest() != digests.get(info.location):
                raise LoadFailure(f"{where}: the external data file {info.location!r} "
                                  "changed after the session read it; open it again")
            blobs[info.location] = blob
        start = info.offset or 0     # (in the file: its size was checked, its digest is)
        t.raw_data = blobs[info.location][start:start + info.length if info.length else None]
        t.data_location = onnx.TensorProto.DEFAULT
        del t.external_data[:]
    return out


def _providers(providers: "list | None", provider_options: "list | None") -> None:
    """ORT's treatment of `providers` it cannot use: never an error, one warning line for
    those skipped (not CPU ones: CUDA, Azure, a misspelt name) and for any not in ORT's form
    (a name or a (name, options dict) pair; `provider_options` as long as `providers`)."""
    providers = [providers] if isinstance(providers, str) else list(providers or [])
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
        _providers(providers, provider_options)
        data, self._base, self._where = _read(path_or_bytes)
        self._proto = _parse(data, self._where)    # external data not read in (see _plan)
        self._sha = hashlib.sha256(data).hexdigest()
        self._external = _external_digests(self._proto, self._base, self._where)
        self._options = sess_options
        threads = threads or getattr(sess_options, "intra_op_num_threads", 0) or None
        log = tuning_log if tuning_log is not None else cache_dir() / "tuning.jsonl"
        self._compile_options = CompileOptions(
            engines=engines, threads=threads, tune=tune,
            tuning_log=os.fspath(log) if tune or Path(log).exists() else None, resume=True)
        self._target = Target.parse("cpu", threads)
        self._cache = Path(cache) if cache is not None else cache_dir() / "sessions"
        self._limit = cache_limit()
        self._progress = progress
        inits = {i.name for i in self._proto.graph.initializer}
        graph_inputs = [vi for vi in self._proto.graph.input if vi.name not in inits]
        self._inputs = _args(graph_inputs)
        self._dtypes = {vi.name: _np_dtype(vi) for vi in graph_inputs}
        self._outputs = _args(list(self._proto.graph.output))
        self._output_names = [o.name for o in self._outputs]
        self._models: dict[tuple, CompiledModel] = {}
        self._lock = threading.Lock()
        self.loaded_from_cache = False   # whether the last plan built was a cached one
        self._dynamic = any(not isinstance(d, int) or d <= 0
                            for a in self._inputs for d in a.shape)
        # the shape each feed must have: a dimension of None takes any size
        self._shapes = {a.name: tuple(input_shapes[a.name]) if input_shapes and
                        a.name in input_shapes else
                        tuple(d if isinstance(d, int) and d > 0 else None for d in a.shape)
                        for a in self._inputs}
        self._fixed: CompiledModel | None = None   # the one plan, shapes known up front
        if all(d is not None for shape in self._shapes.values() for d in shape):
            self._fixed = self._model_for(self._shapes)

    # -- ONNX Runtime's API ---------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return []

    def get_providers(self) -> list[str]:
        return [PROVIDER]

    def get_provider_options(self) -> dict:
        return {PROVIDER: {}}

    def get_session_options(self) -> Any:
        return self._options

    def get_modelmeta(self) -> ModelMetadata:
        p = self._proto
        return ModelMetadata(p.producer_name, p.graph.name, p.domain, p.doc_string,
                             p.graph.doc_string, p.model_version,
                             {m.key: m.value for m in p.metadata_props})

    def run(self, output_names: "list[str] | None", input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """The outputs named in `output_names` (None or []: all), computed from `input_feed`
        ({input name: array, nested list or scalar})."""
        known = self._output_names
        wanted = list(output_names) if output_names else known
        for name in wanted:
            if name not in known:
                raise InvalidArgument(f"unknown output {name!r}; the model's outputs are: "
                                      f"{', '.join(known)}")
        feeds = self._feeds(input_feed)
        model = self._fixed or self._model_for({a.name: feeds[a.name].shape
                                                for a in self._inputs})
        result = model.run(feeds)      # (checked above: no InputError of another type)
        return [result[name] for name in wanted]

    def _feeds(self, input_feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The feeds as arrays of the inputs' types and shapes, or one error line of ORT's
        type for the mistake."""
        if not isinstance(input_feed, Mapping):
            raise InvalidArgument(f"the inputs are a dict {{name: array}}, not a "
                                  f"{type(input_feed).__name__}")
        listing = ", ".join(a.name for a in self._inputs)
        for name in (a.name for a in self._inputs if a.name not in input_feed):
            raise MissingInput(f"missing input {name!r}; the model's inputs are: {listing}")
        for name in (n for n in input_feed if n not in self._shapes):
            raise InvalidArgument(f"unknown input {name!r}; the model's inputs are: {listing}")
        feeds = {}
        for a in self._inputs:
            v, dtype, shape = input_feed[a.name], self._dtypes[a.name], self._shapes[a.name]
            if isinstance(v, np.ndarray):
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
                "versions": _versions()}

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
        proto = _inlined(self._proto, self._base, self._external, self._where)
        model = wp_compile(proto, self._compile_options, target=self._target,
                           input_shapes=shapes if self._dynamic else None,
                           progress=self._progress)
        save_entry(folder, doc, lambda d: model.save(d, force=True), self._limit)
        self.loaded_from_cache = False
        return model
