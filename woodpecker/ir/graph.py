"""Graph, Node and Value: the single intermediate representation.

Shapes are static (a model with dynamic dimensions is specialised at import). A `Value` with
`data` set is a constant (an initializer or a folded result). Nodes are kept in a topological
order; rewrites call `Graph.toposort()` when they may have broken it.
"""

from __future__ import annotations

import copy
import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# A dimension only the data decides (a library-first plan's output after NonMaxSuppression):
# only a plan without an arena holds such a value, its library allocating it each run.
DYNAMIC = -1


@dataclass(eq=False)
class Value:
    """A tensor edge: produced by at most one node, read by any number of nodes."""

    name: str
    shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None
    layout: str = ""
    producer: "Node | None" = None
    consumers: list["Node"] = field(default_factory=list)
    data: np.ndarray | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None

    def __repr__(self) -> str:
        kind = "const " if self.is_const else ""
        return f"Value({kind}{self.name!r}, {self.shape}, {self.dtype})"


@dataclass(eq=False)
class Node:
    """One operation. `inputs` may hold None for an omitted optional ONNX input."""

    op: str
    name: str
    inputs: list[Value | None]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def __repr__(self) -> str:
        ins = ", ".join(v.name if v is not None else "-" for v in self.inputs)
        outs = ", ".join(v.name for v in self.outputs)
        return f"Node({self.op} {self.name!r}: {ins} -> {outs})"


class Graph:
    """Nodes in topological order, the values they connect, and the graph's inputs/outputs."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.opset = 17
        self.nodes: list[Node] = []
        self.values: dict[str, Value] = {}
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        # the user's ONNX model the graph was imported from (frontend/onnx_import.py), while
        # compiling: library regions run its nodes (engines/onnx_step.py); None once loaded
        self.source: Any = None
        self._counter = itertools.count()

    # -- construction -------------------------------------------------------------------------
    def value(self, name: str, shape=None, dtype=None, data=None) -> Value:
        """Return the value called `name`, creating it if needed."""
        v = self.values.get(name)
        if v is None:
            v = Value(name, tuple(shape) if shape is not None else None,
                      np.dtype(dtype) if dtype is not None else None, data=data)
            self.values[name] = v
        return v

    def const(self, data: np.ndarray, hint: str = "const") -> Value:
        """A new constant value holding `data`."""
        data = np.asarray(data)
        return self.value(self.fresh_name(hint), data.shape, data.dtype, data)

    def fresh_name(self, hint: str) -> str:
        while True:
            name = f"{hint}__wp{next(self._counter)}"
            if name not in self.values:
                return name

    def add_node(self, op: str, inputs: Iterable[Value | None], outputs: Iterable[Value],
                 attrs: dict[str, Any] | None = None, name: str | None = None,
                 index: int | None = None) -> Node:
        node = Node(op, name or self.fresh_name(op), list(inputs), list(outputs), dict(attrs or {}))
        for v in node.inputs:
            if v is not None:
                v.consumers.append(node)
        for v in node.outputs:
            v.producer = node
        if index is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(index, node)
        return node

    def remove_node(self, node: Node) -> None:
        for v in node.inputs:
            if v is not None and node in v.consumers:
                v.consumers.remove(node)
        for v in node.outputs:
            if v.producer is node:
                v.producer = None
        self.nodes.remove(node)

    def set_input(self, node: Node, i: int, value: Value | None) -> None:
        old = node.inputs[i]
        if old is not None and node in old.consumers:
            old.consumers.remove(node)
        node.inputs[i] = value
        if value is not None:
            value.consumers.append(node)

    def replace_uses(self, old: Value, new: Value) -> None:
        """Make every reader of `old` (nodes and graph outputs) read `new` instead."""
        for node in list(old.consumers):
            for i, v in enumerate(node.inputs):
                if v is old:
                    self.set_input(node, i, new)
        self.outputs = [new if v is old else v for v in self.outputs]

    def bypass(self, node: Node, keep: Value, drop: Value) -> None:
        """Remove `node`, whose output `drop` equals its input `keep`, rewiring readers.

        Graph outputs keep their names: when `drop` is a graph output, `keep`'s producer writes
        `drop` directly instead (callers check that this is possible with `can_bypass`)."""
        self.remove_node(node)
        if self.is_output(drop):
            producer = keep.producer
            assert producer is not None
            producer.outputs[producer.outputs.index(keep)] = drop
            drop.producer = producer
            keep.producer = None
            for c in list(keep.consumers):
                for i, v in enumerate(c.inputs):
                    if v is keep:
                        self.set_input(c, i, drop)
        else:
            self.replace_uses(drop, keep)

    def can_bypass(self, keep: Value, drop: Value) -> bool:
        if not self.is_output(drop):
            return True
        return (keep.producer is not None and not self.is_output(keep) and keep.data is None)

    # -- queries --------------------------------------------------------------------------------
    def is_output(self, v: Value) -> bool:
        return any(o is v for o in self.outputs)

    def constants(self) -> list[Value]:
        """Constant values read by some node (the weights a plan must store)."""
        seen: dict[str, Value] = {}
        for node in self.nodes:
            for v in node.inputs:
                if v is not None and v.is_const:
                    seen[v.name] = v
        for v in self.outputs:
            if v.is_const:
                seen[v.name] = v
        return list(seen.values())

    def copy(self) -> "Graph":
        """A structural copy (new nodes and values) sharing the constant arrays, so a rewrite
        can be tried and thrown away."""
        g = Graph(self.name)
        g.opset, g.source = self.opset, self.source
        vmap = {}
        for name, v in self.values.items():
            vmap[id(v)] = g.values[name] = Value(v.name, v.shape, v.dtype, v.layout, data=v.data)
        get = lambda v: None if v is None else vmap[id(v)]  # noqa: E731
        for n in self.nodes:
            g.add_node(n.op, [get(v) for v in n.inputs], [get(v) for v in n.outputs],
                       copy.deepcopy(n.attrs), n.name)
        g.inputs = [get(v) for v in self.inputs]
        g.outputs = [get(v) for v in self.outputs]
        return g

    # -- maintenance ----------------------------------------------------------------------------
    def toposort(self) -> None:
        """Reorder nodes topologically (Kahn), keeping the current order among ready nodes."""
        position = {id(n): i for i, n in enumerate(self.nodes)}
        indegree = {}
        for n in self.nodes:
            indegree[id(n)] = len({id(v.producer) for v in n.inputs
                                   if v is not None and v.producer is not None})
        ready = [(position[id(n)], n) for n in self.nodes if indegree[id(n)] == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            _, n = heapq.heappop(ready)
            order.append(n)
            done = set()
            for v in n.outputs:
                for c in v.consumers:
                    if id(c) in done:
                        continue
                    done.add(id(c))
                    indegree[id(c)] -= 1
                    if indegree[id(c)] == 0:
                        heapq.heappush(ready, (position[id(c)], c))
        if len(order) != len(self.nodes):
            raise ValueError(f"graph {self.name!r} has a cycle")
        self.nodes = order

    def dce(self) -> int:
        """Remove nodes none of whose outputs reach a graph output; return how many."""
        live: set[int] = set()
        stack = [v.producer for v in self.outputs if v.producer is not None]
        while stack:
            n = stack.pop()
            if id(n) in live:
                continue
            live.add(id(n))
            stack.extend(v.producer for v in n.inputs if v is not None and v.producer is not None)
        dead = [n for n in self.nodes if id(n) not in live]
        for n in dead:
            self.remove_node(n)
        keep = {v.name for v in self.inputs} | {v.name for v in self.outputs}
        for n in self.nodes:
            keep.update(v.name for v in n.inputs if v is not None)
            keep.update(v.name for v in n.outputs)
        self.values = {k: v for k, v in self.values.items() if k in keep}
        return len(dead)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.nodes)} nodes)"


def runtime_positions(node: Node) -> list[int]:
    """Positions of the inputs that arrive at run time (present and not constant)."""
    return [i for i, v in enumerate(node.inputs) if v is not None and v.data is None]
