"""Undo one composite node (ops.registry.PARTS: a conv chain, attention): the node is replaced,
where it stood, by the nodes it stands for, reading its inputs and writing its output, the
values between them new. Selection does it where the parts on their own kernels are faster
(selection/fusion.py)."""

from __future__ import annotations

from woodpecker.ir.graph import Graph, Node
from woodpecker.ops.registry import PARTS


def unfuse(graph: Graph, node: Node) -> list[Node]:
    """Replace `node` by its parts in `graph`; returns them, in order."""
    parts = PARTS[node.op](node)
    index = graph.nodes.index(node)
    graph.remove_node(node)
    return [graph.add_node(p.op, p.inputs, p.outputs, p.attrs, p.name, index + k)
            for k, p in enumerate(parts)]
