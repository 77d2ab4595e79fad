"""A QOperator file (ONNX Runtime's quantizer, `QuantFormat.QOperator`) is read as the QDQ form
its integer ops are defined as (frontend/qoperator.py): every contrib op of the file rewritten,
ONNX Runtime's outputs on the rewrite its outputs on the file, a compiled plan running the
convolutions and the quantized element-wise groups on Woodpecker's int8 kernels with ONNX
Runtime's output, and library-first offering the libraries the QDQ form."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run
from woodpecker.errors import UnsupportedOpError
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.frontend.qoperator import MS, REWRITES, qdq_form

SHAPE = (1, 3, 12, 12)


def _float_model() -> onnx.ModelProto:
    """Every op ONNX Runtime's QOperator quantizer gives a contrib integer op: a conv with its
    SiLU (Sigmoid, Mul), a residual Add, LeakyRelu, average and global pools, Concat, Gemm,
    MatMul and Softmax."""
    rng = np.random.default_rng(0)

    def f(*s):
        return (rng.standard_normal(s) * 0.5).astype(np.float32)

    inits = [numpy_helper.from_array(a, n) for a, n in (
        (f(8, 3, 3, 3), "w1"), (f(8), "b1"), (f(8, 8, 1, 1), "w2"), (f(8, 8, 3, 3), "w3"),
        (f(10, 16), "wg"), (f(10), "bg"), (f(10, 5), "wm"))]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             n("Sigmoid", ["c1"], ["s1"]), n("Mul", ["c1", "s1"], ["m1"]),
             n("Conv", ["m1", "w2"], ["c2"]), n("Add", ["c2", "m1"], ["a1"]),
             n("LeakyRelu", ["a1"], ["l1"], alpha=0.1),
             n("AveragePool", ["l1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p1", "w3"], ["c3"], pads=[1, 1, 1, 1]),
             n("Concat", ["p1", "c3"], ["cc"], axis=1),
             n("GlobalAveragePool", ["cc"], ["g"]), n("Flatten", ["g"], ["fl"]),
             n("Gemm", ["fl", "wg", "bg"], ["z"], transB=1), n("MatMul", ["z", "wm"], ["mm"]),
             n("Softmax", ["mm"], ["y"], axis=-1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(seed: int) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)}


@pytest.fixture(scope="module")
def qoperator(tmp_path_factory) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantFormat, quantize_static

    from woodpecker.quantization.ptq import FeedReader

    folder = tmp_path_factory.mktemp("qoperator")
    onnx.save(_float_model(), folder / "float.onnx")
    quantize_static(str(folder / "float.onnx"), str(folder / "int8.onnx"),
                    FeedReader([_feeds(100 + s) for s in range(4)]),
                    quant_format=QuantFormat.QOperator, per_channel=True)
    return onnx.load(folder / "int8.onnx")


def _ops(model: onnx.ModelProto) -> set[tuple[str, str]]:
    return {(n.domain, n.op_type) for n in model.graph.node}


def _close(got: np.ndarray, want: np.ndarray) -> None:
    # ONNX Runtime's contrib kernels round on their own float order (the module docstring of
    # frontend/qoperator.py): a value on a step's edge may land one step off
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max())


def test_every_contrib_op_of_the_file_is_rewritten(qoperator):
    assert set(REWRITES) <= _ops(qoperator)       # the file holds each rewritten op
    rewritten = qdq_form(qoperator)
    onnx.checker.check_model(rewritten)
    ops = _ops(rewritten)
    assert not {d for d, _ in ops} - {""} and ("", "QLinearMatMul") not in ops
    assert MS not in {o.domain for o in rewritten.opset_import}
    assert ("", "QLinearConv") in ops              # the IR has it: left as written
    for seed in range(3):
        feeds = _feeds(seed)
        _close(ort_run(rewritten, feeds)[0], ort_run(qoperator, feeds)[0])


def test_the_libraries_form_rewrites_the_convs_too(qoperator):
    rewritten = qdq_form(qoperator, conv=True)
    onnx.checker.check_model(rewritten)
    assert not any(op.startswith("QLinear") or op.startswith("QGemm")
                   for _, op in _ops(rewritten))
    feeds = _feeds(1)
    want = ort_run(qoperator, feeds)[0]
    _close(ort_run(rewritten, feeds)[0], want)
    # OpenVINO's ONNX reader refuses the per-channel QLinearConv and reads its QDQ form
    ov = pytest.importorskip("openvino")
    with pytest.raises(Exception, match="QLinearConv"):
        ov.Core().read_model(qoperator.SerializeToString(), b"")
    ov.Core().read_model(rewritten.SerializeToString(), b"")


def test_a_plan_runs_the_file_on_woodpeckers_int8_kernels(qoperator, tmp_path):
    import woodpecker
    from woodpecker.options import TuneOptions

    graph = import_onnx(qoperator)
    assert not {"Opaque"} & {n.op for n in graph.nodes}
    compiled = woodpecker.compile(qoperator, engines=("halide", "numpy"), library_first=False,
                                  tune=TuneOptions(budget="40s", max_trials=2),
                                  tuning_log=str(tmp_path / "log.jsonl"))
    on = {(n.op, compiled.plan.choices[n.name].engine) for n in compiled.plan.graph.nodes}
    assert ("FusedQLinearConv", "halide") in on     # conv + its SiLU / residual group
    assert ("FusedElementwise", "halide") in on     # LeakyRelu between Q/DQ, the Concat's Q
    for seed in range(3):
        feeds = _feeds(seed)
        _close(compiled.run(feeds)["y"], ort_run(qoperator, feeds)[0])


def test_library_first_offers_the_qdq_form(qoperator):
    import woodpecker

    compiled = woodpecker.compile(qoperator, engines=("onnxruntime", "openvino"),
                                  library_first=True)
    assert "the file in QDQ form on onnxruntime" in str(compiled.plan.meta["library_first"])


def _contrib(op: str, inputs: list[str], *extra: onnx.TensorProto,
             dtype=TensorProto.INT8) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.float32(0.05), "s"), *extra]
    node = helper.make_node(op, inputs, ["y"], domain=MS, name="q")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "a", dtype, [2, 8])], [helper.make_tensor_value_info("y", dtype, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19),
                                                   helper.make_opsetid(MS, 1)])


def test_a_zero_point_left_out_is_zero_of_the_inputs_type():
    model = _contrib("QLinearSigmoid", ["a", "s", "", "s"])
    rewritten = qdq_form(model)
    (q,) = [n for n in rewritten.graph.node if n.op_type == "QuantizeLinear"]
    zp = {i.name: i for i in rewritten.graph.initializer}[q.input[2]]
    assert zp.data_type == TensorProto.INT8
    # (ONNX Runtime 1.32 aborts the process on this contrib node without zero points: the
    # definition, in numpy)
    a = np.arange(-80, 80, 10, dtype=np.int8).reshape(2, 8)
    want = np.clip(np.rint(1 / (1 + np.exp(-a * np.float32(0.05))) / np.float32(0.05)),
                   -128, 127).astype(np.int8)
    np.testing.assert_array_equal(ort_run(rewritten, {"a": a})[0], want)


def test_an_element_type_the_graph_cannot_tell_is_one_line_naming_the_node():
    # the input comes from an op the rewrite does not know, and no zero point gives its type
    model = _contrib("QLinearSigmoid", ["t", "s", "", "s"])
    model.graph.node.insert(0, helper.make_node("QLinearReduceMean", ["a", "s", "", "s"], ["t"],
                                                domain=MS, name="mean"))
    with pytest.raises(UnsupportedOpError, match="QLinearSigmoid node 'q'.*element type of 't'"):
        qdq_form(model)
    # library-first then offers the libraries the file as written only
    from woodpecker.selection.library_first import OriginalGraph

    assert OriginalGraph(model)._qdq is None
