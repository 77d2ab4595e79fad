"""Parallel builds (tune/build_pool.py): every candidate of a batch gets its compile time or
the error that makes it invalid, a crashing or hanging build costs only its worker, real
kernels land in the kernel cache for the measurer, and a tuning with the pool records the
same candidates as one without it."""

from __future__ import annotations

import json

import pytest

from woodpecker.engines.halide.templates import template_module
from woodpecker.tune.build_pool import BuildPool
from woodpecker.tune.context import TuningContext
from woodpecker.tune.measure import Measurer
from woodpecker.tune.records import TuningLog
from woodpecker.tune.searchers import make_searcher
from woodpecker.tune.tuner import tune_task

from .test_measure import FAULTY, TASK


def test_faulty_builds_are_reported_and_the_pool_goes_on():
    modes = ["ok", "build_crash", "raise", "build_hang", "ok", "crash", "ok"]
    with BuildPool(2, timeout_s=3) as pool:
        built = pool.build(TASK, FAULTY, [{"mode": m} for m in modes])
        again = pool.build(TASK, FAULTY, [{"mode": "ok"}] * 3)
    by = dict(zip(modes, built))
    assert [b.error for m, b in zip(modes, built) if m == "ok"] == [None] * 3
    assert all(b.compile_s is not None and b.compile_s >= 0 for b in again)
    assert by["build_crash"].error == "worker crashed (signal 11)"
    assert by["build_hang"].error == "timed out after 3s"
    assert by["raise"].error.startswith("build failed: Halide: cannot schedule this")
    assert by["crash"].error is None          # it crashes when run: the measurer's to find


def test_halide_builds_land_in_the_kernel_cache(tmp_path, monkeypatch):
    pytest.importorskip("halide")
    monkeypatch.setenv("WOODPECKER_CACHE", str(tmp_path))
    configs = [{"vec": 8, "co_block": 1, "x_block": x, "parallel": "rows", "pad": "inline",
                "unroll_kw": False} for x in (2, 3)]
    with BuildPool(2) as pool:
        built = pool.build(TASK, "conv_direct", configs)
    assert [b.error for b in built] == [None, None]
    kernels = list(tmp_path.rglob("kernels/*.so"))
    assert len(kernels) == 2
    with Measurer(threads=1, repeats=2) as m:           # the measurer finds them built
        got = m.measure("conv_direct", TASK, configs[0])
    assert got.ok and got.compile_s < min(b.compile_s for b in built)
    assert sorted(tmp_path.rglob("kernels/*.so")) == sorted(kernels)


def test_tuning_with_the_pool_records_build_errors_without_measuring(tmp_path):
    log = TuningLog(tmp_path / "log.jsonl")
    space = template_module(FAULTY).space(TASK)
    searcher = make_searcher("random", TuningContext(TASK, FAULTY, space, seed=0))
    with Measurer(threads=1, timeout_s=3, repeats=2) as m, BuildPool(2, timeout_s=3) as pool:
        tune_task(TASK, FAULTY, space, searcher, m, log, searcher_name="random", seed=0,
                  builder=pool)
    recs = {r["config"]["mode"]: r for r in map(json.loads, open(tmp_path / "log.jsonl"))}
    assert set(recs) == set(space.knobs[0].values)
    assert recs["ok"]["cost_s"] > 0 and recs["ok"]["error"] is None
    assert recs["build_crash"]["error"] == "worker crashed (signal 11)"
    assert recs["build_hang"]["error"] == "timed out after 3s"
    assert recs["crash"]["error"] == "worker crashed (signal 11)"   # found by the measurer
    assert "wrong result" in recs["wrong"]["error"]
