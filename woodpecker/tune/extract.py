"""Extract tuning tasks from an optimised graph: one per distinct convolution (shapes, fused
epilogue, dtype); identical layers share a task (Woodpecker-DL §3.1)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from woodpecker.ir.graph import Graph
from woodpecker.tune.task import ConvTask

# Every template that supports a task is tuned for it; the fastest measured config wins
# (Woodpecker-DL §2.2: several schedule templates per operator).
TEMPLATES = ("woodpecker.engines.halide.conv_direct", "woodpecker.engines.halide.conv_gemm",
             "woodpecker.engines.halide.conv_depthwise")


@dataclass
class TaskGroup:
    task: ConvTask
    templates: tuple[str, ...]
    nodes: list[str] = field(default_factory=list)


def template_module(name: str):
    return importlib.import_module(name)


def extract_tasks(graph: Graph) -> list[TaskGroup]:
    groups: dict[str, TaskGroup] = {}
    for node in graph.nodes:
        if node.op not in ("Conv", "FusedConv") or len(node.inputs[0].shape) != 4:
            continue
        task = ConvTask.from_node(node)
        templates = tuple(t for t in TEMPLATES if template_module(t).supports(task))
        if templates:
            groups.setdefault(task.key, TaskGroup(task, templates)).nodes.append(node.name)
    return list(groups.values())


def parse_budget(text: str) -> float:
    """Seconds from `90`, `90s`, `15m` or `1h`."""
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip().lower()
    try:
        return float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise ValueError(f"bad budget {text!r}: use e.g. 90s, 15m, 1h") from None
