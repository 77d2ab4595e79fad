"""One loaded model called from many threads returns every caller its own right answer (the
model runs one call at a time, runtime/compiled.py), on a plan with generated kernels and on
one of ONNX Runtime regions (whose I/O bindings are shared by the model's runs)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import woodpecker
from tests.helpers import conv_bn_relu_residual, rand, seed_tuning_log

THREADS, CALLS = 8, 200


@pytest.fixture(scope="module", params=["halide,numpy", "onnxruntime"])
def model(request, tmp_path_factory):
    engines = request.param
    log = None
    if "halide" in engines:
        pytest.importorskip("halide")

        log = seed_tuning_log(conv_bn_relu_residual(),
                              tmp_path_factory.mktemp("log") / "t.jsonl").path
    m = woodpecker.compile(conv_bn_relu_residual(), engines=engines, tuning_log=log, threads=1)
    assert engines.split(",")[0] in m.plan.engines
    return m


def test_many_threads_one_model(model):
    xs = [rand(1, 8, 6, 6, seed=s) for s in range(THREADS)]
    want = [model(x).copy() for x in xs]
    wrong, errors = [0] * THREADS, []
    start = threading.Barrier(THREADS)

    def work(k):
        try:
            start.wait()
            for _ in range(CALLS):
                got = model.run({"x": xs[k]})["y"]
                wrong[k] += not np.array_equal(got, want[k])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sum(wrong) == 0, (errors, wrong)
