"""Extract tuning tasks from an optimised graph: one per distinct convolution, dense product or
pool (shapes, fused epilogue, dtype); identical layers share a task (Woodpecker-DL §3.1)."""

from __future__ import annotations

from dataclasses import dataclass, field

from woodpecker.engines.halide.templates import templates_for
from woodpecker.ir.graph import Graph, Node
from woodpecker.ops import INTENSIVE
from woodpecker.passes.unfuse import apart
from woodpecker.tasks import Task, task_from_node


@dataclass
class TaskGroup:
    task: Task
    templates: tuple[str, ...]
    nodes: list[str] = field(default_factory=list)


def extract_tasks(graph: Graph, parts: bool = False) -> list[TaskGroup]:
    """One group per distinct task, in the graph's order. `parts`: each intensive fusion's
    parts (ops.INTENSIVE) are tasks too, just before it (named as their nodes would be once
    unfused): tuning them lets selection weigh the fusion against them (selection/fusion.py),
    and AGO's Join starts the fused task from their schedules (tune/reformer.py)."""
    groups: dict[str, TaskGroup] = {}

    def add(node: Node) -> None:
        task = task_from_node(node)
        if task is None:
            return
        templates = templates_for(task)
        if templates:
            groups.setdefault(task.key, TaskGroup(task, templates)).nodes.append(node.name)

    for node in graph.nodes:
        if parts and node.op in INTENSIVE:
            for part in apart(node):
                add(part)
        add(node)
    return list(groups.values())
