"""SiLU as exported (`y * Sigmoid(y)`) after a conv or a Gemm becomes one `Silu` epilogue step,
computed alike by the numpy reference, ONNX Runtime (expanded back), torch and the generated
kernels; a Sigmoid or product read elsewhere is left alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand, seed_tuning_log
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.passes import optimize


def _conv_silu(extra_reader: bool = False):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["y"])]
    outputs = [("y", [1, 16, 9, 9])]
    if extra_reader:   # the Sigmoid is read elsewhere too: not a SiLU to fuse
        nodes.append(helper.make_node("Relu", ["s"], ["z"]))
        outputs.append(("z", [1, 16, 9, 9]))
    inits = {"w": rand(16, 8, 3, 3, seed=1) * 0.3, "b": rand(16, seed=2)}
    return make_model(nodes, [("x", [1, 8, 9, 9])], outputs, inits)


def test_silu_becomes_one_epilogue_step():
    g = import_onnx(_conv_silu())
    optimize(g)
    assert [n.op for n in g.nodes] == ["FusedConv"]
    assert g.nodes[0].attrs["epilogue"] == [{"op": "Silu"}]


def test_a_sigmoid_read_elsewhere_stays():
    g = import_onnx(_conv_silu(extra_reader=True))
    optimize(g)
    assert not any(s["op"] == "Silu" for n in g.nodes for s in n.attrs.get("epilogue", []))


@pytest.mark.parametrize("engines", ["numpy", "onnxruntime,numpy", "torch,numpy"])
def test_silu_epilogue_matches_onnxruntime(engines):
    model = _conv_silu()
    x = rand(1, 8, 9, 9, seed=3) * 4   # large values too, where exp(-x) over- or underflows
    want = ort_run(model, {"x": x})[0]
    compiled = woodpecker.compile(model, engines=engines, threads=1)
    assert compiled.plan.engines == [engines.split(",")[0]]   # the fused node on that engine
    np.testing.assert_allclose(compiled(x), want, rtol=1e-5, atol=1e-5)


def test_silu_epilogue_in_generated_kernels(tmp_path):
    pytest.importorskip("halide")
    model = _conv_silu()
    log = seed_tuning_log(model, tmp_path / "log.jsonl")
    compiled = woodpecker.compile(model, engines="halide,numpy", tuning_log=log.path, threads=2)
    assert compiled.plan.engines.count("halide") == 1
    x = rand(1, 8, 9, 9, seed=3) * 4
    want = ort_run(model, {"x": x})[0]
    assert np.max(np.abs(compiled(x) - want)) <= 1e-4 * np.max(np.abs(want))
