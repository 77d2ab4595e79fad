"""fuse_row_elementwise: a quantized model's Q/DQ steps and element-wise ops over tensors of
another rank than 4 (a statically quantized transformer's (batch, tokens, features)) become one
FusedElementwise, constants per last axis, computed in the tensors' own layout — as its
reference, on ONNX Runtime through its export, and on a generated kernel in a compiled plan,
each equal to ONNX Runtime on the file bit for bit. Float-only groups of that rank stay as they
were."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.passes.test_fold_qdq import run_graph
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.passes import optimize

SHAPE = (2, 8, 48)


def _model(quantized: bool = True, shape: tuple[int, ...] = SHAPE) -> bytes:
    """x, r float; Q/DQ both, + a bias per last-axis value, + r, Q/DQ out (without
    `quantized`: the same sums in float)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (np.float32(0.05), "s1"), (np.uint8(120), "z1"), (np.float32(0.07), "s2"),
        (np.uint8(128), "z2"), (rng.standard_normal(shape[-1]).astype(np.float32), "bias"),
        (np.float32(0.1), "s3"), (np.uint8(100), "z3"))]
    q = lambda x, s, z, y: helper.make_node("QuantizeLinear", [x, s, z], [y])  # noqa: E731
    dq = lambda x, s, z, y: helper.make_node("DequantizeLinear", [x, s, z], [y])  # noqa: E731
    sums = [helper.make_node("Add", ["xd" if quantized else "x", "bias"], ["b"]),
            helper.make_node("Add", ["b", "rd" if quantized else "r"], ["s" if quantized
                                                                       else "out"])]
    nodes = [q("x", "s1", "z1", "xq"), dq("xq", "s1", "z1", "xd"),
             q("r", "s2", "z2", "rq"), dq("rq", "s2", "z2", "rd"), *sums,
             q("s", "s3", "z3", "sq"), dq("sq", "s3", "z3", "out")] if quantized else sums
    g = helper.make_graph(nodes, "rows", [helper.make_tensor_value_info(n, TensorProto.FLOAT,
                                                                        shape) for n in "xr"],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


def _feeds(shape: tuple[int, ...] = SHAPE) -> dict:
    rng = np.random.default_rng(1)
    return {n: (rng.standard_normal(shape) * 2).astype(np.float32) for n in "xr"}


def _want(model: bytes, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("shape", [SHAPE, (6, 40), (2, 3, 2, 5, 16)], ids=["3d", "2d", "5d"])
def test_the_group_computes_as_onnx_runtime_does(shape):
    model = _model(shape=shape)
    graph = import_onnx(model)
    assert optimize(graph)["fuse_row_elementwise"] == 1
    assert [n.op for n in graph.nodes] == ["FusedElementwise"]
    program = graph.nodes[0].attrs["program"]
    assert [a[0] for s in program for a in s["args"] if a is not None].count("channel") == 1
    feeds = _feeds(shape)
    np.testing.assert_array_equal(run_graph(graph, feeds)["out"], _want(model, feeds))


def test_float_groups_of_that_rank_stay_as_they_were():
    graph = import_onnx(_model(quantized=False))
    assert optimize(graph)["fuse_row_elementwise"] == 0
    assert [n.op for n in graph.nodes] == ["Add", "Add"]


@pytest.mark.parametrize("engines", [("halide", "numpy"), ("onnxruntime", "numpy")])
def test_a_compiled_plan_runs_the_group_as_onnx_runtime_does(engines, tmp_path):
    """On a generated kernel (the task of rows, reading the 3-d arrays through views; the
    plan saved and loaded) and on ONNX Runtime through the group's export."""
    import woodpecker
    from woodpecker.options import TuneOptions

    model, feeds = _model(), _feeds()
    tune = TuneOptions(budget="20s", max_trials=2) if "halide" in engines else None
    plan = woodpecker.compile(model, engines=engines, tune=tune,
                              tuning_log=str(tmp_path / "log.jsonl"))
    node = plan.plan.graph.nodes[0]
    choice = plan.plan.choices[node.name]
    assert choice.engine == engines[0]
    if engines[0] == "halide":
        assert choice.kernel.kind == "elementwise_rows"
    np.testing.assert_array_equal(plan.run(feeds)["out"], _want(model, feeds))
    plan.save(tmp_path / "plan")
    np.testing.assert_array_equal(woodpecker.load(tmp_path / "plan").run(feeds)["out"],
                                  _want(model, feeds))
