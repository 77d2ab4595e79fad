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

Likewise DequantizeLinear → MaxPool → QuantizeLinear with the same per-tensor scale and zero
point becomes the MaxPool of the 8-bit tensor (`_fold_maxpool`; exact, see there).
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.pattern import producer
from woodpecker.ops.quant import QUANT_TYPES


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


def _fold(graph: Graph, conv: Node) -> bool:
    dx, dw = _dq(conv.inputs[0]), _dq(conv.inputs[1])
    if dx is None or dw is None or dx.inputs[0].data is not None or \
            dx.inputs[0].dtype not in QUANT_TYPES or not _scalar(dx.inputs[1]):
        return False
    wq = dw.inputs[0]
    m = conv.inputs[1].shape[0]
    if wq.data is None or wq.dtype not in QUANT_TYPES or \
            (dw.inputs[1].data.size != 1 and (dw.attr("axis", 1) % wq.data.ndim != 0
                                             or dw.inputs[1].data.size != m)):
        return False
    out = conv.outputs[0]
    if graph.is_output(out) or len(out.consumers) != 1:
        return False
    q = out.consumers[0]
    if q.op != "QuantizeLinear" or q.inputs[0] is not out or not _scalar(q.inputs[1]) or \
            (q.input(2) is not None and not _scalar(q.input(2))):
        return False
    bias = conv.input(2)
    db = _dq(bias) if bias is not None else None
    w_scale = np.broadcast_to(np.ravel(dw.inputs[1].data), (m,))
    if bias is not None and not _bias_ok(db, float(dx.inputs[1].data.ravel()[0]), w_scale):
        return False
    y_zp = q.input(2) if q.input(2) is not None else graph.const(np.zeros((), np.uint8),
                                                                 "zero_point")
    inputs = [dx.inputs[0], dx.inputs[1], _zero_point(graph, dx, dx.inputs[0].dtype),
              wq, dw.inputs[1], _zero_point(graph, dw, wq.dtype), q.inputs[1], y_zp]
    if db is not None:
        inputs.append(db.inputs[0])
    attrs = dict(conv.attrs)          # the geometry the shape rule resolved stays the same
    index = graph.nodes.index(conv)
    result = q.outputs[0]
    graph.remove_node(q)
    graph.remove_node(conv)
    graph.add_node("QLinearConv", inputs, [result], attrs, name=conv.name, index=index)
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


def _fold_maxpool(graph: Graph, pool: Node) -> bool:
    """DequantizeLinear → MaxPool → QuantizeLinear with one scale and zero point is the MaxPool
    of the 8-bit input itself: DQ is increasing (scale > 0), so the maximum commutes with it,
    and Q undoes DQ exactly; padding, never a maximum, stays padding."""
    dq = _dq(pool.inputs[0])
    out = pool.outputs[0]
    if dq is None or dq.inputs[0].data is not None or dq.inputs[0].dtype not in QUANT_TYPES \
            or not _scalar(dq.inputs[1]) or graph.is_output(out) or len(out.consumers) != 1 \
            or any(o is not None and (o.consumers or graph.is_output(o))
                   for o in pool.outputs[1:]):
        return False
    q = out.consumers[0]
    if q.op != "QuantizeLinear" or q.inputs[0] is not out or not _same_quantization(dq, q):
        return False
    index = graph.nodes.index(pool)
    result = q.outputs[0]
    graph.remove_node(q)
    graph.remove_node(pool)
    graph.add_node("MaxPool", [dq.inputs[0]], [result], dict(pool.attrs), name=pool.name,
                   index=index)
    return True


def fold_qdq(graph: Graph) -> int:
    folded = sum(_fold(graph, n) for n in list(graph.nodes) if n.op == "Conv")
    folded += sum(_fold_maxpool(graph, n) for n in list(graph.nodes) if n.op == "MaxPool")
    if folded:
        graph.dce()
    return folded
