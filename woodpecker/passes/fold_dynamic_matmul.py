"""Fold a dynamically quantized MatMul — DynamicQuantizeLinear → MatMulInteger → Cast → Mul by
(scale · b_scale) [→ Add bias], as ONNX Runtime's dynamic quantizer writes it — into one
DynamicQuantizeMatMul node (ops/quant_matmul.py; issue 53): float32 in, float32 out, the int8
product and its quantization one kernel's work, never separate passes over the tensors.

Exact: the node's reference is the chain's ops in the chain's order (the scales' product in
float32, the accumulator's cast times it, then the bias). Folded only where the pattern holds:
the MatMulInteger's A and its zero point are outputs 0 and 2 of one DynamicQuantizeLinear; B a
constant 2-d int8/uint8 matrix with a constant zero point (or none); the Cast to float32 and
the Mul read alone, not graph outputs; the Mul's other operand the product of that
DynamicQuantizeLinear's scale and a constant float32 scale per tensor or per column; an Add of
a constant float32 vector of N values folded in as the bias when it is the Mul's only reader.
A DynamicQuantizeLinear read by several MatMulIntegers folds into each of them (its node goes
when nothing else reads it).

Where the quantized input is a Reshape merging the leading dimensions of x (the last one kept)
and the chain's result is reshaped back to those dimensions — the 2-d Gemm form ONNX Runtime's
MatMulAddFusion exports a transformer's projections in — the node reads x and writes the
reshaped result itself: quantization takes the same values either way, and the activations or
residual Adds after the Reshape can then join the node's epilogue (passes/fuse_epilogue.py).
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.pattern import other_input, producer, sole_reader
from woodpecker.ops.quant import QUANT_TYPES
from woodpecker.ops.quant_matmul import OP

FLOAT = 1        # ONNX's TensorProto.FLOAT


def _weight_scale(s: Value | None, scale: Value, n: int) -> Value | None:
    """The constant factor of the Mul `s` comes from, when `s` = scale · constant (float32,
    one value or one per column)."""
    mul = producer(s, "Mul")
    if mul is None:
        return None
    c = other_input(mul, scale)
    if c is None or c.data is None or c.dtype != np.float32 or c.data.size not in (1, n) \
            or c.data.ndim > 1:
        return None
    return c


def _bias(graph: Graph, y: Value, n: int) -> tuple[Node, Value] | None:
    add = sole_reader(graph, y, "Add")
    if add is None:
        return None
    b = other_input(add, y)
    if b is None or b.data is None or b.dtype != np.float32 or b.data.size != n \
            or b.shape[-1:] != (n,) or len(b.shape) > len(y.shape):
        return None
    return add, b


def _reshaped_around(graph: Graph, x: Value, y: Value, n: int) -> tuple[Node, Node] | None:
    """(the Reshape making `x` from a tensor of the same last dimension, the sole Reshape of
    `y` back to that tensor's leading dimensions), or None."""
    before = producer(x, "Reshape")
    after = sole_reader(graph, y, "Reshape")
    if before is None or after is None:
        return None
    src = before.inputs[0]
    if src.shape is None or src.shape[-1:] != x.shape[-1:] or \
            tuple(after.outputs[0].shape) != tuple(src.shape[:-1]) + (n,):
        return None
    return before, after


def _fold(graph: Graph, mm: Node) -> bool:
    dql = producer(mm.inputs[0], "DynamicQuantizeLinear")
    b = mm.inputs[1]
    if dql is None or mm.input(2) is not dql.outputs[2] or b.data is None or b.data.ndim != 2 \
            or b.dtype not in QUANT_TYPES:
        return False
    b_zp = mm.input(3)
    if b_zp is not None and b_zp.data is None:
        return False
    n = b.shape[1]
    cast = sole_reader(graph, mm.outputs[0], "Cast")
    if cast is None or cast.attr("to") != FLOAT:
        return False
    mul = sole_reader(graph, cast.outputs[0], "Mul")
    if mul is None:
        return False
    s = other_input(mul, cast.outputs[0])
    b_scale = _weight_scale(s, dql.outputs[1], n)
    if b_scale is None:
        return False
    bias = _bias(graph, mul.outputs[0], n)
    last = bias[0] if bias else mul
    inputs = [dql.inputs[0], b, b_scale,
              b_zp if b_zp is not None else graph.const(np.zeros((), b.dtype), "zero_point")]
    if bias:
        inputs.append(graph.const(np.ascontiguousarray(bias[1].data.reshape(n)), "bias"))
    result = last.outputs[0]
    around = _reshaped_around(graph, dql.inputs[0], result, n)
    if around is not None:
        inputs[0], result = around[0].inputs[0], around[1].outputs[0]
    index = graph.nodes.index(mm)
    for node in ((last, mul, cast, mm) if bias else (mul, cast, mm)) + \
            ((around[1],) if around else ()):
        graph.remove_node(node)
    graph.add_node(OP, inputs, [result], {}, name=mm.name, index=index)
    return True


def fold_dynamic_matmul(graph: Graph) -> int:
    folded = sum(_fold(graph, n) for n in list(graph.nodes) if n.op == "MatMulInteger")
    if folded:
        graph.dce()
    return folded
