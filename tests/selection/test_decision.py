"""A plan-level decision (selection/compare.decide) records where its median paired ratio
stands in the rounds' spread: the quartiles of the per-round ratios, in its JSON record and its
one line; a record of an older plan, without them, still reads."""

from __future__ import annotations

import json
import time

from woodpecker.selection.compare import Decision, Timed, decide


def _busy(seconds: float):
    def run():
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    return run


def test_a_decision_records_the_quartiles_of_its_rounds():
    d = decide(Timed("fast", _busy(0.0004)), Timed("slow", _busy(0.0012)), rounds=12, bar=0.98)
    assert d.kept and d.rounds == 12
    q25, q75 = d.quartiles
    assert q25 <= d.paired_ratio <= q75 < 1.0
    record = json.loads(json.dumps(d.to_json(), allow_nan=False))
    assert record["quartiles"] == [q25, q75]
    assert f"quartiles {q25:.3f}-{q75:.3f}, bar 0.98) -> fast" in Decision.said(record)


def test_an_older_record_without_quartiles_still_reads():
    record = Decision("a", "b", 1.0, 2.0, 0.5, 1.0, 3, True).to_json()
    assert record["quartiles"] == [None, None]
    del record["quartiles"]
    assert Decision.said(record) == "a 1.000 ms, b 2.000 ms (paired 0.500) -> a"
