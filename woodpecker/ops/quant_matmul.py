"""Dynamic int8 MatMul: ONNX's DynamicQuantizeLinear and MatMulInteger, and the one node a
dynamically quantized file's chain of them folds into, DynamicQuantizeMatMul (issue 53).

Contract (ONNX opsets 10-21; ONNX Runtime's order and precision, so the references equal its
outputs bit for bit):

- `DynamicQuantizeLinear(x)` → (y uint8, scale, zero_point): lo = min(0, min x), hi = max(0,
  max x); scale = (hi − lo) / 255 in float32 (1 where hi = lo); zero_point =
  round_half_even(clamp(0 − lo / scale, 0, 255)); y = saturate(round_half_even(x / scale) + zp).
- `MatMulInteger(a, b, a_zero_point, b_zero_point)` = (a − a_zp)·(b − b_zp) in int32, int8 or
  uint8 operands, a's zero point per tensor, b's per tensor or per column (last axis).
- `DynamicQuantizeMatMul(x, b, b_scale, b_zero_point, bias)` — what ONNX Runtime's dynamic
  quantizer writes per MatMul (DynamicQuantizeLinear → MatMulInteger → Cast → Mul by
  scale·b_scale → Add bias), as one node: float32 in, float32 out,

      y = float32(MatMulInteger(q, b, zp, b_zp)) · (scale · b_scale) + bias,  (q, scale, zp)
      = DynamicQuantizeLinear(x)

  with b a constant int8/uint8 (K, N) matrix, b_scale and b_zero_point per tensor or per
  column, bias float32 (N) or absent. Woodpecker's own composite op (ONNX Runtime has a contrib
  op of the name and meaning; it is exported as the standard ops it stands for, `parts`).
  One DynamicQuantizeLinear read by several MatMulIntegers (a transformer's Q, K and V
  projections) becomes one node each, each quantizing x again: the quantization is a pass of
  M·K bytes beside a product of M·K·N operations.

Bad input is one ModelError line naming the node: operands of other types, a zero point of
another type than its operand (mixed int8/uint8), a per-column parameter of another length.
"""

from __future__ import annotations

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node, Value
from woodpecker.ops.matmul import matmul_shape
from woodpecker.ops.quant import QUANT_TYPES, check_scale
from woodpecker.ops.registry import DataOf, composite, dtype_of, numel, op, shape_of, where

OP = "DynamicQuantizeMatMul"
X, B, B_SCALE, B_ZP, BIAS = range(5)


def _dql_infer(node: Node, data_of: DataOf):
    if dtype_of(node, 0) != np.float32:
        raise ModelError(f"{where(node)}: quantizes a {dtype_of(node, 0)} tensor (float32)")
    return [(shape_of(node, 0), np.dtype(np.uint8)), ((), np.dtype(np.float32)),
            ((), np.dtype(np.uint8))]


def _dql_flops(node: Node) -> int:
    return 0


@op("DynamicQuantizeLinear", _dql_infer, _dql_flops)
def dynamic_quantize_linear(attrs, x):
    x = x.astype(np.float32)
    lo = np.float32(min(0.0, float(x.min()))) if x.size else np.float32(0)
    hi = np.float32(max(0.0, float(x.max()))) if x.size else np.float32(0)
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.rint(np.clip(np.float32(0) - lo / scale, np.float32(0), np.float32(255)))
    y = np.clip(np.rint(x / scale) + zp, 0, 255).astype(np.uint8)
    return y, np.asarray(scale, np.float32), np.asarray(zp, np.uint8)


def _operand_checks(node: Node, pairs) -> None:
    for qi, zi, what, columns in pairs:
        if dtype_of(node, qi) not in QUANT_TYPES:
            raise ModelError(f"{where(node)}: its {what} is {dtype_of(node, qi)} (int8 or uint8)")
        zp = node.input(zi)
        if zp is None:
            continue
        if zp.dtype != dtype_of(node, qi):
            raise ModelError(f"{where(node)}: its {what} zero point is {zp.dtype}, the {what} "
                             f"{dtype_of(node, qi)} (mixed int8/uint8)")
        if numel(zp.shape) not in (1, columns) or len(zp.shape) > 1:
            raise ModelError(f"{where(node)}: its {what} zero point has shape {zp.shape} "
                             f"(one value{' or one per column' if columns > 1 else ''})")


def _mmi_infer(node: Node, data_of: DataOf):
    a, b = shape_of(node, 0), shape_of(node, 1)
    _operand_checks(node, ((0, 2, "input A", 1), (1, 3, "input B", b[-1])))
    return [(matmul_shape(node, a, b), np.dtype(np.int32))]


def _mmi_flops(node: Node) -> int:
    return 2 * numel(node.outputs[0].shape) * node.inputs[1].shape[-2]


def _column(v: np.ndarray | None, dtype=np.int32):
    return np.zeros((), dtype) if v is None else np.ravel(v).astype(dtype)


def _mmi_check(node: Node) -> str | None:
    """A per-row zero point of A (ONNX allows one value per row) is left to the libraries
    (the node stays opaque): ONNX Runtime's dynamic quantizer writes one per tensor."""
    zp = node.input(2)
    if zp is not None and zp.shape is not None and numel(zp.shape) > 1:
        return "a per-row zero point of A"
    return None


@op("MatMulInteger", _mmi_infer, _mmi_flops, _mmi_check)
def matmul_integer(attrs, a, b, a_zero_point=None, b_zero_point=None):
    az = _column(a_zero_point)
    bz = _column(b_zero_point)
    if az.size > 1:
        raise ModelError("MatMulInteger: a per-row zero point of A is not supported")
    # integer sums below 2^53 are exact in float64; the result is what int32 accumulates
    acc = np.matmul(a.astype(np.float64) - float(az.reshape(-1)[0] if az.size else 0),
                    b.astype(np.float64) - bz.astype(np.float64))
    return np.rint(acc).astype(np.int64).astype(np.int32)


def _infer(node: Node, data_of: DataOf):
    x, b = shape_of(node, X), shape_of(node, B)
    if dtype_of(node, X) != np.float32:
        raise ModelError(f"{where(node)}: its input is {dtype_of(node, X)} (float32)")
    if len(b) != 2:
        raise ModelError(f"{where(node)}: its weights have shape {b} (K, N)")
    _operand_checks(node, ((B, B_ZP, "weight", b[1]),))
    scale = shape_of(node, B_SCALE)
    if numel(scale) not in (1, b[1]) or len(scale) > 1:
        raise ModelError(f"{where(node)}: its weight scale has shape {scale}")
    check_scale(node, data_of, B_SCALE, "weight scale")
    bias = node.input(BIAS)
    if bias is not None and (bias.dtype != np.float32 or numel(bias.shape) != b[1]):
        raise ModelError(f"{where(node)}: its bias is {bias.dtype} {bias.shape} "
                         f"(float32, {b[1]} values)")
    return [(matmul_shape(node, x, b), np.dtype(np.float32))]


def _flops(node: Node) -> int:
    return 2 * numel(node.outputs[0].shape) * node.inputs[B].shape[0]


def column_scales(scale: np.ndarray, b_scale: np.ndarray, n: int) -> np.ndarray:
    """scale · b_scale per output column in float32 (the file's Mul of the two scales)."""
    return np.broadcast_to(np.float32(scale) * np.ravel(b_scale).astype(np.float32), (n,))


@op(OP, _infer, _flops)
def dynamic_quantize_matmul(attrs, x, b, b_scale, b_zero_point=None, bias=None):
    q, scale, zp = dynamic_quantize_linear({}, x)
    acc = matmul_integer({}, q, b, zp, b_zero_point)
    y = acc.astype(np.float32) * column_scales(scale, b_scale, b.shape[1])
    return y if bias is None else y + np.ravel(bias).astype(np.float32)


def parts(node: Node) -> list[Node]:
    """The standard ops the node stands for, as ONNX Runtime's dynamic quantizer writes them:
    DynamicQuantizeLinear, the scales' Mul, MatMulInteger, Cast, Mul and the bias's Add; the
    values between them are named after `node`."""
    x, b, b_scale, b_zp = (node.input(i) for i in (X, B, B_SCALE, B_ZP))
    bias, y = node.input(BIAS), node.outputs[0]
    out: list[Node] = []

    def value(suffix: str, shape, dtype) -> Value:
        return Value(f"{node.name}/{suffix}", tuple(shape), np.dtype(dtype))

    def add(op_name: str, suffix: str, ins: list, outs: list[Value], attrs=None) -> None:
        part = Node(op_name, f"{node.name}/{suffix}", ins, outs, attrs or {})
        for v in outs:
            if v is not y:
                v.producer = part
        out.append(part)

    q = value("q", x.shape, np.uint8)
    scale, zp = value("scale", (), np.float32), value("zero_point", (), np.uint8)
    add("DynamicQuantizeLinear", "quantize", [x], [q, scale, zp])
    scales = value("scales", b_scale.shape, np.float32)
    add("Mul", "scales", [scale, b_scale], [scales])
    acc = value("acc", y.shape, np.int32)
    add("MatMulInteger", "matmul", [q, b, zp, b_zp], [acc])
    accf = value("acc_float", y.shape, np.float32)
    add("Cast", "cast", [acc], [accf], {"to": 1})
    if bias is None:
        add("Mul", "scale", [accf, scales], [y])
    else:
        scaled = value("scaled", y.shape, np.float32)
        add("Mul", "scale", [accf, scales], [scaled])
        add("Add", "bias", [scaled, bias], [y])
    return out


composite(OP, parts)
