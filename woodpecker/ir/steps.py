"""Execution steps over a graph: a step is a run of consecutive nodes built as one kernel (one
node, or a library region: runtime/steps.py), and `step_io` says what it reads from outside
and what it writes — for the engines that build a step and the runtime that runs it.

Contract: pure functions of the graph; nothing here runs anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from woodpecker.ir.graph import Graph, Node, Value, runtime_positions


@dataclass(frozen=True)
class StepIO:
    """One execution step: its consecutive nodes, the values it reads from outside and the
    values it writes (`step_io`)."""

    nodes: list[Node]
    inputs: list[Value]
    outputs: list[Value]


def step_io(nodes: Sequence[Node], graph: Graph,
            every: bool = False) -> tuple[list[Value], list[Value]]:
    """The values a step of consecutive `nodes` reads from outside (runtime inputs, each once,
    in first-use order) and the values it produces that anything outside it reads (graph
    outputs included) — with `every`, all the values it produces (a region whose activations
    all live in the arena, runtime/steps.py). A single node's are its runtime inputs and all
    its outputs."""
    if len(nodes) == 1:
        node = nodes[0]
        return [node.inputs[p] for p in runtime_positions(node)], list(node.outputs)
    inside = {id(n) for n in nodes}
    produced = {v.name for n in nodes for v in n.outputs}
    ins = list({v.name: v for n in nodes for p in runtime_positions(n)
                for v in [n.inputs[p]] if v.name not in produced}.values())
    graph_outputs = {id(v) for v in graph.outputs}
    outs = [v for n in nodes for v in n.outputs
            if every or id(v) in graph_outputs or any(id(c) not in inside for c in v.consumers)]
    return ins, outs
