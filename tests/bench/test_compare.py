"""bench/compare.benchmark: variants of a plan (here: its saved kernels on one thread, as
benchmarks/busy_machine.py --single-thread times them) run in the same rounds as the rest."""

from __future__ import annotations

import dataclasses

import numpy as np

import woodpecker
from tests.helpers import conv_bn_relu_residual
from woodpecker.bench.compare import benchmark, random_feeds
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.runtime.plan import load_plan


def test_a_variant_is_timed_in_the_same_rounds_and_computes_the_same(tmp_path):
    proto = conv_bn_relu_residual()
    model = woodpecker.compile(proto, engines="numpy,onnxruntime", threads=2)
    model.save(tmp_path / "m.wpk")
    plan = load_plan(tmp_path / "m.wpk")
    plan.target = dataclasses.replace(plan.target, threads=1)
    single = CompiledModel(plan)
    feeds = random_feeds(model)
    for name, want in model.run(feeds).items():
        np.testing.assert_array_equal(single.run(feeds)[name], want)
    r = benchmark(model, proto.SerializeToString(), ["onnxruntime"], runs=3, warmup=1,
                  variants={"one thread": single})
    assert set(r["results"]) == {"woodpecker", "onnxruntime", "one thread"}
    assert r["results"]["one thread"]["runs"] == 3
    assert r["paired_speedup_vs"]["one thread"] > 0
    assert r["threads"] == 2 and single.plan.target.threads == 1
