"""DOS over a plan's steps (schedule/dos_steps.py), on random step graphs with a given cost
table: the critical path is the longest path by brute force; DOS's schedule is valid, keeps
stages within the threads and of candidate steps only, splits a stage that is no faster
together, and never costs more than the greedy baseline or the steps in turn."""

from __future__ import annotations

import random
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.schedule.dos_steps import (
    critical_path,
    dos_schedule,
    greedy_schedule,
    stage_cost,
)

INF = float("inf")


class Table:
    """A `StepCosts` from a seed: random times, some steps not candidates, a random
    together/in-turn ratio per stage."""

    def __init__(self, n: int, seed: int, threads: int) -> None:
        rng = random.Random(seed)
        self.threads = threads
        self.alone = [rng.uniform(0.1, 5.0) for _ in range(n)]
        self._candidate = [rng.random() < 0.8 for _ in range(n)]
        self.seed = seed

    def candidate(self, s: int) -> bool:
        return self._candidate[s]

    @cache  # noqa: B019 - one table per test case
    def ratio(self, stage: frozenset) -> float:
        return random.Random(hash((self.seed, tuple(sorted(stage)))) & 0xFFFF).uniform(0.5, 1.3)

    def __call__(self, stage: frozenset) -> tuple[float, str]:
        return stage_cost(self, stage, 0.0)


@st.composite
def step_graphs(draw):
    n = draw(st.integers(1, 9))
    edges = sorted({(i, j) for j in range(n) for i in range(j) if draw(st.integers(0, 3)) == 0})
    return n, edges, draw(st.integers(0, 10_000)), draw(st.integers(1, 3))


def _longest(n: int, edges, ms) -> float:
    succ = {u: [v for a, v in edges if a == u] for u in range(n)}

    @cache
    def down(u: int) -> float:
        return ms[u] + max((down(v) for v in succ[u]), default=0.0)

    return max(down(u) for u in range(n))


@settings(max_examples=60, deadline=None)
@given(step_graphs())
def test_critical_path_is_the_longest_path(case):
    n, edges, seed, _ = case
    ms = [random.Random(seed + i).uniform(0.1, 5.0) for i in range(n)]
    length, path = critical_path(n, edges, ms)
    assert abs(length - _longest(n, edges, ms)) < 1e-9
    assert abs(sum(ms[s] for s in path) - length) < 1e-9
    assert all((u, v) in edges for u, v in zip(path, path[1:]))


@settings(max_examples=60, deadline=None)
@given(step_graphs(), st.sampled_from([2, 4, 16]))
def test_dos_schedule_is_valid_within_threads_and_no_worse_than_the_baselines(case, block):
    n, edges, seed, threads = case
    cost = Table(n, seed, threads)
    schedule = dos_schedule(n, edges, cost, block)
    assert schedule.is_valid(range(n), edges)
    for stage in schedule.stages:
        if len(stage.nodes) > 1:
            assert stage.strategy == "concurrent" and len(stage.nodes) <= threads
            assert all(cost.candidate(s) for s in stage.nodes)
            assert cost.ratio(stage.nodes) < 1
    assert schedule.cost <= sum(cost.alone) + 1e-9
    if block >= n:     # one block: Algorithm 1 over the whole graph beats the greedy stages
        assert schedule.cost <= greedy_schedule(n, edges, cost).cost + 1e-9


def _segmentations(n: int):
    """Every split of 0..n-1 into runs of consecutive steps."""
    if n == 0:
        yield []
        return
    for first in range(1, n + 1):
        for rest in _segmentations(n - first):
            yield [list(range(first))] + [[s + first for s in run] for run in rest]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(step_graphs())
def test_the_contiguous_schedule_is_the_least_cost_run_split(case):
    """Stages of consecutive steps only (GPU plans: the arena holds the steps in turn), none
    reading another's output, within the threads; its cost is the least over every split of
    the steps into such runs (by brute force), so never above the steps in turn."""
    from woodpecker.schedule.dos_steps import contiguous_schedule

    n, edges, seed, threads = case
    table = Table(n, seed, threads)
    found = contiguous_schedule(n, edges, table)
    assert found.is_valid(range(n), edges)
    order = [s for stage in found.stages for s in sorted(stage.nodes)]
    assert order == list(range(n))
    linked = set(edges)
    for stage in found.stages:
        assert len(stage.nodes) <= threads
        assert not any((u, v) in linked for u in stage.nodes for v in stage.nodes)
    best = INF
    for runs in _segmentations(n):
        if any(len(r) > threads or any((u, v) in linked for u in r for v in r) for r in runs):
            continue
        best = min(best, sum(table(frozenset(r))[0] if len(r) > 1 else table.alone[r[0]]
                             for r in runs))
    assert abs(found.cost - best) <= 1e-9 * max(1.0, best)
    assert found.cost <= sum(table.alone) + 1e-9
