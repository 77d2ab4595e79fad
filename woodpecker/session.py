"""`woodpecker.InferenceSession`: a drop-in for `onnxruntime.InferenceSession`, so switching an
ONNX Runtime program to Woodpecker is one line.

    sess = woodpecker.InferenceSession("model.onnx")     # was: onnxruntime.InferenceSession(…)
    outputs = sess.run(None, {"input": x})               # a list, in the model's output order
    [i.name for i in sess.get_inputs()]; sess.get_outputs()

Contract: `run(output_names, input_feed, run_options=None)` returns the outputs named (all, in
the model's order, for None) as numpy arrays; `get_inputs()`/`get_outputs()` give objects with
ORT's NodeArg fields (`name`, `shape` — a symbolic dimension as its name —, `type` as
"tensor(float)"); `get_providers()`, `get_modelmeta()` and `get_session_options()` answer
as ORT's do. `sess_options.intra_op_num_threads` (when > 0) sets the threads; `providers` must
be CPU ones (Woodpecker runs on the CPU) and are otherwise ignored.

The first session for a model compiles it (the default pipeline: graph passes, ONNX Runtime
regions, and the generated kernels a tuning log already holds for its tasks — the shared log in
the Woodpecker cache unless `tuning_log=` names one; `tune="3m"` tunes once for that long) and
saves the plan in the cache under a key of the model's sha256, the input shapes, the options,
the target and Woodpecker's version; every later session for the same key loads that plan (no
compile), and one that no longer loads (another Woodpecker, a damaged folder) is compiled again.
A model with dynamic dimensions is compiled for the shapes of the first feed that has them
(`input_shapes=` fixes them up front), one plan per set of shapes, as ONNX Runtime serves any.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from woodpecker.cache import cache_dir
from woodpecker.compiler import compile as wp_compile
from woodpecker.errors import InputError, PlanError, WoodpeckerError
from woodpecker.options import CompileOptions, TuneOptions
from woodpecker.runtime.compiled import CompiledModel, load
from woodpecker.target import Target
from woodpecker.version import __version__

PROVIDER = "WoodpeckerExecutionProvider"
_CPU = {"CPUExecutionProvider", PROVIDER}


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


def _args(values: list[onnx.ValueInfoProto], skip: set[str] = frozenset()) -> list[NodeArg]:
    out = []
    for vi in values:
        if vi.name in skip:
            continue
        t = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in t.shape.dim]
        kind = onnx.TensorProto.DataType.Name(t.elem_type).lower()
        out.append(NodeArg(vi.name, shape, f"tensor({kind})"))
    return out


class InferenceSession:
    """See the module's docstring. Woodpecker's own keywords: `tune` (a budget such as "3m":
    tune the model's kernels once, before its first plan is saved), `tuning_log`, `engines`,
    `threads` (instead of `sess_options.intra_op_num_threads`),
    `input_shapes` ({input: shape} for dynamic dimensions), `cache` (the folder for plans;
    default: `<Woodpecker cache>/sessions`), `progress` (where compile progress goes)."""

    def __init__(self, path_or_bytes: "str | os.PathLike | bytes", sess_options: Any = None,
                 providers: "list | None" = None, provider_options: "list | None" = None, *,
                 tune: str | None = None, tuning_log: "str | os.PathLike | None" = None,
                 engines: str | None = None, threads: int | None = None,
                 input_shapes: "dict[str, tuple[int, ...]] | None" = None,
                 cache: "str | os.PathLike | None" = None, progress: Any = None) -> None:
        names = [p[0] if isinstance(p, tuple) else p for p in providers or []]
        foreign = [p for p in names if p not in _CPU]
        if foreign:
            raise WoodpeckerError(f"Woodpecker runs on the CPU; it cannot use {foreign[0]}")
        data = path_or_bytes if isinstance(path_or_bytes, bytes) else \
            Path(path_or_bytes).read_bytes()
        self._proto = onnx.load_from_string(data)
        self._sha = hashlib.sha256(data).hexdigest()
        self._options = sess_options
        threads = threads or getattr(sess_options, "intra_op_num_threads", 0) or None
        log = tuning_log if tuning_log is not None else cache_dir() / "tuning.jsonl"
        self._compile_options = CompileOptions(
            engines=engines, threads=threads,
            tune=TuneOptions(budget=tune) if tune else None,
            tuning_log=os.fspath(log) if tune or Path(log).exists() else None, resume=True)
        self._target = Target.parse("cpu", threads)
        self._cache = Path(cache) if cache is not None else cache_dir() / "sessions"
        self._progress = progress
        inits = {i.name for i in self._proto.graph.initializer}
        self._inputs = _args(list(self._proto.graph.input), inits)
        self._outputs = _args(list(self._proto.graph.output))
        self._models: dict[tuple, CompiledModel] = {}
        self._lock = threading.Lock()
        self.loaded_from_cache = False   # whether the last plan built was a cached one
        self._dynamic = any(not isinstance(d, int) or d <= 0
                            for a in self._inputs for d in a.shape)
        self._fixed: CompiledModel | None = None   # the one plan, shapes known up front
        if input_shapes or not self._dynamic:
            shapes = {a.name: tuple(input_shapes[a.name]) if input_shapes and
                      a.name in input_shapes else tuple(a.shape) for a in self._inputs}
            self._fixed = self._model_for(shapes)

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

    def run(self, output_names: "list[str] | None", input_feed: dict[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """The outputs named in `output_names` (None: all), computed from `input_feed`."""
        feeds = {k: np.asarray(v) for k, v in input_feed.items()}
        missing = [a.name for a in self._inputs if a.name not in feeds]
        if missing:
            raise InputError(f"missing input {missing[0]!r}; the model's inputs are: "
                             f"{', '.join(a.name for a in self._inputs)}")
        model = self._fixed or self._model_for({a.name: feeds[a.name].shape
                                                for a in self._inputs})
        known = [a.name for a in self._outputs]
        wanted = known if output_names is None else list(output_names)
        for name in wanted:
            if name not in known:
                raise InputError(f"unknown output {name!r}; the model's outputs are: "
                                 f"{', '.join(known)}")
        result = model.run(feeds)
        return [result[name] for name in wanted]

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

    def _plan(self, shapes: dict[str, tuple]) -> CompiledModel:
        doc = {"model": self._sha, "shapes": {k: list(v) for k, v in shapes.items()},
               "options": self._compile_options.to_json(), "target": self._target.record_key,
               "woodpecker": __version__}
        key = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]
        folder = self._cache / key
        if (folder / "plan.json").exists():
            try:
                model = load(folder)
                self.loaded_from_cache = True
                return model
            except PlanError as e:
                print(f"woodpecker: compiling again: the cached plan {folder} does not load "
                      f"({e})", file=self._progress or sys.stderr)
        model = wp_compile(self._proto, self._compile_options, target=self._target,
                           input_shapes=shapes if self._dynamic else None,
                           progress=self._progress)
        model.save(folder, force=True)
        self.loaded_from_cache = False
        return model
