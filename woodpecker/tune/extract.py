"""Extract tuning tasks from an optimised graph: one per distinct convolution, dense product or
pool (shapes, fused epilogue, dtype); identical layers share a task (Woodpecker-DL §3.1)."""

from __future__ import annotations

from dataclasses import dataclass, field

from woodpecker.engines.halide.templates import templates_for
from woodpecker.ir.graph import Graph
from woodpecker.tasks import Task, task_from_node


@dataclass
class TaskGroup:
    task: Task
    templates: tuple[str, ...]
    nodes: list[str] = field(default_factory=list)


def extract_tasks(graph: Graph) -> list[TaskGroup]:
    groups: dict[str, TaskGroup] = {}
    for node in graph.nodes:
        task = task_from_node(node)
        if task is None:
            continue
        templates = templates_for(task)
        if templates:
            groups.setdefault(task.key, TaskGroup(task, templates)).nodes.append(node.name)
    return list(groups.values())
