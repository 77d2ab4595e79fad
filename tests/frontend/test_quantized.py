"""QuantizeLinear/DequantizeLinear in the IR (issue 53): their references against ONNX Runtime,
exactly, over shapes, scales, zero points and axes; a quantized model imports without opaque
Q/DQ nodes; bad quantization parameters are one line naming the node."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tests.passes.test_fold_qdq import run_graph
from woodpecker.errors import ModelError
from woodpecker.frontend.onnx_import import import_onnx

T = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.int32: TensorProto.INT32}


def _qdq_model(shape, scale, zp, axis, dq_dtype=None) -> bytes:
    """x (float) → QuantizeLinear → DequantizeLinear → y; both outputs."""
    zq = numpy_helper.from_array(zp, "zp")
    inits = [numpy_helper.from_array(scale, "s"), zq]
    dq_zp = "zp"
    if dq_dtype is not None:                     # a DequantizeLinear zero point of its own
        inits.append(numpy_helper.from_array(zp.astype(dq_dtype), "zp2"))
        dq_zp = "zp2"
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="quant",
                              axis=axis),
             helper.make_node("DequantizeLinear", ["q", "s", dq_zp], ["y"], name="dequant",
                              axis=axis)]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", 1, list(shape))],
                          [helper.make_tensor_value_info("q", T[zp.dtype.type], list(shape)),
                           helper.make_tensor_value_info("y", 1, list(shape))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_references_match_onnx_runtime_exactly(data):
    rank = data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    dtype = data.draw(st.sampled_from([np.int8, np.uint8]))
    per_axis = data.draw(st.booleans())
    axis = data.draw(st.integers(-rank, rank - 1))
    n = shape[axis] if per_axis else 1
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    scale = (10.0 ** rng.uniform(-3, 1, n)).astype(np.float32)
    info = np.iinfo(dtype)
    zp = rng.integers(info.min, info.max + 1, n).astype(dtype)
    if not per_axis:
        scale, zp = scale.reshape(()), zp.reshape(())
    # values at exact halves of a step too (round half to even) and far outside the range
    x = (rng.standard_normal(shape) * 4 * float(np.max(scale)) * 40).astype(np.float32)
    x.flat[0] = 2.5 * float(np.ravel(scale)[0])
    model = _qdq_model(shape, scale, zp, axis)
    graph = import_onnx(model)
    assert {n.op for n in graph.nodes} == {"QuantizeLinear", "DequantizeLinear"}
    got = run_graph(graph, {"x": x})
    want = dict(zip(["q", "y"], ort.InferenceSession(model, providers=[
        "CPUExecutionProvider"]).run(["q", "y"], {"x": x})))
    assert got["q"].dtype == want["q"].dtype
    np.testing.assert_array_equal(got["q"], want["q"])
    np.testing.assert_array_equal(got["y"], want["y"])


@pytest.mark.parametrize("scale, zp, axis, dq_dtype, words", [
    (np.float32(0.0), np.uint8(3), 1, None, "scale must be positive and finite, got 0.0"),
    (np.float32(-0.5), np.uint8(3), 1, None, "positive and finite, got -0.5"),
    (np.float32(np.nan), np.uint8(3), 1, None, "positive and finite, got nan"),
    (np.float32(np.inf), np.int8(3), 1, None, "positive and finite, got inf"),
    (np.ones(3, np.float32), np.zeros(3, np.int8), 1, None, "3 scales for axis 1"),
    (np.ones(4, np.float32), np.zeros(4, np.int8), 5, None, "axis 5 out of range"),
    # ONNX's type inference says it first
    (np.float32(0.1), np.uint8(3), 1, np.int8, "'q' (uint8) and 'zp2' (int8) must have one "
                                               "type"),
    (np.ones(4, np.float32), np.zeros(3, np.uint8), 1, None, "zero point has shape (3,)"),
])
def test_bad_quantization_parameters_are_one_line_naming_the_node(scale, zp, axis, dq_dtype,
                                                                  words):
    with pytest.raises(ModelError) as e:
        import_onnx(_qdq_model((2, 4, 3), scale, zp, axis, dq_dtype))
    msg = str(e.value)
    assert words in msg and "\n" not in msg
    assert "'quant'" in msg or "'dequant'" in msg


def test_an_int32_bias_needs_zero_point_zero():
    g = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["b", "s", "z"], ["y"], name="bias")], "b", [],
        [helper.make_tensor_value_info("y", 1, [4])],
        [numpy_helper.from_array(np.arange(4, dtype=np.int32), "b"),
         numpy_helper.from_array(np.float32(0.5), "s"),
         numpy_helper.from_array(np.int32(2), "z")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(ModelError, match="'bias'.*int32 tensor's zero point must be 0"):
        import_onnx(model)


def test_a_quantized_classifier_imports_without_opaque_nodes(tmp_path):
    """A QDQ file as `woodpecker quantize` writes it: every node defined, the IR's reference
    run equal to ONNX Runtime's."""
    import woodpecker
    from woodpecker.zoo.digits import digits_classifier

    d = digits_classifier(seed=0)
    out = tmp_path / "q.onnx"
    # 7-bit weights: ONNX Runtime's AVX2 path (no VNNI) saturates pairs of full-range products
    woodpecker.quantize(d.onnx, out, calibrate=d.train_images[:128],
                        options=woodpecker.QuantizeOptions(reduce_range=True))
    x = d.test_images[:8]
    graph = import_onnx(str(out), {"image": x.shape})
    assert "Opaque" not in {n.op for n in graph.nodes}
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op for n in graph.nodes}
    want = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"image": x})[0]
    np.testing.assert_allclose(run_graph(graph, {"image": x})["logits"], want, rtol=1e-5,
                               atol=1e-5)


def test_a_one_element_scale_vector_is_per_tensor_whatever_the_axis():
    """ONNX Runtime's static quantizer writes a LayerNorm's int32 bias (rank 1) with a (1,)
    scale, a scalar zero point and the axis left at its default 1: per tensor, as ONNX Runtime
    reads it (its import failed on the axis)."""
    g = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["b", "s", "z"], ["y"], name="bias")], "b", [],
        [helper.make_tensor_value_info("y", 1, [4])],
        [numpy_helper.from_array(np.arange(4, dtype=np.int32) - 2, "b"),
         numpy_helper.from_array(np.array([0.5], np.float32), "s"),
         numpy_helper.from_array(np.int32(0), "z")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    graph = import_onnx(model)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {})[0]
    np.testing.assert_array_equal(run_graph(graph, {})["y"], want)
