"""Engine registry: which engines exist, which are installed, and the fixed per-op preference
used until tuning-based selection (WPK §2.5) replaces it."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from woodpecker.engines.base import BuildContext, Engine
from woodpecker.errors import EngineError
from woodpecker.ir.graph import Node

ENGINE_NAMES = ("torch", "onnxruntime", "numpy", "halide")
# Data-movement ops cost nothing in numpy (views); compute ops go to the fastest library first.
MOVEMENT = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Gather",
             "Concat", "Split", "Shape", "Identity", "Dropout", "Constant", "ConstantOfShape",
             "Cast", "Expand", "Where", "Equal", "Pad"}


@cache
def get_engine(name: str) -> Engine:
    if name == "numpy":
        from woodpecker.engines.numpy_ref import NumpyEngine
        engine: Engine = NumpyEngine()
    elif name == "torch":
        from woodpecker.engines.torch_engine import TorchEngine
        engine = TorchEngine()
    elif name == "onnxruntime":
        from woodpecker.engines.ort_engine import OrtEngine
        engine = OrtEngine()
    elif name == "halide":
        from woodpecker.engines.halide.engine import HalideEngine
        engine = HalideEngine()
    else:
        raise EngineError(f"unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}")
    if not engine.available():
        raise EngineError(f"engine {name!r} is not installed")
    return engine


def parse_engines(spec: "str | Iterable[str] | None") -> list[str]:
    """Engine names from `torch,numpy` (None = every installed engine)."""
    if spec is None:
        names = []
        for n in ENGINE_NAMES:
            try:
                get_engine(n)
                names.append(n)
            except EngineError:
                pass
        return names
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if not names:
        raise EngineError("no engine given")
    for n in names:
        get_engine(n)
    return names


def preference(node: Node) -> tuple[str, ...]:
    """Compute ops go to ONNX Runtime first: measured on the 2-core AVX-512 machine, its MLAS
    kernels beat torch/oneDNN per node at batch 1 (ResNet-18 31 ms vs 46 ms end to end), and
    keeping compute in one library avoids one library's idle threads spinning while the other
    works. torch is the fallback for what ORT declines. Halide kernels are not in the order:
    only measured selection (selection/per_node.py) puts a node on them."""
    if node.op in MOVEMENT:
        return ("numpy", "torch", "onnxruntime")
    return ("onnxruntime", "torch", "numpy")


def choose(node: Node, allowed: list[str], ctx: BuildContext) -> str:
    """The first engine in the op's preference that is allowed and declares the node."""
    for name in preference(node):
        if name in allowed and get_engine(name).supports(node, ctx):
            return name
    raise EngineError(f"no engine among {','.join(allowed)} can run {node.op} node "
                      f"{node.name!r}; allow more engines (e.g. --engines {','.join(allowed)},"
                      "numpy)")
