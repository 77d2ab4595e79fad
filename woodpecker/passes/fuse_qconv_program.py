"""Fuse an element-wise group into the QLinearConv whose output it reads: one FusedQLinearConv
(ops/quant_conv.py), so a quantized ResNet's residual DequantizeLinear → Add → Relu →
QuantizeLinear (a FusedElementwise of Q/DQ steps, passes/fuse_elementwise.py) runs in the
epilogue of the conv that ends each block, as OpenVINO's int8 convs do, instead of one more
pass over two 8-bit tensors (issue 53: Q/DQ folded, never a pass of its own; measured on
ResNet-18 at about 0.05 ms a block on Emerald Rapids).

Exact: the conv's output is requantised to its 8-bit type as before and the program computes
on that value what the group computed on the tensor. Fused where the group reads a
QLinearConv's output that nothing else reads and that is not a graph output (the first such
input when several are); the group's other inputs and constants become the node's extra
inputs. Not into depthwise (grouped) convs, whose template computes no program: their groups
stay kernels of their own. Runs after fuse_elementwise.
"""

from __future__ import annotations

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.pattern import producer, sole_reader
from woodpecker.ops.fused import runtime_count
from woodpecker.ops.quant_conv import FUSED, N_CONV


def remapped(program: list[dict], first: int) -> list[dict]:
    """`program` with run-time input `first` moved to position 0 (the others shift up)."""
    def ref(a):
        if a is None or a[0] != "in":
            return a
        i = a[1]
        return ["in", 0 if i == first else i + 1 if i < first else i]

    return [{**s, "args": [ref(a) for a in s["args"]]} for s in program]


def _fusable(graph: Graph, group: Node, v: Value) -> Node | None:
    """The QLinearConv (not depthwise) making `v` when `group` alone reads `v` whole."""
    conv = producer(v, "QLinearConv")
    if conv is None or conv.attrs.get("group", 1) != 1 or sole_reader(graph, v) is not group \
            or tuple(v.shape) != tuple(group.outputs[0].shape):
        return None
    return conv


def _fuse(graph: Graph, group: Node) -> bool:
    program = group.attrs["program"]
    n = runtime_count(program)
    found = next(((i, c) for i, v in enumerate(group.inputs[:n])
                  if (c := _fusable(graph, group, v)) is not None), None)
    if found is None:
        return False
    i, conv = found
    others = [x for j, x in enumerate(group.inputs[:n]) if j != i]
    inputs = list(conv.inputs) + [None] * (N_CONV - len(conv.inputs)) + others + \
        list(group.inputs[n:])
    attrs = {**conv.attrs, "program": remapped(program, i)}
    out = group.outputs[0]
    index = graph.nodes.index(conv)
    graph.remove_node(group)
    graph.remove_node(conv)
    graph.add_node(FUSED, inputs, [out], attrs, name=conv.name, index=index)
    return True


def fuse_qconv_programs(graph: Graph) -> int:
    fused = sum(_fuse(graph, g) for g in list(graph.nodes) if g.op == "FusedElementwise")
    if fused:
        graph.toposort()
    return fused
