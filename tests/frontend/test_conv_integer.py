"""ConvInteger in the IR (ops/conv_integer.py): its reference equals ONNX Runtime's output
exactly over shapes, strides, pads, groups, operand types and zero points (hypothesis); a
Conv that ONNX Runtime's dynamic quantizer turned into DynamicQuantizeLinear → ConvInteger →
Cast → Mul compiles node by node with ONNX Runtime's output; bad operands are one line naming
the node."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tests.passes.test_fold_qdq import run_graph
from woodpecker.errors import ModelError
from woodpecker.frontend.onnx_import import import_onnx

T = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


def _model(x_shape, w, xz, wz, **attrs) -> bytes:
    inits = [numpy_helper.from_array(w, "w")]
    inputs = ["x", "w"]
    for name, z in (("xz", xz), ("wz", wz)):
        if z is None:
            inputs.append("")
            continue
        inits.append(numpy_helper.from_array(z, name))
        inputs.append(name)
    while inputs[-1] == "":
        inputs.pop()
    x_type = T[xz.dtype.type] if xz is not None else TensorProto.UINT8
    node = helper.make_node("ConvInteger", inputs, ["y"], name="convi", **attrs)
    s, p = attrs.get("strides", [1, 1])[0], attrs.get("pads", [0] * 4)[0]
    out = [x_shape[0], w.shape[0]] + [(d + 2 * p - w.shape[2]) // s + 1 for d in x_shape[2:]]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, out)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_the_reference_is_onnx_runtimes_output_exactly(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    groups = data.draw(st.sampled_from([1, 2]))
    c, m = groups * data.draw(st.integers(1, 3)), groups * data.draw(st.integers(1, 3))
    k = data.draw(st.integers(1, 3))
    h, w = (data.draw(st.integers(k, 7)) for _ in range(2))
    x_dtype = data.draw(st.sampled_from([np.uint8, np.int8]))
    w_dtype = data.draw(st.sampled_from([np.int8, np.uint8]))
    xi, wi = np.iinfo(x_dtype), np.iinfo(w_dtype)
    x = rng.integers(xi.min, xi.max + 1, (1, c, h, w)).astype(x_dtype)
    weights = rng.integers(wi.min, wi.max + 1, (m, c // groups, k, k)).astype(w_dtype)
    xz = np.asarray(rng.integers(xi.min, xi.max + 1), x_dtype)
    # ONNX Runtime 1.32 takes the weights' zero point per tensor only
    wz = np.asarray(rng.integers(wi.min, wi.max + 1), w_dtype) if data.draw(st.booleans()) \
        else None
    attrs = {"group": groups, "strides": [data.draw(st.integers(1, 2))] * 2,
             "pads": [data.draw(st.integers(0, k - 1))] * 4 if k > 1 else [0] * 4}
    model = _model(list(x.shape), weights, xz, wz, **attrs)
    graph = import_onnx(model)
    assert [n.op for n in graph.nodes] == ["ConvInteger"]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(run_graph(graph, {"x": x})["y"], want[0])


def test_a_dynamically_quantized_conv_compiles_node_by_node(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    import woodpecker

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1] * 4)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [1, 3, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [1, 8, 10, 10])], [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "f.onnx")
    quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", op_types_to_quantize=["Conv"],
                     weight_type=QuantType.QUInt8)
    graph = import_onnx(str(tmp_path / "q.onnx"))
    assert "ConvInteger" in {n.op for n in graph.nodes} and \
        "Opaque" not in {n.op for n in graph.nodes}
    compiled = woodpecker.compile(str(tmp_path / "q.onnx"), engines="numpy")
    x = rng.standard_normal((1, 3, 10, 10)).astype(np.float32)
    want = ort.InferenceSession(str(tmp_path / "q.onnx"),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("xz, wz, words", [
    # (ONNX's type inference says it first)
    (np.int8(0), np.uint8(0), "inputs 'x' (uint8) and 'xz' (int8) must have one type"),
    (np.uint8(0), np.zeros(3, np.int8), "its weight zero point has shape (3,)"),
])
def test_bad_operands_are_one_line_naming_the_node(xz, wz, words):
    w = np.zeros((4, 2, 3, 3), np.int8)
    model = onnx.ModelProto.FromString(_model([1, 2, 5, 5], w, np.uint8(0), wz))
    if xz.dtype != np.uint8:      # the zero point's type differs from the input's
        model.graph.initializer[1].CopyFrom(numpy_helper.from_array(xz, "xz"))
    with pytest.raises(ModelError) as e:
        import_onnx(model)
    assert words in str(e.value) and "'convi'" in str(e.value) and "\n" not in str(e.value)
