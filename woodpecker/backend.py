"""Woodpecker as an `onnx.backend` Backend, so the ONNX backend test suite can run through the
whole pipeline (import → passes → engine selection → executor).

A model whose shapes depend on the values of integer, scalar or short vector inputs (a Reshape
target, Range's bounds or Resize's scales fed as graph inputs) cannot be compiled ahead of
time; the backend then compiles on first run, binding those inputs' values (`input_values`),
and keeps one compiled model per distinct set of values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from woodpecker.compiler import compile as wp_compile
from woodpecker.errors import DynamicShapeError
from woodpecker.frontend.onnx_import import load_model_proto


class WoodpeckerRep(BackendRep):
    def __init__(self, proto: onnx.ModelProto, engines: str | None) -> None:
        self.proto, self.engines = proto, engines
        inits = {i.name for i in proto.graph.initializer}
        self.input_names = [vi.name for vi in proto.graph.input if vi.name not in inits]
        self.output_names = [vi.name for vi in proto.graph.output]
        self._specialised: dict[bytes, Any] = {}
        try:
            self.model = wp_compile(proto, engines=engines, threads=2)
        except DynamicShapeError:
            self.model = None

    def _model_for(self, feeds: dict[str, np.ndarray]):
        if self.model is not None:
            return self.model, feeds
        # integer inputs (a Reshape's target), scalars (Range's start, limit and delta) and
        # short vectors (Resize's scales)
        bound = {k: v for k, v in feeds.items()
                 if np.issubdtype(np.asarray(v).dtype, np.integer) or np.ndim(v) == 0
                 or (np.ndim(v) == 1 and np.size(v) <= 8)}
        key = b"".join(k.encode() + np.asarray(v).tobytes() for k, v in bound.items())
        if key not in self._specialised:
            self._specialised[key] = wp_compile(self.proto, engines=self.engines, threads=2,
                                                input_values=bound)
        return self._specialised[key], {k: v for k, v in feeds.items() if k not in bound}

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            arrays = inputs if isinstance(inputs, (list, tuple)) else [inputs]
            feeds = dict(zip(self.input_names, arrays))
        model, feeds = self._model_for(feeds)
        out = model.run(feeds)
        return tuple(out[name] for name in self.output_names)


class WoodpeckerBackend(Backend):
    engines: str | None = None

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return device == "CPU"

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> WoodpeckerRep:
        super().prepare(model, device, **kwargs)
        return WoodpeckerRep(load_model_proto(model), cls.engines)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"
