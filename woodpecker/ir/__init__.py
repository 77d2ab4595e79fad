"""The one IR every stage reads: a `Graph` of `Node`s connected by `Value`s."""

from woodpecker.ir.graph import Graph, Node, Value

__all__ = ["Graph", "Node", "Value"]
