"""Pattern-matching helpers for rewrites: who produces a value, and whether a value can be
absorbed into its single reader (no other reader, not a graph output)."""

from __future__ import annotations

from woodpecker.ir.graph import Graph, Node, Value


def producer(v: Value | None, *ops: str) -> Node | None:
    """The node producing `v`, if its op is one of `ops` (any op when none given)."""
    if v is None or v.producer is None:
        return None
    return v.producer if not ops or v.producer.op in ops else None


def sole_reader(graph: Graph, v: Value) -> Node | None:
    """The only node reading `v`, when `v` is private to that edge (fusable)."""
    if len(v.consumers) != 1 or graph.is_output(v):
        return None
    return v.consumers[0]


def const_inputs(node: Node, *positions: int) -> bool:
    """True when every given input position is absent or a compile-time constant."""
    return all(node.input(i) is None or node.inputs[i].is_const for i in positions)
