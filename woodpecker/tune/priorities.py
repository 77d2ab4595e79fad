"""Where a model's tuning budget goes when it is split by the library (`--split library`,
issue 52: "budget where the win is"): each task's time on the library a tuned kernel competes
with, and how close a known kernel of it came, measured when tuning starts.

Contract:
- `library_times(graph, groups, threads)`: each task's node built on ONNX Runtime (the library
  a tuned kernel is timed against per node, selection/per_node.py) and timed on the task's
  seeded arguments in the node's own layout, all tasks interleaved over
  `config.LIBRARY_PROBE_RUNS` rounds; per task the median ms of one call times its nodes, or
  None where ONNX Runtime does not run the node or the probe fails.
- `library_weights(library_ms, best_ms, work)`: per task, its library time (a task
  without one: its roofline `work` in the library's units, scaled by the median ratio of the
  tasks that have both) times its promise — `LIBRARY_WON_WEIGHT` where its best known kernel
  (`best_ms`: the user's log or the shipped database, per call) already beats the library,
  `LIBRARY_HOPELESS_WEIGHT` where it is over `LIBRARY_REACH` times the library's, 1 otherwise
  or without one — and at least `MIN_SHARE` of the total, as the roofline split does.
- `deepest_first(weights)`: the order tasks are tuned in — the heaviest first, so a budget that
  runs out leaves the lightest tasks to the libraries, not the promising ones.
The driver (tune/driver.py) shares the time left among the tasks left by these weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from woodpecker.bench.timing import time_interleaved
from woodpecker.config import (
    LIBRARY_HOPELESS_WEIGHT,
    LIBRARY_PROBE_RUNS,
    LIBRARY_REACH,
    LIBRARY_WON_WEIGHT,
    MIN_SHARE,
)
from woodpecker.engines import names
from woodpecker.engines.base import BuildContext
from woodpecker.engines.registry import get_engine
from woodpecker.ir.graph import Graph
from woodpecker.tasks import library_inputs
from woodpecker.tune.extract import TaskGroup


def library_times(graph: Graph, groups: Sequence[TaskGroup], threads: int,
                  runs: int = LIBRARY_PROBE_RUNS) -> list[float | None]:
    """Per task, ONNX Runtime's ms for all its nodes (one node timed), or None."""
    engine = get_engine(names.ONNXRUNTIME)
    ctx = BuildContext(threads, graph.opset)
    by_name = {n.name: n for n in graph.nodes}
    calls = {}
    for i, g in enumerate(groups):
        node = by_name.get(g.nodes[0])
        try:
            if node is None or not engine.supports(node, ctx):
                continue
            kernel = engine.build(node, ctx)
            args = library_inputs(g.task, node, g.task.random_inputs(0))
            kernel(*args)                       # it runs at all
        except Exception:  # noqa: BLE001 - a node the probe cannot build: no estimate
            continue
        calls[str(i)] = (lambda k, a: lambda: k(*a))(kernel, args)
    if not calls:
        return [None] * len(groups)
    try:
        times = time_interleaved(calls, runs, 1)
    except Exception:  # noqa: BLE001 - a kernel that ran once but fails when timed: no estimates
        return [None] * len(groups)
    return [float(np.median(times[str(i)])) * len(g.nodes) if str(i) in times else None
            for i, g in enumerate(groups)]


def promise(best_ms: float | None, library_ms: float | None) -> float:
    """How much of its library time a task's search is worth (see the module)."""
    if best_ms is None or library_ms is None or library_ms <= 0:
        return 1.0
    ratio = best_ms / library_ms
    if ratio <= 1.0:
        return LIBRARY_WON_WEIGHT
    return LIBRARY_HOPELESS_WEIGHT if ratio > LIBRARY_REACH else 1.0


def library_weights(library_ms: Sequence[float | None], best_ms: Sequence[float | None],
                    work: Sequence[float]) -> list[float]:
    """Per task, its budget weight (see the module); `best_ms` and `library_ms` cover all of
    a task's nodes."""
    both = [lib / w for lib, w in zip(library_ms, work) if lib is not None and w > 0]
    scale = float(np.median(both)) if both else 1.0
    time_held = [lib if lib is not None else w * scale for lib, w in zip(library_ms, work)]
    weights = [t * promise(b, lib) for t, b, lib in zip(time_held, best_ms, library_ms)]
    floor = MIN_SHARE * sum(time_held)
    return [max(w, floor) for w in weights]


def deepest_first(weights: Sequence[float]) -> list[int]:
    """Task indices, heaviest weight first (ties in graph order)."""
    return sorted(range(len(weights)), key=lambda i: -weights[i])
