"""DOS over a plan's steps ("DOS: Accelerate DNN Inference by Inter-Operator Parallelism",
§3-4): the step graph, its critical path, and the greedy and the optimal schedules of the steps
within the plan's threads, given their costs.

Contract: steps are numbered in plan order and edges go forward (producer step, reader step;
`step_edges`). The costs are a `StepCosts`: each step's time alone, whether it may run beside
others (`candidate`), the measured ratio of a stage's time together to its time in turn, and
the stage cost of DOS §4.1 (`schedule/dos.StageCost`) — selection/parallel.StageTimer measures
them on the plan's bound kernels. `dos_schedule` runs Algorithm 1 (`schedule/dos.py`) per
block of consecutive steps (DOS §4.2) with stages of at most `threads` members and splits a
stage found no faster together back into its members; `greedy_schedule` is DOS's greedy
baseline; `critical_path` bounds what any schedule of these kernels can reach;
`contiguous_schedule` is the least-cost schedule whose stages are runs of consecutive steps
(GPU plans, whose arena holds the steps in turn).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from woodpecker.ir.graph import Graph
from woodpecker.schedule.dos import Schedule, Stage, optimal_in_blocks

INF = float("inf")


class StepCosts(Protocol):
    """What the schedulers know of the steps (selection/parallel.StageTimer measures it)."""

    threads: int
    alone: Sequence[float]      # each step's ms alone

    def candidate(self, s: int) -> bool:
        """Step `s` may run beside others."""
        ...

    def ratio(self, stage: frozenset) -> float:
        """Time together over time in turn of `stage` (inf: they cannot run together)."""
        ...

    def __call__(self, stage: frozenset) -> tuple[float, str]:
        """DOS's stage cost and strategy of `stage`."""
        ...


def stage_cost(costs: StepCosts, stage: frozenset, margin: float) -> tuple[float, str]:
    """DOS §4.1 on measured steps: a stage of one step costs its time alone; a stage of at most
    `threads` candidates costs the sum of their times scaled by their measured ratio where that
    is under 1 − `margin` ("concurrent"), else the sum ("sequential": split again); any other
    stage is impossible (inf)."""
    apart = sum(costs.alone[s] for s in stage)
    if len(stage) == 1:
        return apart, "sequential"
    if len(stage) > costs.threads or not all(costs.candidate(s) for s in stage):
        return INF, "impossible"
    r = costs.ratio(stage)
    return (apart * r, "concurrent") if r < 1 - margin else (apart, "sequential")


def step_edges(graph: Graph, steps: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """(producer step, reader step) for every value one step makes and another reads."""
    owner = {}
    for s, idx in enumerate(steps):
        for i in idx:
            for v in graph.nodes[i].outputs:
                owner[v.name] = s
    edges = set()
    for s, idx in enumerate(steps):
        for i in idx:
            for v in graph.nodes[i].inputs:
                if v is not None and owner.get(v.name, s) != s:
                    edges.add((owner[v.name], s))
    return sorted(edges)


def critical_path(n: int, edges: Sequence[tuple[int, int]],
                  ms: Sequence[float]) -> tuple[float, list[int]]:
    """The longest path through the steps (edges go forward in step order) by step times:
    no schedule on any number of cores runs faster than it (with these kernels)."""
    best = list(ms)
    back: list[int | None] = [None] * n
    preds: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        preds[v].append(u)
    for v in range(n):
        for u in preds[v]:
            if best[u] + ms[v] > best[v]:
                best[v], back[v] = best[u] + ms[v], u
    end = max(range(n), key=best.__getitem__)
    path = [end]
    while back[path[-1]] is not None:
        path.append(back[path[-1]])
    return best[end], path[::-1]


def greedy_schedule(n: int, edges: Sequence[tuple[int, int]], cost: StepCosts) -> Schedule:
    """DOS's greedy baseline within the plan's threads: repeatedly, the first ready steps that
    can run side by side (as many as there are threads) run together, whatever that costs, and
    every other ready step alone."""
    preds: list[set[int]] = [set() for _ in range(n)]
    for u, v in edges:
        preds[v].add(u)
    done: set[int] = set()
    stages: list[Stage] = []
    while len(done) < n:
        ready = [s for s in range(n) if s not in done and preds[s] <= done]
        together = [s for s in ready if cost.candidate(s)][:cost.threads]
        if len(together) > 1:
            members = frozenset(together)
            r = cost.ratio(members)
            apart = sum(cost.alone[s] for s in members)
            stages.append(Stage(members, "concurrent", apart * r if r < INF else apart))
        for s in ready:
            if len(together) < 2 or s not in together:
                stages.append(Stage(frozenset([s]), "sequential", cost.alone[s]))
        done.update(ready)
    return Schedule(tuple(stages))


def contiguous_schedule(n: int, edges: Sequence[tuple[int, int]], cost: StepCosts) -> Schedule:
    """DOS's least-cost schedule among those whose stages are runs of consecutive steps in
    plan order (at most `cost.threads` steps, none reading another's output): the steps keep
    their order, so an arena planned for them in turn stays valid (GPU plans,
    runtime/gpu_stages.py) — any reordering could overwrite a value still to be read.
    Dynamic programming over prefixes: best[j] = min over i of best[i] + cost(steps i..j-1),
    a stage found no faster together split back into its members."""
    linked = set(edges)
    best: list[tuple[float, int]] = [(0.0, 0)] + [(INF, 0)] * n
    for j in range(1, n + 1):
        for i in range(j - 1, max(j - cost.threads, 0) - 1, -1):
            members = frozenset(range(i, j))
            if i < j - 1 and any((u, v) in linked for u in members for v in members):
                break            # a longer run holds the same dependent pair
            c, _ = cost(members) if i < j - 1 else (cost.alone[i], "sequential")
            if best[i][0] + c < best[j][0]:
                best[j] = (best[i][0] + c, i)
    stages: list[Stage] = []
    j = n
    while j > 0:
        i = best[j][1]
        members = frozenset(range(i, j))
        if len(members) > 1 and cost(members)[1] == "concurrent":
            stages.append(Stage(members, "concurrent", cost(members)[0]))
        else:
            stages.extend(Stage(frozenset([s]), "sequential", cost.alone[s])
                          for s in sorted(members, reverse=True))
        j = i
    return Schedule(tuple(reversed(stages)))


def dos_schedule(n: int, edges: Sequence[tuple[int, int]], cost: StepCosts,
                 block: int) -> Schedule:
    """DOS Algorithm 1 per block of `block` consecutive steps, stages of at most the plan's
    threads; a stage found no faster together is split back into its members."""
    stages: list[Stage] = []
    for stage in optimal_in_blocks(range(n), edges, cost, block, cost.threads).stages:
        if stage.strategy == "concurrent":
            stages.append(stage)
        else:
            stages.extend(Stage(frozenset([s]), "sequential", cost.alone[s])
                          for s in sorted(stage.nodes))
    return Schedule(tuple(stages))
