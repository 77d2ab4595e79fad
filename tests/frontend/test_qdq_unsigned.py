"""A QDQ model with its int8 activations carried as uint8 is the same model
(frontend/qdq_unsigned.py): on a model ONNX Runtime's own quantizer wrote, ONNX Runtime's
outputs on the rewritten file are its outputs on the file as written, within one quantization
step; library-first times the rewrite as a plan of the user's graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run
from woodpecker.frontend.qdq_unsigned import unsigned_activations


def _float_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 8, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 12, 12])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4, 12, 12])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from woodpecker.quantization.ptq import FeedReader

    rng = np.random.default_rng(1)
    reader = FeedReader([{"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
                         for _ in range(4)])
    folder = tmp_path_factory.mktemp("qdq")
    onnx.save(_float_model(), folder / "float.onnx")
    quantize_static(str(folder / "float.onnx"), str(folder / "int8.onnx"), reader,
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    return onnx.load(folder / "int8.onnx")


def _output_step(quantized: onnx.ModelProto) -> float:
    """The scale of the quantization of the output y: one step of its values."""
    (step,) = [numpy_helper.to_array(i) for i in quantized.graph.initializer
               if i.name == next(n.input[1] for n in quantized.graph.node if n.output[0] == "y")]
    return float(step)


def test_the_same_numbers_in_uint8(quantized):
    rewritten = unsigned_activations(quantized)
    assert rewritten is not None
    onnx.checker.check_model(rewritten)
    inits = {i.name: i.data_type for i in rewritten.graph.initializer}
    activation_zero_points = [inits[n.input[2]] for n in rewritten.graph.node
                              if n.op_type == "QuantizeLinear" and n.input[0] not in inits]
    assert activation_zero_points and set(activation_zero_points) == {TensorProto.UINT8}
    # the same real values; ONNX Runtime's uint8 kernels may round a requantization
    # otherwise (the module docstring): at most one step of the output's quantization here
    step = _output_step(quantized)
    for seed in range(3):
        x = (np.random.default_rng(seed).standard_normal((1, 3, 12, 12)) * 2).astype(np.float32)
        np.testing.assert_allclose(ort_run(rewritten, {"x": x})[0],
                                   ort_run(quantized, {"x": x})[0], rtol=0, atol=1.01 * step)


def test_nothing_to_do_or_an_activation_the_user_sees(quantized):
    assert unsigned_activations(_float_model()) is None
    seen = onnx.ModelProto()
    seen.CopyFrom(quantized)
    q = next(n for n in seen.graph.node if n.op_type == "QuantizeLinear"
             and n.input[0] == "x")
    seen.graph.output.append(helper.make_tensor_value_info(q.output[0], TensorProto.INT8,
                                                           None))
    rewritten = unsigned_activations(seen)
    assert rewritten is not None    # the others still move; that one keeps int8
    kept = next(n for n in rewritten.graph.node if n.output[0] == q.output[0])
    assert kept.input[2] == q.input[2]


def test_library_first_times_the_uint8_file_and_the_plan_agrees(quantized, tmp_path):
    import woodpecker
    from woodpecker.selection.library_first import UNSIGNED

    model = woodpecker.compile(quantized, threads=1)
    record = model.plan.meta["library_first"]
    assert any(label.startswith(UNSIGNED) for label in record["median_ms"]), record
    x = np.random.default_rng(5).standard_normal((1, 3, 12, 12)).astype(np.float32)
    want = ort_run(quantized, {"x": x})[0]
    # whichever session the timing picked (the uint8 file's, or another library's) rounds a
    # requantization at most one output step away from ONNX Runtime on the file as written
    # (an Emerald Rapids CI run picked one that did: 106 of 576 values one step off)
    np.testing.assert_allclose(model(x), want, rtol=0, atol=1.01 * _output_step(quantized))
    model.save(tmp_path / "plan")
    np.testing.assert_array_equal(woodpecker.load(tmp_path / "plan")(x), model(x))
