"""Pattern-matching helpers for rewrites: who produces a value, whether a value can be
absorbed into its single reader (no other reader, not a graph output), constant scalars and
static shapes; and the Reshape node rewrites insert."""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Graph, Node, Value


def producer(v: Value | None, *ops: str) -> Node | None:
    """The node producing `v`, if its op is one of `ops` (any op when none given)."""
    if v is None or v.producer is None:
        return None
    return v.producer if not ops or v.producer.op in ops else None


def sole_reader(graph: Graph, v: Value, *ops: str) -> Node | None:
    """The only node reading `v`, when `v` is private to that edge (fusable) and, when `ops`
    are given, that node's op is one of them."""
    if len(v.consumers) != 1 or graph.is_output(v):
        return None
    reader = v.consumers[0]
    return reader if not ops or reader.op in ops else None


def other_input(node: Node, v: Value) -> Value | None:
    """The input of a two-input `node` that is not `v` (None unless `v` is exactly one)."""
    a, b = node.inputs
    return b if a is v and b is not v else a if b is v and a is not v else None


def const_inputs(node: Node, *positions: int) -> bool:
    """True when every given input position is absent or a compile-time constant."""
    return all(node.input(i) is None or node.inputs[i].is_const for i in positions)


def static(v: Value | None) -> bool:
    """`v`'s shape is known in every dimension."""
    return v is not None and v.shape is not None and all(isinstance(d, int) for d in v.shape)


def const_scalar(v: Value | None, like: Value) -> float | None:
    """The value of `v` when it is a one-element constant of `like`'s dtype that broadcasts
    onto `like` without growing its rank, else None."""
    if v is None or v is like or not v.is_const or v.data.size != 1 or v.dtype != like.dtype \
            or len(v.shape) > len(like.shape):
        return None
    return float(v.data.reshape(-1)[0])


def add_reshape(graph: Graph, x: Value, out: Value, name: str, index: int) -> Node:
    """A Reshape of `x` to `out`'s (static) shape writing `out`, inserted at `index`."""
    shape = graph.const(np.array(out.shape, np.int64), "shape")
    return graph.add_node("Reshape", [x, shape], [out], {"_shape": list(out.shape)}, name=name,
                          index=index)
