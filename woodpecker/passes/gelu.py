"""GELU recognition: the erf form PyTorch exports below opset 20, which has no Gelu op,
0.5 · x · (1 + erf(x / √2)), becomes one `Gelu` node, and the tanh form (GPT-2's and ALBERT's
"gelu_new"), 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³))), one `Gelu` node with
approximate="tanh", so passes/fuse_epilogue.py takes it into
the product before it (ConvNeXt's and ViT's MLP: MatMul → GELU → MatMul) instead of five
element-wise nodes, each a pass over the activation, Erf having no generated kernel.

Matched, from each Erf: its input is x / √2 (a Div by √2 or a Mul by 1/√2, to 1e-5); from
each Tanh: its input is √(2/π) · (x + 0.044715 · x³), the cube a Pow of 3 or x · x · x. Its
result is read only by an Add of 1; that sum only by a Mul with x, then a Mul by 0.5 (form A:
(x · s) · 0.5), or by a Mul with x · 0.5 (form B: (0.5 · x) · s). Every intermediate value has
that one reader and is no graph output. Form C (PyTorch's dynamo exporter, e.g. DistilBERT):
(0.5 · s) · x.
"""

from __future__ import annotations

import math

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.pattern import const_scalar, other_input, producer, sole_reader

_ROOT_HALF = 1 / math.sqrt(2)


def _near(v: float | None, want: float) -> bool:
    return v is not None and abs(v - want) <= 1e-5 * abs(want)


def _times(node: Node | None, want: float) -> Value | None:
    """x when `node` is a Mul of x by a constant scalar `want` (to 1e-5), in either order."""
    if node is None or node.op != "Mul" or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    return next((x for x, c in ((a, b), (b, a)) if _near(const_scalar(c, x), want)), None)


def _scaled_input(node: Node | None) -> Value | None:
    """x when `node` computes x / √2 or x · (1/√2) by a constant scalar."""
    if node is not None and node.op == "Div" and len(node.inputs) == 2 and \
            _near(const_scalar(node.inputs[1], node.inputs[0]), math.sqrt(2)):
        return node.inputs[0]
    return _times(node, _ROOT_HALF)


_TANH_SCALE, _CUBE_SCALE = math.sqrt(2 / math.pi), 0.044715


def _cube_of(graph: Graph, node: Node | None) -> tuple[Value, list[Node]] | None:
    """(x, nodes) when `node` computes x³: Pow(x, 3) or x · (x · x) in either order."""
    if node is None:
        return None
    if node.op == "Pow" and len(node.inputs) == 2 and \
            _near(const_scalar(node.inputs[1], node.inputs[0]), 3.0):
        return node.inputs[0], [node]
    if node.op == "Mul" and len(node.inputs) == 2:
        for a, b in (node.inputs, node.inputs[::-1]):
            sq = producer(b, "Mul")
            if sq is not None and list(sq.inputs) == [a, a] and sole_reader(graph, b) is node:
                return a, [sq, node]
    return None


def _tanh_input(graph: Graph, node: Node | None) -> tuple[Value, list[Node]] | None:
    """(x, nodes) when `node` computes √(2/π) · (x + 0.044715 · x³), each step read once."""
    inner = _times(node, _TANH_SCALE)
    add = producer(inner, "Add")
    if add is None or sole_reader(graph, inner) is not node:
        return None
    for x, scaled in (add.inputs, add.inputs[::-1]):
        mul = producer(scaled, "Mul")
        cube = _times(mul, _CUBE_SCALE)
        found = None if cube is None else _cube_of(graph, producer(cube))
        if found is not None and found[0] is x and sole_reader(graph, scaled) is add and \
                sole_reader(graph, cube) is mul:
            return x, found[1] + [mul, add, node]
    return None


def _head(graph: Graph, node: Node) -> tuple[Value, list[Node], str] | None:
    """(x, nodes up to and with `node`, approximate) for an Erf of x/√2 or a Tanh of GELU's
    cubic, the value `node` reads read by it alone."""
    if sole_reader(graph, node.inputs[0]) is not node:
        return None
    if node.op == "Erf":
        div = producer(node.inputs[0])
        x = _scaled_input(div)
        return None if x is None else (x, [div, node], "none")
    found = _tanh_input(graph, producer(node.inputs[0]))
    return None if found is None else (found[0], found[1] + [node], "tanh")


def _match(graph: Graph, head: Node) -> tuple[Value, list[Node], Value, str] | None:
    """(x, the pattern's nodes, its output, approximate) for the GELU ending at the readers
    of `head` (an Erf or a Tanh)."""
    found = _head(graph, head)
    if found is None:
        return None
    x, inner, approximate = found
    add = sole_reader(graph, head.outputs[0], "Add")
    if add is None or \
            not _near(const_scalar(other_input(add, head.outputs[0]), head.outputs[0]), 1.0):
        return None
    mul = sole_reader(graph, add.outputs[0], "Mul")
    if mul is None:
        return None
    factor = other_input(mul, add.outputs[0])
    if factor is x:                                       # form A: (x · s) · 0.5
        half = sole_reader(graph, mul.outputs[0], "Mul")
        if half is None or \
                not _near(const_scalar(other_input(half, mul.outputs[0]), x), 0.5):
            return None
        return x, inner + [add, mul, half], half.outputs[0], approximate
    if _near(const_scalar(factor, add.outputs[0]), 0.5):  # form C: (0.5 · s) · x
        last = sole_reader(graph, mul.outputs[0], "Mul")
        if last is None or other_input(last, mul.outputs[0]) is not x:
            return None
        return x, inner + [add, mul, last], last.outputs[0], approximate
    pre = producer(factor, "Mul")                         # form B: (0.5 · x) · s
    if pre is None or sole_reader(graph, factor) is not mul or x not in pre.inputs or \
            not _near(const_scalar(other_input(pre, x), x), 0.5):
        return None
    return x, inner + [add, pre, mul], mul.outputs[0], approximate


def fuse_gelu(graph: Graph) -> int:
    fused = 0
    for head in [n for n in graph.nodes if n.op in ("Erf", "Tanh")]:
        if head not in graph.nodes:
            continue
        found = _match(graph, head)
        if found is None:
            continue
        x, nodes, y, approximate = found
        if any(v.dtype != x.dtype or tuple(v.shape) != tuple(x.shape)
               for v in (y, head.outputs[0])):
            continue   # a broadcast somewhere: not the element-wise GELU of x
        index = min(graph.nodes.index(n) for n in nodes)
        for n in nodes:
            graph.remove_node(n)
        attrs = {} if approximate == "none" else {"approximate": approximate}
        graph.add_node("Gelu", [x], [y], attrs, name=head.name, index=index)
        fused += 1
    if fused:
        graph.toposort()
        graph.dce()
    return fused
