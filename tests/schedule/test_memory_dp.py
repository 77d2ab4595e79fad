"""SERENITY's DP against brute force over every topological order (random DAGs), and the
speed-ups (divide-and-conquer, soft budgeting) leave the optimum unchanged."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.schedule.memory_dp import (
    NoSolution,
    cut_points,
    dp_schedule,
    least_peak_floor,
    lower_bound,
    memory_schedule,
    parts,
    proven_floor,
)
from woodpecker.schedule.problem import MemoryProblem


@st.composite
def dags(draw, max_nodes=12):
    """A random DAG in index order; each node makes one or two activations of random size read
    by random later nodes; some are graph outputs."""
    n = draw(st.integers(1, max_nodes))
    values = []
    for u in range(n):
        for _ in range(draw(st.integers(1, 2))):
            later = list(range(u + 1, n))
            readers = draw(st.lists(st.sampled_from(later), max_size=3)) if later else []
            mask = 0
            for r in readers:
                mask |= 1 << r
            out = draw(st.booleans()) if u >= n - 2 or not mask else False
            values.append((draw(st.integers(1, 64)), u, mask, out))
    return MemoryProblem.build(n, values)


def brute_force(p: MemoryProblem) -> int:
    """Exact minimum peak over all topological orders: depth-first over every order, pruning a
    branch only when it cannot beat the best found (its peak so far, or a node still to run
    with its inputs and outputs, already reaches it), starting from Kahn's order's peak, or
    when the same set of nodes was already reached with a peak no higher (the bytes live after
    a prefix depend only on its set, asserted on every revisit; without this some random
    DAGs of 12 nodes take minutes)."""
    best = [p.simulate(p.kahn())[0] + 1]
    need = [p.alloc[u] + sum(size for size, _ in p.reads[u]) for u in range(p.n)]
    reached: dict[int, tuple[int, int]] = {}

    def go(mask, mem, peak):
        rest = [u for u in range(p.n) if not mask >> u & 1]
        if max([peak] + [need[u] for u in rest]) >= best[0]:
            return
        if mask in reached:
            assert reached[mask][1] == mem
            if reached[mask][0] <= peak:
                return
        reached[mask] = (peak, mem)
        if not rest:
            best[0] = peak
            return
        for u in rest:
            if not p.preds[u] & ~mask:
                top, after = p.step(mask, mem, u)
                go(mask | 1 << u, after, max(peak, top))

    go(0, 0, 0)
    return best[0]


def is_topological(p, order):
    seen = 0
    for u in order:
        assert not p.preds[u] & ~seen
        seen |= 1 << u
    return seen == (1 << p.n) - 1 and len(order) == p.n


@settings(max_examples=300, deadline=None)
@given(dags())
def test_dp_matches_brute_force(p):
    order, peak, _ = dp_schedule(p)
    assert is_topological(p, order)
    assert p.simulate(order)[0] == peak == brute_force(p)
    for divide in (False, True):
        for soft in (False, True):
            o2, rep = memory_schedule(p, divide=divide, soft_budget=soft)
            assert is_topological(p, o2)
            assert rep.peak == p.simulate(o2)[0] == peak
            assert rep.optimal


@settings(max_examples=100, deadline=None)
@given(dags(), st.integers(1, 8))
def test_beam_is_a_valid_order_and_exact_when_wide(p, width):
    order, peak, _ = dp_schedule(p, width=width)
    assert is_topological(p, order)
    assert p.simulate(order)[0] == peak >= dp_schedule(p)[1]
    assert dp_schedule(p, width=1 << 20)[1] == dp_schedule(p)[1]


@settings(max_examples=20, deadline=None)
@given(dags(max_nodes=60))
def test_schedule_never_worse_than_input_or_kahn(p):
    # parts this large may outrun the exact search: the result is still bounded by the input
    # order and Kahn's, and by the beam when it runs
    order, rep = memory_schedule(p, step_seconds=0.05, total_seconds=0.1)
    assert is_topological(p, order)
    assert rep.peak == p.simulate(order)[0]
    assert rep.peak <= min(p.simulate(range(p.n))[0], p.simulate(p.kahn())[0])


@settings(max_examples=100, deadline=None)
@given(dags())
def test_proven_floor_bisects_to_the_optimum(p):
    everything = (1 << p.n) - 1
    kahn, _ = p.simulate(p.kahn())
    floor, order, peak = proven_floor(p, everything, 0, 0, lower_bound(p, everything, 0), kahn,
                                      seconds=60)
    assert floor == peak == brute_force(p)
    assert order is None if peak == kahn else p.simulate(order)[0] == peak
    _, rep = memory_schedule(p)
    assert least_peak_floor(p, rep, 60) == rep.peak == floor


@settings(max_examples=100, deadline=None)
@given(dags())
def test_parts_partition_the_graph_in_order(p):
    groups = parts(p)
    union = 0
    for g in groups:
        assert not union & g
        union |= g
    assert union == (1 << p.n) - 1
    for c in cut_points(p):
        before = [u for u in range(p.n) if u != c and p.preds[c] >> u & 1]
        assert all(u < c for u in before)


def test_budget_prunes_to_no_solution():
    # a -> (b, c) -> d : b and c both big; any order holds a plus one of them
    p = MemoryProblem.build(4, [(10, 0, 0b0110, False), (20, 1, 0b1000, False),
                                (20, 2, 0b1000, False), (1, 3, 0, True)])
    order, rep = memory_schedule(p)
    assert rep.peak == 50
    with pytest.raises(NoSolution):
        dp_schedule(p, budget=49)
    with pytest.raises(NoSolution):
        memory_schedule(p, budget=49)


def test_kahn_is_a_hard_budget_and_dp_beats_it():
    # two branches from a source; Kahn runs them breadth-first, the DP one branch at a time
    # nodes: 0 src; 1,2 branch A; 3,4 branch B; 5 join
    vals = [(4, 0, 0b000110 | 0b011000, False),
            (100, 1, 1 << 2, False), (1, 2, 1 << 5, False),
            (100, 3, 1 << 4, False), (1, 4, 1 << 5, False), (1, 5, 0, True)]
    p = MemoryProblem.build(6, vals)
    p_kahn, _ = p.simulate(p.kahn())
    order, rep = memory_schedule(p)
    assert rep.peak < p_kahn
