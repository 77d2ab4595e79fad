"""Fault injection: candidates that segfault, hang, fail to build or return wrong values are
reported invalid, and the worker keeps serving the next candidate."""

from __future__ import annotations

import pytest

from woodpecker.tasks.conv import ConvTask
from woodpecker.tune.measure import Measurer
from woodpecker.tune.records import TuningRecord

TASK = ConvTask(1, 4, 6, 6, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True, (("Relu",),))
FAULTY = "faulty"   # tests/tune/faulty_template.py, named in tests/conftest.py


@pytest.fixture
def measurer():
    with Measurer(threads=1, timeout_s=10, repeats=2) as m:
        yield m


def test_faults_are_invalid_and_measuring_continues():
    # long enough for a good candidate to build and run on a busy machine; the hang costs it
    measurer = Measurer(threads=1, timeout_s=8, repeats=2)
    results = {}
    for mode in ("ok", "crash", "ok", "hang", "wrong", "raise", "ok"):
        m = measurer.measure(FAULTY, TASK, {"mode": mode})
        results.setdefault(mode, []).append(m)
    assert all(m.ok and m.cost_s > 0 for m in results["ok"])
    assert "worker crashed (signal 11)" in results["crash"][0].error
    assert "timed out" in results["hang"][0].error
    assert "wrong result" in results["wrong"][0].error
    assert "build failed: Halide: cannot schedule this" in results["raise"][0].error
    measurer.close()


def test_paired_timing_reports_the_ratio_to_a_reference_that_builds(measurer):
    ok = TuningRecord(TASK.key, FAULTY, {"mode": "ok"}, 1e-3)
    m = measurer.measure(FAULTY, TASK, {"mode": "ok"}, reference=ok)
    assert m.ok and m.ratio > 0
    stale = TuningRecord(TASK.key, FAULTY, {"mode": "raise"}, 1e-3)
    m = measurer.measure(FAULTY, TASK, {"mode": "ok"}, reference=stale)
    assert m.ok and m.ratio is None                    # timed alone, still valid
    m = measurer.measure(FAULTY, TASK, {"mode": "wrong"}, reference=ok)
    assert not m.ok and "wrong result" in m.error


def test_real_halide_candidate(measurer):
    pytest.importorskip("halide")
    config = {"vec": 8, "co_block": 1, "x_block": 3, "parallel": "rows", "pad": "inline",
              "unroll_kw": False}
    m = measurer.measure("conv_direct", TASK, config)
    assert m.ok, m.error
