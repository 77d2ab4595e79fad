"""DOS's scheduler (schedule/dos.py): on random DAGs of at most 10 nodes under random stage
costs, the dynamic program's schedule is valid and costs exactly what the best schedule found
by brute force costs; never more than the greedy or the sequential baseline; the paper's own
example (Fig. 3) comes out as its schedule."""

from __future__ import annotations

import random
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.schedule.dos import (
    blocks,
    greedy_schedule,
    optimal_schedule,
    sequential_schedule,
)


def _costs(seed: int, nodes: list[int]):
    """A stage cost: each node's own time, run concurrently with a random speed-up per set
    (as measured tables look: sometimes better than in turn, sometimes worse)."""
    own = {n: random.Random(seed * 1000 + n).uniform(1, 10) for n in nodes}

    @cache
    def cost(stage: frozenset) -> tuple[float, str]:
        alone = sum(own[n] for n in stage)
        if len(stage) == 1:
            return alone, "sequential"
        key = hash((seed, tuple(sorted(stage)))) & 0xFFFF
        factor = random.Random(key).uniform(0.45, 1.3)
        return alone * factor, "concurrent" if factor < 1 else "sequential"

    return cost


def _brute_force(nodes, edges, cost) -> float:
    """The least cost over every schedule, stages chosen front to back."""
    pred = {n: {u for u, v in edges if v == n} for n in nodes}

    @cache
    def best(done: frozenset) -> float:
        if len(done) == len(nodes):
            return 0.0
        ready = [n for n in nodes if n not in done and pred[n] <= done]
        out = float("inf")
        for mask in range(1, 1 << len(ready)):
            stage = frozenset(r for i, r in enumerate(ready) if mask >> i & 1)
            out = min(out, cost(stage)[0] + best(done | stage))
        return out

    return best(frozenset())


@st.composite
def dags(draw):
    n = draw(st.integers(1, 10))
    edges = [(i, j) for j in range(n) for i in range(j) if draw(st.integers(0, 3)) == 0]
    return list(range(n)), edges


@settings(max_examples=60, deadline=None)
@given(dags(), st.integers(0, 10_000))
def test_the_dynamic_program_is_optimal_against_brute_force(dag, seed):
    nodes, edges = dag
    cost = _costs(seed, nodes)
    schedule = optimal_schedule(nodes, edges, cost)
    assert schedule.is_valid(nodes, edges)
    assert abs(schedule.cost - _brute_force(nodes, edges, cost)) < 1e-9
    assert schedule.cost <= greedy_schedule(nodes, edges, cost).cost + 1e-9
    assert schedule.cost <= sequential_schedule(nodes, cost).cost + 1e-9
    assert greedy_schedule(nodes, edges, cost).is_valid(nodes, edges)
    assert sequential_schedule(nodes, cost).is_valid(nodes, edges)
    capped = optimal_schedule(nodes, edges, cost, max_stage=2)
    assert capped.is_valid(nodes, edges) and all(len(s.nodes) <= 2 for s in capped.stages)
    assert capped.cost >= schedule.cost - 1e-9


def test_the_papers_example():
    """DOS Fig. 3: a → b, a → c, b → d, c → e, d → f... with pairs cheaper together, the
    schedule is {a, b}, {c, d}, {e, f}."""
    nodes = ["a", "b", "c", "d", "e", "f"]
    edges = [("a", "c"), ("b", "d"), ("c", "e"), ("d", "f")]
    pairs = {frozenset("ab"), frozenset("cd"), frozenset("ef")}

    def cost(stage):
        if stage in pairs:
            return 1.2, "concurrent"
        return float(len(stage)), "sequential" if len(stage) == 1 else "concurrent"

    schedule = optimal_schedule(nodes, edges, cost)
    assert [s.nodes for s in schedule.stages] == [frozenset("ab"), frozenset("cd"),
                                                   frozenset("ef")]
    assert schedule.cost == 3 * 1.2
    assert greedy_schedule(nodes, edges, cost).cost >= schedule.cost


def test_blocks_keep_the_order():
    assert blocks(list(range(7)), 3) == [[0, 1, 2], [3, 4, 5], [6]]
