"""Fold a QDQ file's DequantizeLinear → Conv → QuantizeLinear into one QLinearConv (issue 53).

Identity: with x = (xq − x_zp)·x_scale, w = (wq − w_zp)·w_scale and a bias written as
DequantizeLinear(bq: int32, x_scale·w_scale, 0),

    Q(Conv(x, w, b)) = saturate(round(Σ (xq − x_zp)(wq − w_zp) + bq) · x_scale·w_scale / y_scale)
                       + y_zp)

— the QLinearConv of the integer operands (ops/quant_conv.py). The left side computed in float
and the right side in integers round alike except where a float sum lands within rounding of a
half step; the right side is what ONNX Runtime computes for the file (its QDQ fusion makes the
same QLinearConv), and ONNX Runtime is the reference every result is checked against.

Folded only where the pattern is exact: the activation's DequantizeLinear per tensor (int8 or
uint8) and not a constant; the weight's a constant int8/uint8 tensor, per tensor or per output
channel (axis 0); no bias, or a DequantizeLinear of a constant int32 bias with zero point 0 and
scale x_scale·w_scale (within float32 rounding); the Conv's output read by one
QuantizeLinear alone (per tensor) and not a graph output. Runs first, before constant folding
turns the weights' DequantizeLinear into float weights.

Likewise DequantizeLinear → MatMul or Gemm → QuantizeLinear over constant 2-d weights (per
tensor or per output column; Gemm with alpha and beta 1, A not transposed and an int32 bias as
above) becomes one QLinearDense (ops/quant_dense.py, `_fold_dense`): the same identity with a
(K, N) product — a classifier's last Gemm, a transformer's projections.

Likewise DequantizeLinear → MaxPool, Reshape, Transpose, Flatten, Squeeze or Unsqueeze →
QuantizeLinear with the same per-tensor scale and zero point becomes that op on the 8-bit
tensor (`_fold_move`; exact, see there).
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.pattern import producer
from woodpecker.ops.quant import QUANT_TYPES
from woodpecker.ops.quant_dense import OP


def _scalar(v: Value | None) -> bool:
    return v is not None and v.data is not None and v.data.size == 1


def _dq(v: Value | None) -> Node | None:
    """The DequantizeLinear making `v`, with constant scale and zero point."""
    node = producer(v, "DequantizeLinear")
    if node is None or node.inputs[1].data is None:
        return None
    zp = node.input(2)
    if zp is not None and zp.data is None:
        return None
    return node


def _zero_point(graph: Graph, dq: Node, like: np.dtype) -> Value:
    zp = dq.input(2)
    return zp if zp is not None else graph.const(np.zeros((), like), "zero_point")


def _bias_ok(dq: Node | None, x_scale: float, w_scale: np.ndarray) -> bool:
    if dq is None or dq.inputs[0].data is None or dq.inputs[0].dtype != np.int32:
        return False
    zp = dq.input(2)
    if zp is not None and np.any(zp.data != 0):
        return False
    want = np.float32(x_scale) * w_scale.astype(np.float32)
    got = np.broadcast_to(np.ravel(dq.inputs[1].data), want.shape)
    return bool(np.allclose(got, want, rtol=1e-6, atol=0))


def _activation(v: Value) -> Node | None:
    """The per-tensor DequantizeLinear of a run-time 8-bit tensor making `v`."""
    dx = _dq(v)
    if dx is None or dx.inputs[0].data is not None or dx.inputs[0].dtype not in QUANT_TYPES \
            or not _scalar(dx.inputs[1]):
        return None
    return dx


def _sole_quantize(graph: Graph, out: Value) -> Node | None:
    """The per-tensor QuantizeLinear that alone reads `out` (not a graph output)."""
    if graph.is_output(out) or len(out.consumers) != 1:
        return None
    q = out.consumers[0]
    if q.op != "QuantizeLinear" or q.inputs[0] is not out or not _scalar(q.inputs[1]) or \
            (q.input(2) is not None and not _scalar(q.input(2))):
        return None
    return q


def _replace(graph: Graph, node: Node, q: Node, op: str, inputs: list, attrs: dict) -> None:
    """`node` and its QuantizeLinear `q` replaced by one `op` node writing q's output."""
    index = graph.nodes.index(node)
    result = q.outputs[0]
    graph.remove_node(q)
    graph.remove_node(node)
    graph.add_node(op, inputs, [result], attrs, name=node.name, index=index)


def _parameters(graph: Graph, dx: Node, dw: Node, wq: Value, q: Node, db: Node | None) -> list:
    """The folded node's inputs after x: x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B."""
    y_zp = q.input(2) if q.input(2) is not None else graph.const(np.zeros((), np.uint8),
                                                                 "zero_point")
    inputs = [dx.inputs[0], dx.inputs[1], _zero_point(graph, dx, dx.inputs[0].dtype),
              wq, dw.inputs[1], _zero_point(graph, dw, dw.inputs[0].dtype), q.inputs[1], y_zp]
    return inputs + ([db.inputs[0]] if db is not None else [])


def _weights(dw: Node | None, axis: int, m: int) -> bool:
    """A constant 8-bit weight tensor, per tensor or with `m` scales along `axis`."""
    if dw is None:
        return False
    wq, scale = dw.inputs[0], dw.inputs[1].data
    return wq.data is not None and wq.dtype in QUANT_TYPES and (
        scale.size == 1 or (dw.attr("axis", 1) % wq.data.ndim == axis and scale.size == m))


def _bias(bias: Value | None, dx: Node, dw: Node, m: int) -> tuple[bool, Node | None]:
    """(foldable, the bias's DequantizeLinear): no bias, or an int32 one of scale
    x_scale·w_scale."""
    if bias is None:
        return True, None
    db = _dq(bias)
    w_scale = np.broadcast_to(np.ravel(dw.inputs[1].data), (m,))
    return _bias_ok(db, float(dx.inputs[1].data.ravel()[0]), w_scale), db


def _fold(graph: Graph, conv: Node) -> bool:
    dx, dw = _activation(conv.inputs[0]), _dq(conv.inputs[1])
    m = conv.inputs[1].shape[0]
    if dx is None or not _weights(dw, 0, m):
        return False
    q = _sole_quantize(graph, conv.outputs[0])
    if q is None:
        return False
    ok, db = _bias(conv.input(2), dx, dw, m)
    if not ok:
        return False
    # the geometry the shape rule resolved stays the same
    _replace(graph, conv, q, "QLinearConv", _parameters(graph, dx, dw, dw.inputs[0], q, db),
             dict(conv.attrs))
    return True


def _fold_dense(graph: Graph, node: Node) -> bool:
    """DequantizeLinear → MatMul (constant (K, N) weights) or Gemm (2-d, alpha and beta 1, A
    not transposed, an int32 bias) → QuantizeLinear as one QLinearDense (ops/quant_dense.py);
    Gemm's transposed weights are stored transposed once, their per-row scales per column."""
    w = node.inputs[1]
    trans = node.op == "Gemm" and node.attr("transB", 0)
    if w.shape is None or len(w.shape) != 2 or node.op == "Gemm" and (
            node.attr("transA", 0) or node.attr("alpha", 1.0) != 1.0
            or node.attr("beta", 1.0) != 1.0 or len(node.inputs[0].shape or ()) != 2):
        return False
    dx, dw = _activation(node.inputs[0]), _dq(w)
    n = w.shape[0] if trans else w.shape[1]
    if dx is None or not _weights(dw, 0 if trans else 1, n) or dw.inputs[0].data.ndim != 2:
        return False
    q = _sole_quantize(graph, node.outputs[0])
    bias = node.input(2) if node.op == "Gemm" else None
    if q is None or bias is not None and (bias.shape is None or int(np.prod(bias.shape)) != n):
        return False
    ok, db = _bias(bias, dx, dw, n)
    if not ok:
        return False
    wq = dw.inputs[0]
    if trans:
        wq = graph.const(np.ascontiguousarray(wq.data.T), f"{wq.name}_transposed")
    inputs = _parameters(graph, dx, dw, wq, q, db)
    if db is not None:
        inputs[-1] = graph.const(np.ravel(db.inputs[0].data).astype(np.int32), "bias")
    _replace(graph, node, q, OP, inputs, {})
    return True


def _same_quantization(dq: Node, q: Node) -> bool:
    """A QuantizeLinear back to exactly the DequantizeLinear's scale (> 0), zero point and
    type: then Q(DQ(v)) = v for every v of the type."""
    zd, zq = dq.input(2), q.input(2)
    zp_d = np.zeros((), np.uint8) if zd is None else zd.data
    zp_q = np.zeros((), np.uint8) if zq is None else zq.data
    scale = dq.inputs[1].data
    return (_scalar(q.inputs[1]) and (zq is None or zq.data is not None)
            and zp_q.dtype == zp_d.dtype == dq.inputs[0].dtype == q.outputs[0].dtype
            and float(scale.ravel()[0]) > 0
            and np.float32(q.inputs[1].data.ravel()[0]) == np.float32(scale.ravel()[0])
            and zp_q.ravel()[0] == zp_d.ravel()[0])


# Ops that commute with dequantizing when the QuantizeLinear after them undoes it: they move
# or pick values (Reshape, Transpose, …) or take their maximum (MaxPool: DQ is increasing, scale
# > 0; padding, never a maximum, stays padding). Their later inputs (a shape, axes) stay.
MOVES = frozenset({"MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"})


def _fold_move(graph: Graph, node: Node) -> bool:
    """DequantizeLinear → a `MOVES` op → QuantizeLinear with one scale and zero point is that op
    on the 8-bit input itself: Q undoes DQ exactly, so the values it moves come out as they went
    in — a quantized ResNet's max pool, a quantized transformer's head reshapes and
    transposes."""
    dq = _dq(node.inputs[0])
    out = node.outputs[0]
    if dq is None or dq.inputs[0].data is not None or dq.inputs[0].dtype not in QUANT_TYPES \
            or not _scalar(dq.inputs[1]) or graph.is_output(out) or len(out.consumers) != 1 \
            or any(o is not None and (o.consumers or graph.is_output(o))
                   for o in node.outputs[1:]):
        return False
    q = out.consumers[0]
    if q.op != "QuantizeLinear" or q.inputs[0] is not out or not _same_quantization(dq, q):
        return False
    index = graph.nodes.index(node)
    result = q.outputs[0]
    graph.remove_node(q)
    graph.remove_node(node)
    graph.add_node(node.op, [dq.inputs[0], *node.inputs[1:]], [result], dict(node.attrs),
                   name=node.name, index=index)
    return True


def fold_qdq(graph: Graph) -> int:
    folded = sum(_fold(graph, n) for n in list(graph.nodes) if n.op == "Conv")
    folded += sum(_fold_dense(graph, n) for n in list(graph.nodes) if n.op in ("MatMul", "Gemm"))
    folded += sum(_fold_move(graph, n) for n in list(graph.nodes) if n.op in MOVES)
    if folded:
        graph.dce()
    return folded
