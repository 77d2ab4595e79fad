"""Memory-aware scheduling of a Graph (SERENITY, thesis ch. 3): rewrite concats where the
optimal peak goes down, then put the nodes in the DP's least-peak order.

Rewrites are chosen greedily: each candidate (passes/split_concat.candidates) is tried on a copy
and kept when it lowers the scheduled peak, or keeps the peak and lowers the sum of the parts'
peaks (the peak of another part may hide a local gain); rounds repeat until none is kept.

Then (`fuse`) the separable pairs the rewriting left — a depthwise conv read only by a 1×1 conv,
often one part's depthwise conv and its partial 1×1 conv — become one node (passes/
fuse_separable.py): the fast kernel of the speed pipeline, whose depthwise result never exists
whole. A fused node keeps the depthwise conv's input alive until the 1×1 conv runs, so the
fusion is kept only where the scheduled peak does not rise: all pairs at once, else pair by
pair.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from woodpecker.errors import WoodpeckerError
from woodpecker.ir.graph import Graph
from woodpecker.passes.fuse_separable import fuse_pair, separable_reader
from woodpecker.passes.split_concat import candidates, split_concat
from woodpecker.schedule.memory_dp import NoSolution, ScheduleReport, memory_schedule
from woodpecker.schedule.problem import graph_problem


class MemoryBudgetError(WoodpeckerError):
    """No execution order fits the memory budget."""


@dataclass
class MemoryResult:
    peak: int
    report: ScheduleReport
    rewrites: int = 0
    fused: int = 0
    seconds: float = 0.0
    tried: list[dict] = field(default_factory=list)


def _score(report: ScheduleReport) -> tuple[int, int]:
    return report.peak, sum(p.peak for p in report.parts)


def _schedule(graph: Graph, **kw) -> tuple[list[int], ScheduleReport]:
    return memory_schedule(graph_problem(graph), **kw)


def apply_order(graph: Graph, order: list[int]) -> None:
    graph.nodes = [graph.nodes[i] for i in order]


def _pairs(graph: Graph) -> list[str]:
    return [n.name for n in graph.nodes if separable_reader(graph, n) is not None]


def _fuse(graph: Graph, report: ScheduleReport, kw: dict):
    """Fuse the separable pairs that leave the scheduled peak where it is; returns the pairs
    fused, the order and the report of the graph so fused (None: nothing fused)."""
    names = _pairs(graph)
    trial = graph.copy()
    for name in names:
        fuse_pair(trial, name)
    t_order, t_report = _schedule(trial, **kw)
    if t_report.peak <= report.peak:
        for name in names:
            fuse_pair(graph, name)
        return len(names), t_order, t_report
    fused, best = 0, None
    for name in names:
        trial = graph.copy()
        fuse_pair(trial, name)
        t_order, t_report = _schedule(trial, **kw)
        if t_report.peak <= report.peak:
            fuse_pair(graph, name)
            fused, best = fused + 1, (t_order, t_report)
    return (fused, *best) if best is not None else (0, None, None)


def schedule_memory(graph: Graph, rewrite: bool = True, budget: int | None = None,
                    divide: bool = True, soft_budget: bool = True,
                    fuse: bool = False) -> MemoryResult:
    """Rewrite (optionally) and reorder `graph` in place for the least peak of activations;
    with `fuse`, then fuse the separable pairs that keep that peak. With `budget` (bytes),
    MemoryBudgetError when no order fits."""
    start = time.monotonic()
    kw = {"divide": divide, "soft_budget": soft_budget}
    order, report = _schedule(graph, **kw)
    rewrites, tried = 0, []
    while rewrite:
        kept = False
        for concat in candidates(graph):
            trial = graph.copy()
            split_concat(trial, next(n for n in trial.nodes if n.name == concat.name))
            t_order, t_report = _schedule(trial, **kw)
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
    fused = 0
    if fuse and _pairs(graph):
        fused, f_order, f_report = _fuse(graph, report, kw)
        if fused:
            order, report = f_order, f_report
    if budget is not None and report.peak > budget:
        try:   # settles parts not proven optimal with the exact DP pruned at the budget
            order, report = _schedule(graph, budget=budget, **kw)
        except NoSolution:
            raise MemoryBudgetError(
                f"no execution order fits the memory budget of {format_bytes(budget)}: the "
                f"least peak of activations is {format_bytes(report.peak)}") from None
    apply_order(graph, order)
    return MemoryResult(report.peak, report, rewrites, fused, time.monotonic() - start, tried)


def format_bytes(n: float) -> str:
    if abs(n) < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"


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
