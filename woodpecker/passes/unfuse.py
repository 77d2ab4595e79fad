"""Undo one composite node (ops.registry.PARTS: a conv chain, attention): the node is replaced,
where it stood, by the nodes it runs as when not fused (`apart`), reading its inputs and
writing its output, the values between them new. Selection does it where those nodes on their
own kernels are faster (selection/fusion.py); tuning tunes them beforehand (tune/extract.py).

`apart(node)` is the node's parts as the default pipeline would leave them: a conv chain's
depthwise conv and the 1×1 conv reading it become one FusedSeparableConv again
(passes/fuse_separable.py, same conditions), so an unfused inverted residual block is the
default plan's two kernels, not three.
"""

from __future__ import annotations

from woodpecker.ir.graph import Graph, Node
from woodpecker.ops import chain
from woodpecker.ops.registry import PARTS
from woodpecker.passes.fuse_separable import fuse_separable


def apart(node: Node) -> list[Node]:
    """The nodes `node` stands for, unattached to any graph (the values between them new)."""
    parts = PARTS[node.op](node)
    if node.op != chain.OP:
        return list(parts)
    g = Graph("apart")
    for p in parts:
        g.add_node(p.op, p.inputs, p.outputs, p.attrs, p.name)
    g.outputs = list(node.outputs)
    fuse_separable(g)
    nodes = list(g.nodes)
    for p in nodes:       # unattached again: no value lists them as its reader
        g.remove_node(p)
    for v in node.outputs:
        v.producer = node
    return nodes


def unfuse(graph: Graph, node: Node) -> list[Node]:
    """Replace `node` by `apart(node)` in `graph`; returns the new nodes, in order."""
    parts = apart(node)
    index = graph.nodes.index(node)
    graph.remove_node(node)
    for p in parts:
        for v in [*p.inputs, *p.outputs]:
            if v is not None and v.name not in graph.values:
                graph.values[v.name] = v     # the values between the parts
    return [graph.add_node(p.op, p.inputs, p.outputs, p.attrs, p.name, index + k)
            for k, p in enumerate(parts)]
