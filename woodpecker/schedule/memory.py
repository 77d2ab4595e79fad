"""Memory-aware scheduling of a Graph (SERENITY, thesis ch. 3): rewrite concats where the
optimal peak goes down, then put the nodes in the DP's least-peak order.

Rewrites are chosen greedily: each candidate (passes/split_concat.candidates) is tried on a copy
and kept when it lowers the scheduled peak, or keeps the peak and lowers the sum of the parts'
peaks (the peak of another part may hide a local gain); rounds repeat until none is kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from woodpecker.errors import WoodpeckerError
from woodpecker.ir.graph import Graph
from woodpecker.passes.split_concat import candidates, split_concat
from woodpecker.schedule.memory_dp import NoSolution, ScheduleReport, dp_schedule, memory_schedule
from woodpecker.schedule.problem import MemoryProblem, graph_problem


class MemoryBudgetError(WoodpeckerError):
    """No execution order fits the memory budget."""


@dataclass
class MemoryResult:
    peak: int
    report: ScheduleReport
    rewrites: int = 0
    seconds: float = 0.0
    tried: list[dict] = field(default_factory=list)


def _score(report: ScheduleReport) -> tuple[int, int]:
    return report.peak, sum(p.peak for p in report.parts)


def _schedule(graph: Graph, **kw) -> tuple[MemoryProblem, list[int], ScheduleReport]:
    p = graph_problem(graph)
    order, report = memory_schedule(p, **kw)
    return p, order, report


def apply_order(graph: Graph, order: list[int]) -> None:
    graph.nodes = [graph.nodes[i] for i in order]


def schedule_memory(graph: Graph, rewrite: bool = True, budget: int | None = None,
                    divide: bool = True, soft_budget: bool = True) -> MemoryResult:
    """Rewrite (optionally) and reorder `graph` in place for the least peak of activations.
    With `budget` (bytes), MemoryBudgetError when no order fits."""
    start = time.monotonic()
    kw = {"divide": divide, "soft_budget": soft_budget}
    _, order, report = _schedule(graph, **kw)
    rewrites, tried = 0, []
    while rewrite:
        kept = False
        for concat in candidates(graph):
            trial = graph.copy()
            split_concat(trial, next(n for n in trial.nodes if n.name == concat.name))
            _, t_order, t_report = _schedule(trial, **kw)
            better = _score(t_report) < _score(report)
            tried.append({"concat": concat.name, "peak_before": report.peak,
                          "peak_after": t_report.peak, "kept": better})
            if better:
                split_concat(graph, concat)
                order, report = t_order, t_report
                rewrites += 1
                kept = True
        if not kept:
            break
    if budget is not None and report.peak > budget:
        try:
            p = graph_problem(graph)
            order, peak, _ = dp_schedule(p, budget=budget) if not report.optimal else ([], 0, 0)
            if not order:
                raise NoSolution
            report.peak = peak
        except NoSolution:
            raise MemoryBudgetError(
                f"no execution order fits the memory budget of {format_bytes(budget)}: the "
                f"least peak of activations is {format_bytes(report.peak)}") from None
    apply_order(graph, order)
    return MemoryResult(report.peak, report, rewrites, time.monotonic() - start, tried)


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def parse_bytes(text: str) -> int:
    """'256KiB', '1.5MiB', '300kB', '1000' → bytes."""
    units = {"": 1, "b": 1, "kb": 1000, "kib": 1024, "k": 1024, "mb": 10**6, "mib": 1 << 20,
             "m": 1 << 20, "gb": 10**9, "gib": 1 << 30, "g": 1 << 30}
    s = text.strip().lower().replace(" ", "")
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num):]
    try:
        value = float(num)
    except ValueError:
        value = -1.0
    if unit not in units or value < 0:
        raise WoodpeckerError(f"cannot read memory size {text!r}; use e.g. 256KiB, 1.5MiB")
    return int(value * units[unit])


def order_peaks(graph: Graph) -> dict[str, dict]:
    """Peak activation bytes (and the bytes live at each step) for the orders `inspect
    --memory` compares: the file's order, Kahn's, the DP's, and the DP's after rewriting.
    `graph` is left untouched."""
    p = graph_problem(graph)
    out = {}
    for name, order in (("onnx", list(range(p.n))), ("kahn", p.kahn())):
        peak, timeline = p.simulate(order)
        out[name] = {"peak_bytes": peak, "timeline": timeline, "nodes": p.n}
    for name, rewrite in (("dp", False), ("dp_rewrite", True)):
        g = graph.copy()
        result = schedule_memory(g, rewrite=rewrite)
        q = graph_problem(g)
        peak, timeline = q.simulate(list(range(q.n)))
        out[name] = {"peak_bytes": peak, "timeline": timeline, "nodes": q.n,
                     "optimal": result.report.optimal, "seconds": round(result.seconds, 3),
                     "rewrites": result.rewrites, "graph": g}
    return out
