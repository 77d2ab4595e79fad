"""Woodpecker: a hardware-aware optimizing compiler and runtime for DL inference.

    import woodpecker
    model = woodpecker.compile("resnet18.onnx")       # → CompiledModel
    outputs = model.run({"input": x})
    model.save("resnet18.wpk"); model = woodpecker.load("resnet18.wpk")
"""

from woodpecker.compiler import compile
from woodpecker.errors import WoodpeckerError
from woodpecker.runtime.compiled import CompiledModel, load
from woodpecker.target import Target
from woodpecker.version import __version__

__all__ = ["compile", "load", "CompiledModel", "Target", "WoodpeckerError", "__version__"]
