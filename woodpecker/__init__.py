"""Woodpecker: a hardware-aware optimizing compiler and runtime for DL inference.

    import woodpecker
    model = woodpecker.compile("resnet18.onnx")       # → CompiledModel
    outputs = model.run({"input": x})
    model.save("resnet18.wpk"); model = woodpecker.load("resnet18.wpk")
    sess = woodpecker.InferenceSession("resnet18.onnx")   # ONNX Runtime's API; plan cached
    woodpecker.quantize("resnet18.onnx", "resnet18_int8.onnx", calibrate="images.npy")

The names below are imported on first use, so `woodpecker.load` of a saved plan pulls in the
runtime and the engines the plan uses, never the compiler, the tuner or onnx (ARCHITECTURE.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from woodpecker.errors import WoodpeckerError
from woodpecker.version import __version__

if TYPE_CHECKING:
    from woodpecker.compiler import compile
    from woodpecker.options import CompileOptions, QuantizeOptions, TuneOptions
    from woodpecker.quantization import quantize
    from woodpecker.runtime.compiled import CompiledModel, load
    from woodpecker.session import InferenceSession
    from woodpecker.target import Target

_LAZY = {"compile": "woodpecker.compiler", "load": "woodpecker.runtime.compiled",
         "CompiledModel": "woodpecker.runtime.compiled", "Target": "woodpecker.target",
         "CompileOptions": "woodpecker.options", "TuneOptions": "woodpecker.options",
         "InferenceSession": "woodpecker.session", "quantize": "woodpecker.quantization",
         "QuantizeOptions": "woodpecker.options"}

__all__ = ["compile", "load", "CompiledModel", "CompileOptions", "TuneOptions", "Target",
           "InferenceSession", "quantize", "QuantizeOptions", "WoodpeckerError", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'woodpecker' has no attribute {name!r}")
