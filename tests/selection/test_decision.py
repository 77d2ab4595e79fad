"""A plan-level decision (selection/compare.decide) records where its median paired ratio
stands in the rounds' spread: the quartiles of the per-round ratios, in its JSON record and its
one line; a record of an older plan, without them, still reads. With `confirm`, a keep inside
the rounds' spread is timed in a second window and stands only where that window agrees."""

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


def _scripted(pattern_ms: list[float], then_ms: float | None = None, calls: int = 0):
    """A run whose k-th call busy-waits pattern_ms[k % len]; after `calls` calls, `then_ms`."""
    count = [0]

    def run():
        k = count[0]
        count[0] += 1
        ms = then_ms if then_ms is not None and k >= calls else pattern_ms[k % len(pattern_ms)]
        _busy(ms / 1e3)()
    return run


def test_a_clear_keep_takes_one_window():
    d = decide(Timed("fast", _busy(0.0004)), Timed("slow", _busy(0.0012)), rounds=12, bar=0.98,
               confirm=True)
    assert d.kept and d.windows == (d.paired_ratio,) and d.rounds == 12


def test_a_keep_inside_the_spread_is_confirmed_by_a_second_window():
    # every fourth call 1.6x the library's time, the others 0.4x: a third of the timed calls
    # (the second and third of each block of three) slow -> median under the bar, upper
    # quartile over 1.0 -> a second window, alike, confirms it
    d = decide(Timed("ours", _scripted([0.4, 0.4, 0.4, 1.6])), Timed("lib", _busy(0.001)),
               rounds=12, bar=0.98, confirm=True)
    assert d.quartiles[1] >= 1.0 and len(d.windows) == 2 and d.rounds == 24
    assert d.kept and d.windows[1] < 1.0
    assert ", windows " in Decision.said(d.to_json())


def test_a_keep_the_second_window_contradicts_is_dropped():
    # the first window's calls (2 warm-ups, 6 rounds of 3) as above; every later call 1.6x
    d = decide(Timed("ours", _scripted([0.4, 0.4, 0.4, 1.6], then_ms=1.6, calls=20)),
               Timed("lib", _busy(0.001)), rounds=12, bar=0.98, confirm=True)
    assert d.windows[0] < 0.98 and d.windows[1] > 1.0 and not d.kept
    assert Decision.said(d.to_json()).endswith("-> lib")
