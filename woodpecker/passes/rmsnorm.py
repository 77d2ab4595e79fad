"""RMSNorm recognition: the ops T5 and Llama export for their root-mean-square layer norm,
x · (1 / sqrt(mean(x²) + ε)) · w, become one `RMSNormalization` node (ONNX opset 23's op), so
one generated row kernel (engines/halide/rows.py) reads the row once for its statistic and once
for the output, instead of seven element-wise and reduction nodes each passing over it.

Matched, from each ReduceMean over the last axis (keepdims): its input is x² (a Pow of 2 or
x · x); its result is read only by an Add of a constant scalar ε; that sum only by a Sqrt; the
root either by a Reciprocal read by a Mul with x, or by a Div of x by it; that product, when
its only reader is a Mul by a constant vector w of the last axis's length, takes w as the
scale (else the scale is ones). Every intermediate value has that one reader and is no graph
output; x is float32 with a static shape.
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.pattern import const_scalar, other_input, producer, sole_reader, static


def _square_of(graph: Graph, v: Value) -> tuple[Value, Node] | None:
    """(x, node) when `v`, read once, is x² by a Pow of 2 or x · x."""
    node = producer(v, "Pow", "Mul")
    if node is None or len(node.inputs) != 2 or sole_reader(graph, v) is None:
        return None
    a, b = node.inputs
    if node.op == "Mul":
        return (a, node) if a is b else None
    c = const_scalar(b, a)
    return (a, node) if c is not None and c == 2.0 else None


def _match(graph: Graph, mean: Node) -> tuple[Value, list[Node], Value, float, Value | None]:
    """(x, the pattern's nodes, its output, ε, the weight or None); raises LookupError."""
    found = _square_of(graph, mean.inputs[0])
    if found is None:
        raise LookupError
    x, square = found
    rank = len(x.shape) if static(x) else 0
    if not rank or x.dtype != np.float32 or mean.attrs.get("_axes") != [rank - 1] or \
            not mean.attrs.get("keepdims", 1):
        raise LookupError
    add = sole_reader(graph, mean.outputs[0], "Add")
    eps = None if add is None else const_scalar(other_input(add, mean.outputs[0]), mean.outputs[0])
    root = None if add is None else sole_reader(graph, add.outputs[0], "Sqrt")
    if eps is None or eps < 0 or root is None:
        raise LookupError
    nodes = [square, mean, add, root]
    last = sole_reader(graph, root.outputs[0], "Reciprocal", "Div")
    if last is not None and last.op == "Reciprocal":
        nodes.append(last)
        last = sole_reader(graph, last.outputs[0], "Mul")
        if last is None or other_input(last, nodes[-1].outputs[0]) is not x:
            raise LookupError
    elif last is None or list(last.inputs) != [x, root.outputs[0]]:
        raise LookupError
    nodes.append(last)
    weight, y = None, last.outputs[0]
    scale = sole_reader(graph, y, "Mul")
    w = None if scale is None else other_input(scale, y)
    if w is not None and w.is_const and w.dtype == x.dtype and \
            tuple(w.shape)[-1:] == (x.shape[-1],) and int(np.prod(w.shape)) == x.shape[-1] and \
            tuple(scale.outputs[0].shape) == tuple(x.shape):
        nodes.append(scale)
        weight, y = w, scale.outputs[0]
    if tuple(y.shape) != tuple(x.shape) or y.dtype != x.dtype:
        raise LookupError
    return x, nodes, y, eps, weight


def fuse_rmsnorm(graph: Graph) -> int:
    fused = 0
    for mean in [n for n in graph.nodes if n.op == "ReduceMean"]:
        if mean not in graph.nodes:
            continue
        try:
            x, nodes, y, eps, weight = _match(graph, mean)
        except LookupError:
            continue
        width = x.shape[-1]
        scale = graph.const(np.ones(width, x.dtype) if weight is None
                            else np.ascontiguousarray(weight.data).reshape(width), "rms.scale")
        index = min(graph.nodes.index(n) for n in nodes)
        for n in nodes:
            graph.remove_node(n)
        graph.add_node("RMSNormalization", [x, scale], [y],
                       {"axis": -1, "epsilon": eps}, name=mean.name, index=index)
        fused += 1
    if fused:
        graph.toposort()
        graph.dce()
    return fused
