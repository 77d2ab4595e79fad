"""GELU recognition: the erf form PyTorch exports below opset 20, which has no Gelu op,
0.5 · x · (1 + erf(x / √2)), becomes one `Gelu` node, so passes/fuse_epilogue.py takes it into
the product before it (ConvNeXt's and ViT's MLP: MatMul → GELU → MatMul) instead of five
element-wise nodes, each a pass over the activation, Erf having no generated kernel.

Matched, from each Erf: its input is x / √2 (a Div by √2 or a Mul by 1/√2, to 1e-5); its
result is read only by an Add of 1; that sum only by a Mul with x, then a Mul by 0.5 (form A:
(x · s) · 0.5), or by a Mul with x · 0.5 (form B: (0.5 · x) · s). Every intermediate value has
that one reader and is no graph output.
"""

from __future__ import annotations

import math

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.pattern import const_scalar, producer, sole_reader

_ROOT_HALF = 1 / math.sqrt(2)


def _near(v: float | None, want: float) -> bool:
    return v is not None and abs(v - want) <= 1e-5 * abs(want)


def _scaled_input(node: Node | None) -> Value | None:
    """x when `node` computes x / √2 or x · (1/√2) by a constant scalar."""
    if node is None or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if node.op == "Div" and _near(const_scalar(b, a), math.sqrt(2)):
        return a
    if node.op == "Mul":
        for x, c in ((a, b), (b, a)):
            if _near(const_scalar(c, x), _ROOT_HALF):
                return x
    return None


def _other(node: Node, v: Value) -> Value | None:
    """The input of a two-input `node` that is not `v` (None unless `v` is exactly one)."""
    a, b = node.inputs
    return b if a is v and b is not v else a if b is v and a is not v else None


def _match(graph: Graph, erf: Node) -> tuple[Value, list[Node], Value] | None:
    """(x, the pattern's nodes, its output) for the GELU ending at the Erf's readers."""
    div = producer(erf.inputs[0])
    x = _scaled_input(div)
    if x is None or sole_reader(graph, erf.inputs[0]) is not erf:
        return None
    add = sole_reader(graph, erf.outputs[0])
    if add is None or add.op != "Add" or \
            not _near(const_scalar(_other(add, erf.outputs[0]), erf.outputs[0]), 1.0):
        return None
    mul = sole_reader(graph, add.outputs[0])
    if mul is None or mul.op != "Mul":
        return None
    factor = _other(mul, add.outputs[0])
    if factor is x:                                       # form A: (x · s) · 0.5
        half = sole_reader(graph, mul.outputs[0])
        if half is None or half.op != "Mul" or \
                not _near(const_scalar(_other(half, mul.outputs[0]), x), 0.5):
            return None
        return x, [div, erf, add, mul, half], half.outputs[0]
    pre = producer(factor, "Mul")                         # form B: (0.5 · x) · s
    if pre is None or sole_reader(graph, factor) is not mul or x not in pre.inputs or \
            not _near(const_scalar(_other(pre, x), x), 0.5):
        return None
    return x, [div, erf, add, pre, mul], mul.outputs[0]


def fuse_gelu(graph: Graph) -> int:
    fused = 0
    for erf in [n for n in graph.nodes if n.op == "Erf"]:
        if erf not in graph.nodes:
            continue
        found = _match(graph, erf)
        if found is None:
            continue
        x, nodes, y = found
        if any(v.dtype != x.dtype or tuple(v.shape) != tuple(x.shape)
               for v in (y, erf.outputs[0])):
            continue   # a broadcast somewhere: not the element-wise GELU of x
        index = min(graph.nodes.index(n) for n in nodes)
        for n in nodes:
            graph.remove_node(n)
        graph.add_node("Gelu", [x], [y], {}, name=erf.name, index=index)
        fused += 1
    if fused:
        graph.toposort()
        graph.dce()
    return fused
