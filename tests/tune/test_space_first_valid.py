"""A knob space no configuration of which meets its constraints is found out before any
search samples it (tune/tuner.tune_templates skips its template)."""

from __future__ import annotations

from woodpecker.tasks.space import Constraint, Knob, KnobSpace


def test_first_valid_is_a_seed_or_the_first_valid_config_or_none():
    knobs = [Knob("vec", (4, 8, 16)), Knob("block", (1, 2))]
    wide = Constraint("at least 12 lanes", lambda c: c["vec"] * c["block"] >= 12)
    assert KnobSpace(knobs, [wide]).first_valid() == {"vec": 8, "block": 2}
    seeded = KnobSpace(knobs, [wide], seeds=({"vec": 16, "block": 1},))
    assert seeded.first_valid() == {"vec": 16, "block": 1}
    never = Constraint("more lanes than there are", lambda c: c["vec"] * c["block"] > 32)
    assert KnobSpace(knobs, [never]).first_valid() is None
