"""Dense, pool and rows tasks end to end: extraction (shared tasks, skipped variants), a plan
whose pools, Gemm, MatMuls (2-d, 3-d, batched between run-time operands), layer norm and
softmax all run as generated kernels and match ONNX Runtime, and its round trip through a
saved plan."""

from __future__ import annotations

import random

import numpy as np
import pytest
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand
from woodpecker.engines.halide.templates import template_module
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.passes import optimize
from woodpecker.tune.extract import extract_tasks
from woodpecker.tune.records import TuningLog, TuningRecord

pytest.importorskip("halide")


def _model():
    """maxpool → avgpool (ceil_mode) → flatten → two identical Gemm(transB)+Relu → concat →
    reshape → MatMul + bias → layernorm → y · yᵀ (batched, both operands at run time) →
    softmax; and a transA Gemm, which no template computes."""
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["p1"], ["p2"], kernel_shape=[2, 2], strides=[2, 2],
                         ceil_mode=1),
        helper.make_node("Flatten", ["p2"], ["f"]),
        helper.make_node("Gemm", ["f", "w1", "b1"], ["g1"], transB=1),
        helper.make_node("Relu", ["g1"], ["r1"]),
        helper.make_node("Gemm", ["f", "w1", "b1"], ["g2"], transB=1),
        helper.make_node("Relu", ["g2"], ["r2"]),
        helper.make_node("Concat", ["r1", "r2"], ["s"], axis=1),
        helper.make_node("Gemm", ["ft", "w3"], ["g3"], transA=1),
        helper.make_node("Reshape", ["s", "shape"], ["s3"]),
        helper.make_node("MatMul", ["s3", "w2"], ["m"]),
        helper.make_node("Add", ["m", "b2"], ["y0"]),
        helper.make_node("LayerNormalization", ["y0", "gamma", "beta"], ["y"]),
        helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["y", "yt"], ["z0"]),
        helper.make_node("Softmax", ["z0"], ["z"]),
    ]
    inits = {"w1": rand(32, 72, seed=1) * 0.1, "b1": rand(32, seed=2),
             "w2": rand(8, 8, seed=3) * 0.3, "b2": rand(8, seed=4),
             "shape": np.array([1, 8, 8], np.int64), "w3": rand(2, 4, seed=5),
             "gamma": rand(8, seed=6), "beta": rand(8, seed=7)}
    return make_model(nodes, [("x", [1, 8, 10, 10]), ("ft", [2, 3])],
                      [("z", [1, 8, 8]), ("g3", [3, 4])], inits)


def test_extraction_shares_identical_layers_and_skips_unsupported_variants():
    graph = import_onnx(_model())
    optimize(graph)
    groups = extract_tasks(graph)
    tasks = {g.task.describe(): len(g.nodes) for g in groups}
    assert tasks == {"maxpool 3x3/2 8 @ 10x10": 1, "avgpool 2x2/2 8 @ 5x5": 1,
                     "dense 1x72 . 72x32 +Relu": 2, "dense 8x8 . 8x8 +Add": 1,
                     "matmul 8x8 . 8x8": 1, "layernorm 8x8": 1, "softmax 8x8": 1}, tasks
    by_node = {n.name: n for n in graph.nodes}
    assert all(by_node[g.nodes[0]].op != "Gemm" or not by_node[g.nodes[0]].attrs.get("transA")
               for g in groups)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    model = _model()
    graph = import_onnx(model)
    optimize(graph)
    log = TuningLog(tmp_path_factory.mktemp("log") / "tuning.jsonl")
    for i, g in enumerate(extract_tasks(graph)):
        config = template_module(g.templates[0]).space(g.task).sample(random.Random(i))
        log.append(TuningRecord(task=g.task.key, template=g.templates[0], config=config,
                                cost_s=1e-4, error=None))
    return model, log.path


def test_plan_of_generated_dense_and_pool_kernels(tuned, tmp_path):
    model, log = tuned
    compiled = woodpecker.compile(model, engines="halide,numpy", tuning_log=log, threads=2)
    ops = {n.op: e for n, e in zip(compiled.plan.graph.nodes, compiled.plan.engines)}
    assert compiled.plan.engines.count("halide") == 8
    assert ops["Gemm"] == "numpy"   # transA: no task
    # x enters NHWC once; the average pool's output leaves once; dense kernels need none
    assert compiled.plan.meta["layout_conversions"] == 2
    feeds = {"x": rand(1, 8, 10, 10, seed=7), "ft": rand(2, 3, seed=8)}
    want = ort_run(model, feeds)
    got = compiled(*feeds.values())
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.max(np.abs(g - w)) <= 1e-4 * np.max(np.abs(w))
    compiled.save(tmp_path / "p")
    again = woodpecker.load(tmp_path / "p")(*feeds.values())
    for g, a in zip(got, again):
        np.testing.assert_array_equal(g, a)
