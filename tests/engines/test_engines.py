"""Engines agree with the numpy reference on the ops they declare; selection honours --engines."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import woodpecker
from tests.helpers import make_model, rand
from woodpecker.errors import EngineError

CASES = {
    "conv_grouped_strided": (
        [helper.make_node("Conv", ["x", "w"], ["y"], group=2, strides=[2, 2], pads=[1, 0, 2, 1],
                          dilations=[1, 2])],
        {"w": rand(6, 2, 3, 3, seed=1)}, [1, 4, 9, 9], [1, 6, 5, 3]),
    "depthwise_same": (
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=4, auto_pad="SAME_UPPER")],
        {"w": rand(4, 1, 3, 3, seed=1), "b": rand(4, seed=2)}, [1, 4, 7, 7], [1, 4, 7, 7]),
    "maxpool_ceil": (
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                          ceil_mode=1)], {}, [1, 3, 8, 8], [1, 3, 4, 4]),
    "avgpool_pads": (
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                          count_include_pad=0)], {}, [1, 3, 7, 7], [1, 3, 7, 7]),
    "softmax_layernorm": (
        [helper.make_node("Softmax", ["x"], ["s"], axis=-1),
         helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1)],
        {"g": rand(5, seed=1), "b": rand(5, seed=2)}, [2, 3, 5], [2, 3, 5]),
    "matmul_gelu": (
        [helper.make_node("MatMul", ["x", "w"], ["m"]),
         helper.make_node("Gelu", ["m"], ["y"], approximate="tanh")],
        {"w": rand(5, 7, seed=1)}, [2, 3, 5], [2, 3, 7]),
}


@pytest.mark.parametrize("engine", ["torch", "onnxruntime"])
@pytest.mark.parametrize("case", list(CASES))
def test_engine_matches_numpy(engine, case):
    nodes, inits, shape, out_shape = CASES[case]
    model = make_model(nodes, [("x", shape)], [("y", out_shape)], inits, opset=20)
    x = rand(*shape, seed=3)
    ref = woodpecker.compile(model, engines="numpy")(x)
    got_model = woodpecker.compile(model, engines=f"{engine},numpy")
    assert engine in got_model.plan.engines
    np.testing.assert_allclose(got_model(x), ref, rtol=1e-4, atol=1e-5)


def test_attributes_the_opset_lacks_are_not_sent_to_onnxruntime():
    """The window geometry fills in `dilations`; AveragePool has none before opset 19, and ORT
    rejected the node (inception_v3's pools fell back to torch, splitting its ORT region)."""
    nodes, inits, shape, out_shape = CASES["avgpool_pads"]
    model = make_model(nodes, [("x", shape)], [("y", out_shape)], inits, opset=17)
    compiled = woodpecker.compile(model, engines="onnxruntime,torch")
    assert compiled.plan.engines == ["onnxruntime"]
    x = rand(*shape, seed=3)
    np.testing.assert_allclose(compiled(x), woodpecker.compile(model, engines="numpy")(x),
                               rtol=1e-5, atol=1e-6)


def test_restricted_engines_that_cannot_run_a_node():
    model = make_model([helper.make_node("Shape", ["x"], ["s"]),
                        helper.make_node("Cast", ["s"], ["y"], to=1)],
                       [("x", [2, 3])], [("y", [2])])
    # Shape of a static input folds away; Cast of the folded constant folds too: nothing left
    assert woodpecker.compile(model, engines="torch").graph.nodes == []
    model = make_model([helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
                       [("x", [4, 4])], [("y", [6, 6])], {"p": np.array([1, 1, 1, 1])})
    with pytest.raises(EngineError, match="no engine among torch can run Pad"):
        woodpecker.compile(model, engines="torch")


def test_unknown_engine():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [2])], [("y", [2])])
    with pytest.raises(EngineError, match="unknown engine 'tensorrt'"):
        woodpecker.compile(model, engines="tensorrt")
