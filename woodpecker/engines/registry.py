"""Engine registry: which engines exist, which are installed, and the fixed per-op preference
used until measured selection (WPK §2.5, selection/) replaces it.

Adding an engine: a module in engines/ with its `Engine` subclass (declaring `rank`), its name
in engines/names.py, and one line in `REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from woodpecker.engines import names
from woodpecker.engines.base import BuildContext, Engine
from woodpecker.errors import EngineError
from woodpecker.ir.graph import Node
from woodpecker.lazy import Lazy
from woodpecker.ops.opaque import OP as OPAQUE

# name -> the engine's class, imported when first asked for
REGISTRY: dict[str, Lazy] = {
    names.TORCH: Lazy("woodpecker.engines.torch_engine", "TorchEngine"),
    names.ONNXRUNTIME: Lazy("woodpecker.engines.ort_engine", "OrtEngine"),
    names.NUMPY: Lazy("woodpecker.engines.numpy_ref", "NumpyEngine"),
    names.HALIDE: Lazy("woodpecker.engines.halide.engine", "HalideEngine"),
    names.OPENVINO: Lazy("woodpecker.engines.openvino_engine", "OpenVinoEngine"),
}
ENGINE_NAMES = tuple(REGISTRY)
# Data-movement ops cost nothing in numpy (views); compute ops go to the fastest library first.
MOVEMENT = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Gather",
            "Concat", "Split", "Shape", "Identity", "Dropout", "Constant", "ConstantOfShape",
            "Cast", "Expand", "Where", "Equal", "Pad", "StridedView"}


def engine_class(name: str) -> type[Engine]:
    if name not in REGISTRY:
        raise EngineError(f"unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}")
    return REGISTRY[name].load()


@cache
def get_engine(name: str) -> Engine:
    engine = engine_class(name)()
    if not engine.available():
        raise EngineError(f"engine {name!r} is not installed")
    return engine


def parse_engines(spec: "str | Iterable[str] | None") -> list[str]:
    """Engine names from `torch,numpy` (None = every installed engine)."""
    if spec is None:
        found = []
        for n in ENGINE_NAMES:
            try:
                get_engine(n)
                found.append(n)
            except EngineError:
                pass
        return found
    given = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec)
             if s.strip()]
    if not given:
        raise EngineError("no engine given")
    for n in given:
        get_engine(n)
    return given


def preference(node: Node) -> tuple[str, ...]:
    """The engines that may run `node` before any measurement, best first: each engine's
    declared `rank` (Engine.rank: data movement, compute; None: never by default). Compute ops
    go to ONNX Runtime first: measured on the 2-core AVX-512 machine, its MLAS kernels beat
    torch/oneDNN per node at batch 1 (ResNet-18 31 ms vs 46 ms end to end), and keeping compute
    in one library avoids one library's idle threads spinning while the other works. torch is
    the fallback for what ORT declines. Halide kernels rank nowhere: only measured selection
    (selection/per_node.py) puts a node on them."""
    k = 0 if node.op in MOVEMENT else 1
    ranked = [(engine_class(n).rank[k], n) for n in ENGINE_NAMES
              if engine_class(n).rank[k] is not None]
    return tuple(n for _, n in sorted(ranked))


def choose(node: Node, allowed: list[str], ctx: BuildContext) -> str:
    """The first engine in the op's preference that is allowed and declares the node."""
    for name in preference(node):
        if name in allowed and get_engine(name).supports(node, ctx):
            return name
    op = node.attrs.get("op_type", node.op) if node.op == OPAQUE else node.op
    if node.op == OPAQUE:     # no Woodpecker definition: only a library can run it
        why = "; ".join(f"{n}: {get_engine(n).refusal(node, ctx)}" for n in allowed
                        if get_engine(n).caps.multi_node)
        why = why or "no library engine allowed"
        raise EngineError(f"no engine runs {op} node {node.name!r} ({why})")
    raise EngineError(f"no engine among {','.join(allowed)} can run {op} node "
                      f"{node.name!r}; allow more engines (e.g. --engines {','.join(allowed)},"
                      "numpy)")
