"""Element-wise ops: broadcasting binaries, activations, Clip, Where, Cast.

Integer Div truncates toward zero, Mod follows its `fmod` attribute, and Pow keeps the
base's type, as the ONNX spec says. An integer Div or Mod whose divisor is known at compile
time (an initializer, a constant, a value its shape subgraph computes) and holds a zero is the
model's fault, one ModelError naming the node from its shape rule — ONNX Runtime refuses such a
model when it builds its session.
"""

from __future__ import annotations

import math

import numpy as np

from woodpecker.errors import ModelError, UnsupportedOpError
from woodpecker.ir.graph import Node
from woodpecker.ir.types import to_numpy_dtype
from woodpecker.ops.registry import (
    DataOf,
    broadcast,
    broadcast_rule,
    dtype_of,
    op,
    output_numel,
    same_as_input,
    shape_of,
    where,
)


def _div(attrs, a, b):
    if np.issubdtype(a.dtype, np.integer):
        if np.issubdtype(a.dtype, np.signedinteger):
            q = np.abs(a) // np.abs(b)
            return np.where((a < 0) ^ (b < 0), -q, q).astype(a.dtype)
        return a // b
    return a / b


def _pow(attrs, a, b):
    if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
        return np.power(a, b).astype(a.dtype)
    return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)


def _wrapping(fn):
    """Integer arithmetic wraps around like C; numpy does too, but warns on scalars."""
    def ref(attrs, a, b):
        with np.errstate(over="ignore"):
            return fn(a, b).astype(np.result_type(a.dtype, a.dtype))
    return ref


op("Add", broadcast_rule(), output_numel)(_wrapping(np.add))
op("Sub", broadcast_rule(), output_numel)(_wrapping(np.subtract))
op("Mul", broadcast_rule(), output_numel)(_wrapping(np.multiply))
def _divisor_rule(what: str):
    """The broadcast rule of an integer division (`what`: "division", "modulo"), refusing a
    known divisor that holds a zero."""
    rule = broadcast_rule()

    def infer(node: Node, data_of: DataOf):
        b = node.input(1)
        d = None if b is None else data_of(b)
        if d is not None and np.asarray(d).dtype.kind in "iu" and not np.all(d):
            raise ModelError(f"{where(node)}: integer {what} by zero (its divisor {b.name!r} "
                             "holds a zero)")
        return rule(node, data_of)
    return infer


op("Div", _divisor_rule("division"), output_numel)(_div)
op("Pow", broadcast_rule(), output_numel)(_pow)
def _mod(attrs, a, b):
    """fmod=1: sign of the dividend (C fmod); fmod=0: sign of the divisor (Python %)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.fmod(a, b) if attrs.get("fmod", 0) else np.mod(a, b)).astype(a.dtype)


op("Mod", _divisor_rule("modulo"), output_numel)(_mod)
op("Equal", broadcast_rule(np.bool_), output_numel)(lambda attrs, a, b: np.equal(a, b))


def _float_unary(fn):
    def ref(attrs, x):
        return fn(attrs, x).astype(x.dtype, copy=False)
    return ref


def _unary(name: str, fn) -> None:
    """A float activation (ONNX's type constraints keep these ops to float tensors)."""
    op(name, same_as_input, output_numel)(_float_unary(fn))


def _sigmoid(attrs, x):
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def _gelu(attrs, x):
    x64 = x.astype(np.float64)
    if attrs.get("approximate", "none") == "tanh":
        return 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    return 0.5 * x64 * (1 + _erf(x64 / np.sqrt(2)))


def hard_sigmoid(x, alpha=0.2, beta=0.5):
    return np.clip(alpha * x + beta, 0, 1)


_unary("Sqrt", lambda a, x: np.sqrt(x))
_unary("Erf", lambda a, x: _erf(x))


def _erf(x: np.ndarray) -> np.ndarray:
    """The error function, element-wise: scipy's where it is installed (fast), else the C
    library's `math.erf` per element (exact to double precision, slower); scipy is imported
    only when an Erf is first computed, so loading a plan never pulls it in."""
    try:
        from scipy.special import erf
    except ImportError:
        return np.vectorize(math.erf, otypes=[np.float64])(x).astype(np.result_type(x, 1.0))
    return erf(x)
_unary("Sigmoid", _sigmoid)
_unary("Tanh", lambda a, x: np.tanh(x))
_unary("Gelu", _gelu)
_unary("HardSigmoid", lambda a, x: hard_sigmoid(x, a.get("alpha", 0.2), a.get("beta", 0.5)))
_unary("HardSwish", lambda a, x: x * hard_sigmoid(x, 1 / 6, 0.5))
_unary("LeakyRelu", lambda a, x: np.where(x < 0, x * x.dtype.type(a.get("alpha", 0.01)), x))
op("Relu", same_as_input, output_numel)(lambda attrs, x: np.maximum(x, x.dtype.type(0)))


def _clip(attrs, x, lo=None, hi=None):
    out = x
    if lo is not None:
        out = np.maximum(out, np.reshape(lo, ()))
    if hi is not None:
        out = np.minimum(out, np.reshape(hi, ()))
    return np.asarray(out, dtype=x.dtype)


def _clip_infer(node: Node, data_of: DataOf):
    """Clip's bounds are scalars (ONNX Runtime takes a one-element vector too)."""
    for i in (1, 2):
        if i < len(node.inputs) and node.inputs[i] is not None:
            bound = shape_of(node, i)
            if len(bound) > 1 or int(np.prod(bound)) != 1:
                raise ModelError(f"{where(node)}: its {('min', 'max')[i - 1]} must be a scalar, "
                                 f"got shape {bound}")
    return same_as_input(node, data_of)


op("Clip", _clip_infer, output_numel)(_clip)


def _where_infer(node: Node, data_of: DataOf):
    shapes = [shape_of(node, i) for i in range(3)]
    return [(broadcast(node, *shapes), dtype_of(node, 1))]


op("Where", _where_infer, output_numel)(lambda attrs, c, a, b: np.where(c, a, b))


def _cast_target(node: Node) -> np.dtype:
    to = node.attr("to")
    dt = to_numpy_dtype(to)
    if dt is None:
        from onnx import TensorProto
        raise UnsupportedOpError(f"{where(node)}: Cast to {TensorProto.DataType.Name(to)} is not "
                                 "supported")
    return dt


def _cast_infer(node: Node, data_of: DataOf):
    return [(shape_of(node, 0), _cast_target(node))]


def _cast(attrs, x):
    to = to_numpy_dtype(attrs["to"])
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(to)


op("Cast", _cast_infer, output_numel)(_cast)
