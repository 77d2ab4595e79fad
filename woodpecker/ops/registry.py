"""Every op is defined once: shape rule, numpy reference, cost figures, variant check.

Engines implement ops; they never redefine what an op computes. The numpy reference is the
ground truth that the numpy engine runs and that tuned kernels are checked against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from woodpecker.errors import DynamicShapeError, ModelError
from woodpecker.ir.graph import Node, Value

# A shape rule reads the node (attributes, input Values) and a `data_of(value)` lookup that
# returns a value's data when it is known at compile time (constants and shape subgraphs).
DataOf = Callable[[Value], "np.ndarray | None"]
Infer = Callable[[Node, DataOf], "list[tuple[tuple[int, ...], np.dtype]]"]
Reference = Callable[..., Any]


@dataclass(frozen=True)
class OpDef:
    name: str
    infer: Infer
    reference: Reference
    flops: Callable[[Node], int]
    check: Callable[[Node], "str | None"]


OPS: dict[str, OpDef] = {}
# Composite ops: one node standing for several ops' work (a fused kernel's unit), each with
# the nodes it stands for, which library engines, the ONNX export and operator weights use.
PARTS: dict[str, Callable[[Node], "list[Node] | tuple[Node, ...]"]] = {}


def _no_flops(node: Node) -> int:
    return 0


def _always_ok(node: Node) -> None:
    return None


def op(name: str, infer: Infer, flops: Callable[[Node], int] = _no_flops,
       check: Callable[[Node], "str | None"] = _always_ok) -> Callable[[Reference], Reference]:
    """Register `reference` (called as `reference(attrs, *inputs)`) as the op `name`."""

    def register(reference: Reference) -> Reference:
        if name in OPS:
            raise RuntimeError(f"op {name} defined twice")
        OPS[name] = OpDef(name, infer, reference, flops, check)
        return reference

    return register


def composite(name: str, parts: Callable[[Node], "list[Node] | tuple[Node, ...]"]) -> None:
    """Register op `name` as standing for the nodes `parts(node)` returns."""
    PARTS[name] = parts


def run_reference(node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    """Evaluate `node` with its numpy reference; always returns one array per node output."""
    out = OPS[node.op].reference(node.attrs, *inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [np.asarray(o) for o in outs[: len(node.outputs)]]


def static_inputs(node: Node, data_of: DataOf) -> list | None:
    """The inputs to evaluate `node` at compile time, or None when one is only known at run
    time. `Shape` needs only its input's static shape, so it gets a zero-stride stand-in."""
    if node.op == "Shape":
        return [np.broadcast_to(np.uint8(0), node.inputs[0].shape)]
    ins = [None if v is None else data_of(v) for v in node.inputs]
    if any(v is not None and d is None for v, d in zip(node.inputs, ins)):
        return None
    return ins


# -- helpers shared by shape rules -----------------------------------------------------------------
def where(node: Node) -> str:
    return f"{node.op} node {node.name!r}"


def shape_of(node: Node, i: int) -> tuple[int, ...]:
    v = node.input(i)
    if v is None or v.shape is None:
        raise ModelError(f"{where(node)}: input {i} has no known shape")
    return v.shape


def dtype_of(node: Node, i: int) -> np.dtype:
    v = node.input(i)
    if v is None or v.dtype is None:
        raise ModelError(f"{where(node)}: input {i} has no known type")
    return v.dtype


def required_data(node: Node, i: int, data_of: DataOf, what: str) -> np.ndarray:
    """Data of input `i`, a vector (shape, axes, pads, …: ONNX Runtime refuses any other
    rank), which must be known at compile time (static shapes)."""
    v = node.input(i)
    d = data_of(v) if v is not None else None
    if d is None:
        raise DynamicShapeError(f"{where(node)}: {what} (input {i}) is computed at run time; "
                                "Woodpecker needs it static (give static input shapes, or bind "
                                "the input's value with input_values)")
    if np.ndim(d) != 1:
        raise ModelError(f"{where(node)}: {what} (input {i}) must be a 1-D tensor, got shape "
                         f"{np.shape(d)}")
    return d


def optional_data(node: Node, i: int, data_of: DataOf) -> np.ndarray | None:
    """Data of optional input `i` (axes, steps: a vector), None where it is omitted."""
    v = node.input(i)
    if v is None:
        return None
    d = data_of(v)
    if d is None:
        raise DynamicShapeError(f"{where(node)}: input {i} must be a compile-time constant")
    if np.ndim(d) != 1:
        raise ModelError(f"{where(node)}: input {i} must be a 1-D tensor, got shape "
                         f"{np.shape(d)}")
    return d


def broadcast(node: Node, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ModelError(f"{where(node)}: shapes {', '.join(map(str, shapes))} do not "
                         "broadcast") from None


def broadcast_rule(out_dtype=None) -> Infer:
    """The shape rule of an op whose inputs broadcast together; the output type is `out_dtype`
    (None: the first input's)."""
    def infer(node: Node, data_of: DataOf):
        shapes = [shape_of(node, i) for i in range(len(node.inputs))]
        dt = out_dtype if out_dtype is not None else dtype_of(node, 0)
        return [(broadcast(node, *shapes), np.dtype(dt))]
    return infer


def same_as_input(node: Node, data_of: DataOf) -> list[tuple[tuple[int, ...], np.dtype]]:
    return [(shape_of(node, 0), dtype_of(node, 0))]


def numel(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def output_numel(node: Node) -> int:
    return sum(numel(v.shape) for v in node.outputs if v.shape is not None)


def norm_axis(node: Node, axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ModelError(f"{where(node)}: axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)
