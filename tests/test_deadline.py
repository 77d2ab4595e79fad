"""The compile's deadline: shares of the time left, and measurements that stop at it."""

from __future__ import annotations

import math
import time

from woodpecker.bench.timing import time_interleaved
from woodpecker.deadline import Deadline


def test_a_deadline_shares_the_time_left():
    assert Deadline.NONE.left() == math.inf and not Deadline.NONE.passed()
    assert Deadline.NONE.share(0.5) is Deadline.NONE
    d = Deadline.after(100.0)
    assert 99.0 < d.left() <= 100.0 and not d.passed()
    half = d.share(0.5)
    assert 49.0 < half.left() <= 50.0 and half.end < d.end
    assert Deadline(time.monotonic() - 1).passed() and Deadline(0.0).left() == 0.0
    assert Deadline(0.0).share(0.5).passed()


def test_interleaved_timing_stops_at_a_passed_deadline_after_the_fewest_runs():
    calls = {"a": 0, "b": 0}

    def runner(name):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    full = time_interleaved({k: runner(k) for k in calls}, 40, 0)
    assert all(len(t) == 40 for t in full.values())
    cut = time_interleaved({k: runner(k) for k in calls}, 40, 0, deadline=Deadline(0.0),
                           min_runs=6)
    assert all(len(t) == 6 for t in cut.values())
    blocks = time_interleaved({k: runner(k) for k in calls}, 40, 0, block=3,
                              deadline=Deadline(0.0), min_runs=5)
    assert all(len(t) == 6 for t in blocks.values())   # whole rounds of two timed calls
