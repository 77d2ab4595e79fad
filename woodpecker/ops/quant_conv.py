"""QLinearConv: an integer convolution with its requantisation fused (ONNX's op, opset 10+).

Contract: `QLinearConv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
y_zero_point, B)` with Conv's attributes computes

    acc[n, m, p] = Σ (x − x_zp)·(w[m] − w_zp[m]) + B[m]          (exact, int32)
    y = saturate(round_half_even(float32(acc) · (x_scale · w_scale[m] / y_scale)) + y_zp)

in y_zero_point's type — the order and precision of ONNX Runtime's kernel (the scale
x_scale·w_scale/y_scale in float32, one float32 product per output, MLAS's requantisation), so
the reference equals ONNX Runtime's output bit for bit where ONNX Runtime's integer products do
not saturate (its AVX2 u8×s8 path adds pairs in 16 bits; VNNI and AMX do not). Activations
uint8 or int8, per tensor; weights int8 or uint8, per tensor or per output channel; B int32
with zero point 0 and scale x_scale·w_scale (as a QDQ file's bias is written).

Where it comes from: a QOperator file's node, or `passes/fold_qdq.py` folding a QDQ file's
DequantizeLinear → Conv → QuantizeLinear into one — the Q/DQ pair never runs as separate passes
over the tensors (issue 53).
"""

from __future__ import annotations

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node, Value
from woodpecker.ops import window
from woodpecker.ops.conv import bias_and_kernel, conv
from woodpecker.ops.fused import program_dtype, run_program, runtime_count
from woodpecker.ops.quant import QUANT_TYPES, check_scale
from woodpecker.ops.registry import DataOf, composite, dtype_of, numel, op, shape_of, where

X, XS, XZ, W, WS, WZ, YS, YZ, B = range(9)


def grouped_shapes(node: Node, xi: int, wi: int) -> tuple[tuple, tuple]:
    """Input `xi`'s and weight `wi`'s shapes, one ModelError line unless they fit the node's
    `group` (which the node then holds)."""
    x, w = shape_of(node, xi), shape_of(node, wi)
    groups = int(node.attr("group", 1))
    node.attrs["group"] = groups
    if len(x) < 3 or len(w) != len(x) or x[1] != w[1] * groups or w[0] % groups:
        raise ModelError(f"{where(node)}: input {x} and weight {w} do not fit group={groups}")
    return x, w


def check_operands(node: Node, data_of: DataOf, channels: int) -> None:
    """The 8-bit operands, scales and zero points of an integer op laid out as QLinearConv's
    first eight inputs (QLinearDense's too), one ModelError line naming the node: 8-bit types,
    one scale and zero point per tensor (per output channel for the weights: `channels`),
    positive finite scales, zero points of their tensor's type."""
    for i, what in ((X, "input"), (W, "weight"), (YZ, "output zero point")):
        if dtype_of(node, i) not in QUANT_TYPES:
            raise ModelError(f"{where(node)}: its {what} is {dtype_of(node, i)} (int8 or uint8)")
    for si, zi, qi, what, n in ((XS, XZ, X, "input", 1), (WS, WZ, W, "weight", channels),
                                (YS, YZ, YZ, "output", 1)):
        for i, kind in ((si, "scale"), (zi, "zero point")):
            s = shape_of(node, i)
            if numel(s) not in (1, n) or len(s) > 1:
                raise ModelError(f"{where(node)}: its {what} {kind} has shape {s}")
        check_scale(node, data_of, si, f"{what} scale")
        if dtype_of(node, zi) != dtype_of(node, qi):
            raise ModelError(f"{where(node)}: its {what} zero point is {dtype_of(node, zi)}, "
                             f"the {what} {dtype_of(node, qi)} (mixed int8/uint8)")


def _infer(node: Node, data_of: DataOf):
    x, w = grouped_shapes(node, X, W)
    check_operands(node, data_of, w[0])
    if node.input(B) is not None and dtype_of(node, B) != np.int32:
        raise ModelError(f"{where(node)}: its bias is {dtype_of(node, B)} (int32)")
    kernel = bias_and_kernel(_bias_view(node), w, w[0])
    out = window.resolve(node, x[2:], kernel)
    return [((x[0], w[0]) + out, dtype_of(node, YZ))]


class _bias_view:
    """The node as Conv's bias check reads it (inputs x, w, bias)."""

    def __init__(self, node: Node) -> None:
        self.op, self.name, self.attrs = node.op, node.name, node.attrs
        self.inputs = [node.input(X), node.input(W), node.input(B)]

    def attr(self, key, default=None):
        return self.attrs.get(key, default)

    def input(self, i: int):
        return self.inputs[i] if i < len(self.inputs) else None


def _flops(node: Node) -> int:
    return 2 * numel(node.outputs[0].shape) * numel(node.inputs[W].shape[1:])


def requantize(acc: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """int32 accumulators → the output type: float32 product, round half to even, + zp,
    saturate (MLAS's order)."""
    dt = zero_point.dtype
    info = np.iinfo(dt)
    y = np.rint(acc.astype(np.float32) * scale.astype(np.float32))
    return np.clip(y + np.int32(zero_point), info.min, info.max).astype(dt)


def _channel(v: np.ndarray, m: int, nd: int) -> np.ndarray:
    return np.broadcast_to(np.ravel(v), (m,)).reshape((1, m) + (1,) * nd)


@op("QLinearConv", _infer, _flops)
def qlinear_conv(attrs, x, xs, xz, w, ws, wz, ys, yz, b=None):
    m, nd = w.shape[0], x.ndim - 2
    xi = x.astype(np.float64) - float(np.ravel(xz)[0])
    wi = w.astype(np.float64) - np.broadcast_to(np.ravel(wz), (m,)).reshape(
        (m,) + (1,) * (w.ndim - 1))
    # integer sums below 2^53 are exact in float64; the result is what int32 accumulates
    acc = np.rint(conv(attrs, xi, wi)).astype(np.int64)
    if b is not None:
        acc = acc + _channel(b.astype(np.int64), m, nd)
    scale = (np.float32(np.ravel(xs)[0]) * np.ravel(ws).astype(np.float32)) \
        / np.float32(np.ravel(ys)[0])
    return requantize(acc.astype(np.int32), _channel(scale, m, nd), np.ravel(yz)[0])


# -- FusedQLinearConv: a QLinearConv and the element-wise group reading its output -------------
# (passes/fuse_qconv_program.py: a quantized ResNet's DequantizeLinear → Add → Relu →
# QuantizeLinear after the conv that ends each block). Inputs: the QLinearConv's nine (B may be
# None), then the group's other run-time inputs, then its constant vector if any; `program`
# (ops/fused.py's steps) reads the conv's 8-bit output as run-time input 0 and the others as
# 1, 2, …. The conv's output is requantised exactly as QLinearConv's, then the program runs on
# it: the same values as the two nodes, in one pass.
FUSED = "FusedQLinearConv"
N_CONV = 9


def with_program(infer, flops):
    """A product's shape/type inference and FLOP count → those of the product with a fused
    element-wise program after it (`attrs["program"]`): the program's result type, one FLOP
    per step per output."""
    def fused_infer(node: Node, data_of: DataOf):
        (shape, dtype), = infer(node, data_of)
        return [(shape, program_dtype(node.attrs["program"], dtype))]

    def fused_flops(node: Node) -> int:
        return flops(node) + numel(node.outputs[0].shape) * len(node.attrs["program"])

    return fused_infer, fused_flops


_fused_infer, _fused_flops = with_program(_infer, _flops)


def fused_parts(node: Node) -> list[Node]:
    """The QLinearConv (its output a value named after `node`) and the FusedElementwise."""
    y = node.outputs[0]
    conv_out = Value(f"{node.name}/conv", y.shape, node.inputs[YZ].dtype)
    conv = Node("QLinearConv", node.name, list(node.inputs[:N_CONV]), [conv_out],
                {k: v for k, v in node.attrs.items() if k != "program"})
    conv_out.producer = conv
    group = Node("FusedElementwise", f"{node.name}/program",
                 [conv_out, *node.inputs[N_CONV:]], [y], {"program": node.attrs["program"]})
    return [conv, group]


@op(FUSED, _fused_infer, _fused_flops)
def fused_qlinear_conv(attrs, *inputs):
    program = attrs["program"]
    y = qlinear_conv(attrs, *inputs[:N_CONV])
    rest = list(inputs[N_CONV:])
    n = runtime_count(program) - 1
    consts = rest[n].astype(np.float32) if len(rest) > n else np.zeros(0, np.float32)
    out = run_program(program, [y, *rest[:n]], consts, (1, y.shape[1]) + (1,) * (y.ndim - 2))
    return np.asarray(out, program_dtype(program, y.dtype))


composite(FUSED, fused_parts)
