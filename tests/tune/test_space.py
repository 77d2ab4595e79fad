"""Knob spaces: sampling only yields valid configs, encode/decode round-trips, enumeration
agrees with the constraints."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.tasks.space import Constraint, Knob, KnobSpace


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


def test_configs_of_an_older_template_are_not_in_the_domain(tmp_path):
    from woodpecker.tune.records import TuningLog, TuningRecord

    space = KnobSpace([Knob("tile", (1, 2, 4)), Knob("vec", (8, 16))],
                      [Constraint("registers", lambda c: c["tile"] * c["vec"] <= 32)])
    assert space.in_domain({"tile": 4, "vec": 16})          # breaks a constraint, still buildable
    assert not space.in_domain({"tile": 4})                  # a knob added since
    assert not space.in_domain({"tile": 4, "vec": 16, "old": 1})
    assert not space.in_domain({"tile": 3, "vec": 8})
    log = TuningLog(tmp_path / "log.jsonl")
    log.append(TuningRecord(task="t", template="m", config={"tile": 1, "vec": 8}, cost_s=2.0))
    log.append(TuningRecord(task="t", template="m", config={"tile": 2}, cost_s=1.0))
    assert log.best("t").cost_s == 1.0
    assert log.best("t", lambda r: space.in_domain(r.config)).cost_s == 2.0


def _changed(a: dict, b: dict) -> int:
    return sum(a[k] != b[k] for k in a)


@settings(max_examples=100, deadline=None)
@given(spaces(), st.integers(0, 2**16))
def test_nearest_valid_is_valid_and_as_near_as_any_valid_config(space, seed):
    rng = random.Random(seed)
    config = {k.name: rng.choice(k.values) for k in space.knobs}
    near = space.nearest_valid(config)
    valid = list(space.valid_configs())
    if space.is_valid(config):
        assert near == config
        return
    fewest = min((_changed(config, c) for c in valid), default=None)
    if fewest is None or fewest > 2:
        assert near is None
        return
    assert near is not None and space.is_valid(near)
    assert _changed(config, near) == fewest       # no valid config differs in fewer knobs


def test_nearest_valid_fits_another_target_s_register_tile_and_rejects_other_knobs():
    space = KnobSpace([Knob("vec", (4, 8, 16)), Knob("block", (1, 2, 3, 4)),
                       Knob("mode", ("a", "b"))],
                      [Constraint("registers", lambda c: max(1, c["vec"] // 8) * c["block"] <= 2)])
    assert space.nearest_valid({"vec": 16, "block": 4, "mode": "b"}) == \
        {"vec": 16, "block": 1, "mode": "b"}        # one knob moved, as few places as fit
    assert space.nearest_valid({"vec": 12, "block": 1, "mode": "a"}) == \
        {"vec": 8, "block": 1, "mode": "a"}         # a value outside the domain: the nearest
    assert space.nearest_valid({"vec": 16, "block": 1}) is None          # a knob missing
    assert space.nearest_valid({"vec": 16, "block": 1, "mode": "c"}) is None
