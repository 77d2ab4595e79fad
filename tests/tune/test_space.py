"""Knob spaces: sampling only yields valid configs, encode/decode round-trips, enumeration
agrees with the constraints."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.tune.space import Constraint, Knob, KnobSpace


@st.composite
def spaces(draw):
    n = draw(st.integers(1, 4))
    knobs = [Knob(f"k{i}", tuple(range(draw(st.integers(1, 5))))) for i in range(n)]
    limit = draw(st.integers(0, 4 * n))
    return KnobSpace(knobs, [Constraint("sum-limit", lambda c: sum(c.values()) <= limit)])


@settings(max_examples=100, deadline=None)
@given(spaces(), st.integers(0, 2**16))
def test_sample_is_valid_and_roundtrips(space, seed):
    valid = list(space.valid_configs())
    assert all(space.is_valid(c) for c in valid)
    assert len(valid) <= space.size
    if not valid:
        with pytest.raises(ValueError):
            space.sample(random.Random(seed), tries=50)
        return
    c = space.sample(random.Random(seed))
    assert c in valid
    assert space.decode(space.encode(c)) == c


def test_violations_name_the_problem():
    space = KnobSpace([Knob("tile", (1, 2, 4)), Knob("vec", (8, 16))],
                      [Constraint("registers", lambda c: c["tile"] * c["vec"] <= 32)])
    assert space.violations({"tile": 4, "vec": 16}) == ["registers"]
    assert space.violations({"tile": 3, "vec": 8}) == ["tile=3 outside its domain"]
    assert "missing knob vec" in space.violations({"tile": 1})
    assert space.key({"vec": 8, "tile": 2}) == space.key({"tile": 2, "vec": 8})
    with pytest.raises(ValueError):
        Knob("x", ())
