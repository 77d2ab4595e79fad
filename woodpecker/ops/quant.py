"""QuantizeLinear and DequantizeLinear (ONNX opsets 13-21): quantized models' boundaries in the IR.

Contract: `QuantizeLinear(x, scale, zero_point)` = saturate(round_half_to_even(x / scale) +
zero_point) in the zero point's type (uint8 where it is omitted); `DequantizeLinear(x, scale,
zero_point)` = (x − zero_point) · scale in float32. Per tensor (scalar scale) or per axis (a
1-D scale as long as the input's `axis` dimension). Integer types: int8 and uint8 (and int32 in,
for DequantizeLinear — a quantized bias, zero point 0). Other variants — 16-bit, 4-bit and
float8 types, opset 21's blocked quantization — are left to the libraries (the node stays
opaque: `check`).

Bad input is one `ModelError` line naming the node (issue 53): a scale that is not positive
and finite; a zero point of another type than the quantized tensor (mixed int8/uint8), of
another shape than the scale, or non-zero on an int32 tensor; a per-axis scale whose length is
not the axis dimension, or an axis out of range.

Why in the IR at all: a QDQ model's Q/DQ pairs are what the folding passes turn into integer
ops with fused requantisation; until they do, the numpy reference runs them exactly as ONNX
Runtime does (round half to even, saturation) and library regions take them whole.
"""

from __future__ import annotations

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node
from woodpecker.ops.registry import DataOf, dtype_of, norm_axis, op, output_numel, shape_of, where

QUANT_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))


def _per_axis(attrs: dict, x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """A scale or zero point shaped to broadcast along the node's axis."""
    if np.ndim(p) == 0 or np.size(p) == 1 and x.ndim == 0:
        return np.reshape(p, ())
    shape = [1] * x.ndim
    shape[int(attrs.get("axis", 1)) % x.ndim] = -1
    return np.reshape(p, shape)


def _check_params(node: Node, data_of: DataOf, quantized_i: int) -> None:
    """The scale and zero point checked against the quantized tensor (see the contract)."""
    x_shape = shape_of(node, 0)
    scale_shape = shape_of(node, 1)
    qdt = dtype_of(node, quantized_i) if node.input(quantized_i) is not None else None
    if len(scale_shape) > 1:
        raise ModelError(f"{where(node)}: its scale must be a scalar or a 1-D tensor, got shape "
                         f"{scale_shape}")
    # a one-element scale vector is per tensor whatever the axis, as ONNX Runtime reads it (its
    # static quantizer writes one for a LayerNorm's int32 bias, rank 1, axis left at 1)
    if len(scale_shape) == 1 and scale_shape[0] != 1:
        axis = norm_axis(node, int(node.attr("axis", 1)), len(x_shape))
        if scale_shape[0] != x_shape[axis]:
            raise ModelError(f"{where(node)}: {scale_shape[0]} scales for axis {axis} of an "
                             f"input of shape {x_shape} (dimension {x_shape[axis]})")
    check_scale(node, data_of, 1, "scale")
    zp = node.input(2)
    if zp is None:
        return
    if zp.shape != scale_shape and not (numel_1(zp.shape) and numel_1(scale_shape)):
        raise ModelError(f"{where(node)}: its zero point has shape {zp.shape}, its scale "
                         f"{scale_shape}")
    if qdt is not None and zp.dtype != qdt:
        raise ModelError(f"{where(node)}: its zero point is {zp.dtype} but the quantized "
                         f"tensor is {qdt} (mixed int8/uint8)")
    if zp.dtype == np.int32:
        z = data_of(zp)
        if z is None or np.any(z != 0):
            raise ModelError(f"{where(node)}: an int32 tensor's zero point must be 0")


def check_scale(node: Node, data_of: DataOf, i: int, what: str) -> None:
    """A ModelError line unless input `i` (a scale), where known, is positive and finite."""
    scale = data_of(node.input(i))
    if scale is not None and not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
        bad = scale[~(np.isfinite(scale) & (scale > 0))] if np.ndim(scale) else scale
        raise ModelError(f"{where(node)}: its {what} must be positive and finite, got "
                         f"{np.ravel(bad)[0]}")


def numel_1(shape: tuple[int, ...]) -> bool:
    return int(np.prod(shape, dtype=np.int64)) == 1


def _q_infer(node: Node, data_of: DataOf):
    zp = node.input(2)
    out = zp.dtype if zp is not None else np.dtype(np.uint8)
    if out not in QUANT_TYPES:
        raise ModelError(f"{where(node)}: quantizing to {out} is not supported (int8, uint8)")
    _check_params(node, data_of, 2)
    return [(shape_of(node, 0), out)]


def _dq_infer(node: Node, data_of: DataOf):
    if dtype_of(node, 0) not in QUANT_TYPES + (np.dtype(np.int32),):
        raise ModelError(f"{where(node)}: dequantizing a {dtype_of(node, 0)} tensor is not "
                         "supported (int8, uint8, int32)")
    _check_params(node, data_of, 0)
    return [(shape_of(node, 0), np.dtype(np.float32))]


def _check(node: Node) -> str | None:
    if node.attr("block_size", 0):
        return "blocked quantization (opset 21's block_size)"
    if node.attr("output_dtype", 0) or node.attr("saturate", 1) != 1:
        return "an output_dtype or saturate attribute"
    # the quantized tensor's type, where the importer knows it yet (an initializer, the model's
    # input, the zero point's); a value computed earlier is checked by the shape rule
    x, zp = node.inputs[0], (node.inputs[2:3] or [None])[0]
    known = [v.dtype for v in ((x,) if node.op == "DequantizeLinear" else ()) + (zp,)
             if v is not None and v.dtype is not None]
    allowed = QUANT_TYPES + ((np.dtype(np.int32),) if node.op == "DequantizeLinear" else ())
    bad = [d for d in known if d not in allowed]
    if bad:
        return f"a {bad[0]} quantized tensor"
    if node.inputs[1].dtype != np.float32:
        return f"a {node.inputs[1].dtype} scale"
    if node.op == "QuantizeLinear" and x.dtype is not None and x.dtype != np.float32:
        return f"quantizing a {x.dtype} tensor"
    return None


@op("QuantizeLinear", _q_infer, output_numel, _check)
def quantize_linear(attrs, x, scale, zero_point=None):
    dt = np.dtype(np.uint8) if zero_point is None else zero_point.dtype
    info = np.iinfo(dt)
    zp = 0 if zero_point is None else _per_axis(attrs, x, zero_point).astype(np.int32)
    q = np.rint(x.astype(np.float32) / _per_axis(attrs, x, scale).astype(np.float32))
    with np.errstate(invalid="ignore"):
        q = np.clip(q + zp, info.min, info.max)
    return q.astype(dt)


@op("DequantizeLinear", _dq_infer, output_numel, _check)
def dequantize_linear(attrs, x, scale, zero_point=None):
    zp = 0 if zero_point is None else _per_axis(attrs, x, zero_point).astype(np.int32)
    return ((x.astype(np.int32) - zp).astype(np.float32)
            * _per_axis(attrs, x, scale).astype(np.float32))
