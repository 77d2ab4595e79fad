"""Dead-code elimination: drop nodes whose outputs reach no graph output."""

from __future__ import annotations

from woodpecker.ir.graph import Graph


def eliminate_dead_code(graph: Graph) -> int:
    return graph.dce()
