"""QLinearDense: a statically quantized MatMul or Gemm over constant int8 weights, with its
requantisation fused — Woodpecker's own composite op (issue 53), what `passes/fold_qdq.py`
folds a QDQ file's DequantizeLinear → MatMul/Gemm → QuantizeLinear into (and a QOperator
file's QLinearMatMul and QGemm, which `frontend/qoperator.py` reads as that QDQ form).

Contract: `QLinearDense(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
y_zero_point, B)` with x (…, K) uint8 or int8 (per tensor), w a (K, N) int8/uint8 matrix (scale
and zero point per tensor or per column), B an optional int32 bias (N) with zero point 0 and
scale x_scale·w_scale, computes

    acc[…, n] = Σ_k (x[…, k] − x_zp)·(w[k, n] − w_zp[n]) + B[n]           (exact, int32)
    y = saturate(round_half_even(float32(acc) · (x_scale · w_scale[n] / y_scale)) + y_zp)

in y_zero_point's type — ONNX's QLinearMatMul (plus the bias QGemm and a QDQ Gemm carry),
requantised as `quant_conv.requantize` does for QLinearConv, in ONNX Runtime's order.

Exported (`parts`) as the QDQ form it was folded from: DequantizeLinear of x and of w (axis 1),
MatMul, the bias's DequantizeLinear and Add, QuantizeLinear — the form both libraries read and
fuse back into their integer kernels. Bad input is one ModelError line naming the node, as for
QLinearConv.
"""

from __future__ import annotations

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node, Value
from woodpecker.ops.fused import QDQ_STEPS, program_dtype, run_program, runtime_count
from woodpecker.ops.quant_conv import check_operands, requantize, with_program
from woodpecker.ops.registry import DataOf, composite, dtype_of, numel, op, shape_of, where

OP = "QLinearDense"
X, XS, XZ, W, WS, WZ, YS, YZ, B = range(9)


def _infer(node: Node, data_of: DataOf):
    x, w = shape_of(node, X), shape_of(node, W)
    if len(w) != 2 or not x or x[-1] != w[0]:
        raise ModelError(f"{where(node)}: input {x} and weights {w} do not multiply "
                         "((…, K) by (K, N))")
    check_operands(node, data_of, w[1])
    bias = node.input(B)
    if bias is not None and (bias.dtype != np.int32 or numel(bias.shape) != w[1]):
        raise ModelError(f"{where(node)}: its bias is {bias.dtype} {bias.shape} "
                         f"(int32, {w[1]} values)")
    return [(tuple(x[:-1]) + (w[1],), dtype_of(node, YZ))]


def _flops(node: Node) -> int:
    return 2 * numel(node.outputs[0].shape) * node.inputs[W].shape[0]


@op(OP, _infer, _flops)
def qlinear_dense(attrs, x, xs, xz, w, ws, wz, ys, yz, b=None):
    n = w.shape[1]
    # integer sums below 2^53 are exact in float64; the result is what int32 accumulates
    acc = np.rint(np.matmul(x.astype(np.float64) - float(np.ravel(xz)[0]),
                            w.astype(np.float64) - np.broadcast_to(
                                np.ravel(wz).astype(np.float64), (n,)))).astype(np.int64)
    if b is not None:
        acc = acc + np.ravel(b).astype(np.int64)
    scale = (np.float32(np.ravel(xs)[0]) * np.broadcast_to(np.ravel(ws), (n,)).astype(
        np.float32)) / np.float32(np.ravel(ys)[0])
    return requantize(acc.astype(np.int32), scale, np.ravel(yz)[0])


def parts(node: Node) -> list[Node]:
    """The QDQ form: DequantizeLinear(x), DequantizeLinear(w, axis 1), MatMul, the bias's
    DequantizeLinear (scale x_scale·w_scale) and Add, QuantizeLinear; values named after
    `node`."""
    x, y = node.inputs[X], node.outputs[0]
    w, bias = node.inputs[W], node.input(B)
    out: list[Node] = []

    def value(suffix: str, shape, dtype=np.float32, data=None) -> Value:
        return Value(f"{node.name}/{suffix}", tuple(shape), np.dtype(dtype), data=data)

    def add(op_name: str, suffix: str, ins: list, result: Value, attrs=None) -> None:
        part = Node(op_name, f"{node.name}/{suffix}", ins, [result], attrs or {})
        if result is not y:
            result.producer = part
        out.append(part)

    xf = value("x", x.shape)
    add("DequantizeLinear", "dequantize_x", [x, node.inputs[XS], node.inputs[XZ]], xf)
    wf = value("w", w.shape)
    add("DequantizeLinear", "dequantize_w", [w, node.inputs[WS], node.inputs[WZ]], wf,
        {"axis": 1})
    product = value("product", y.shape)
    add("MatMul", "matmul", [xf, wf], product)
    if bias is not None:
        n = w.shape[1]
        scale = np.float32(np.ravel(node.inputs[XS].data)[0]) * np.broadcast_to(
            np.ravel(node.inputs[WS].data), (n,)).astype(np.float32)
        bf = value("bias", (n,))
        add("DequantizeLinear", "dequantize_bias",
            [bias, value("bias_scale", (n,), data=scale),
             value("bias_zero_point", (n,), np.int32, np.zeros(n, np.int32))], bf, {"axis": 0})
        summed = value("sum", y.shape)
        add("Add", "bias", [product, bf], summed)
        product = summed
    add("QuantizeLinear", "quantize", [product, node.inputs[YS], node.inputs[YZ]], y)
    return out


composite(OP, parts)


# -- FusedQLinearDense: a QLinearDense and the element-wise chain after it ---------------------
# (passes/fuse_qdense_program.py: a statically quantized transformer's DequantizeLinear → Add
# bias → QuantizeLinear after each projection, the residual DequantizeLinear → Add →
# QuantizeLinear after the last ones). Inputs: the QLinearDense's nine (B may be None), the
# program's other run-time inputs (the output's shape), its constant vector if any; `program`
# (ops/fused.py's steps) reads the requantised 8-bit output as run-time input 0, and its
# "channel" constants are one per output column (the last axis). The same values as the nodes
# it replaces, in one pass.
FUSED = "Fused" + OP
N_DENSE = 9


_fused_infer, _fused_flops = with_program(_infer, _flops)


@op(FUSED, _fused_infer, _fused_flops)
def fused_qlinear_dense(attrs, *inputs):
    program = attrs["program"]
    y = qlinear_dense(attrs, *inputs[:N_DENSE])
    n = runtime_count(program) - 1
    rest = list(inputs[N_DENSE:])
    consts = rest[n].astype(np.float32) if len(rest) > n else np.zeros(0, np.float32)
    out = run_program(program, [y, *rest[:n]], consts, (y.shape[-1],))
    return np.asarray(out, program_dtype(program, y.dtype))


def fused_parts(node: Node) -> list[Node]:
    """The QLinearDense (its output a value named after `node`) and the program's steps as the
    standard nodes they are, constants as scalars or one value per column."""
    program, y = node.attrs["program"], node.outputs[0]
    dense_out = Value(f"{node.name}/dense", y.shape, node.inputs[YZ].dtype)
    dense = Node(OP, node.name, list(node.inputs[:N_DENSE]), [dense_out], {})
    dense_out.producer = dense
    n = runtime_count(program) - 1
    others = list(node.inputs[N_DENSE:N_DENSE + n])
    consts = node.inputs[N_DENSE + n].data if len(node.inputs) > N_DENSE + n else None
    columns = y.shape[-1]
    steps: list[Value] = []
    parts = [dense]

    def arg(ref, k: int, j: int) -> Value | None:
        if ref is None:
            return None
        kind, i = ref
        if kind == "in":
            return dense_out if i == 0 else others[i - 1]
        if kind == "step":
            return steps[i]
        data = consts[i:i + (1 if kind == "const" else columns)].astype(np.float32)
        data = data.reshape(() if kind == "const" else (columns,))
        return Value(f"{node.name}/step{k}_arg{j}", data.shape, data.dtype, data=data)

    for k, step in enumerate(program):
        args = [arg(a, k, j) for j, a in enumerate(step["args"])]
        attrs = dict(step.get("attrs", {}))
        if step["op"] in QDQ_STEPS:      # the zero point back in its 8-bit type
            dtype = np.dtype(attrs.pop("dtype"))
            attrs.pop("reciprocal", None)   # the program's form of the same values
            args[2] = Value(args[2].name, (), dtype, data=args[2].data.astype(dtype))
            out_dtype = dtype if step["op"] == "QuantizeLinear" else np.dtype(np.float32)
        else:
            out_dtype = np.dtype(np.float32)
        last = k == len(program) - 1
        v = y if last else Value(f"{node.name}/step{k}", y.shape, out_dtype)
        part = Node(step["op"], f"{node.name}/step{k}", args, [v], attrs)
        if not last:
            v.producer = part
        steps.append(v)
        parts.append(part)
    return parts


composite(FUSED, fused_parts)
