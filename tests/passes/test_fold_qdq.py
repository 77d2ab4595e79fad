"""fold_qdq: DequantizeLinear → Conv → QuantizeLinear becomes one QLinearConv whose integer
reference equals ONNX Runtime's output on the QDQ file bit for bit (hypothesis over shapes,
groups, strides, pads, zero points, per-tensor and per-channel weights, biases); a max pool,
reshape, transpose, … between matching Q/DQ runs on the 8-bit tensor; patterns that are not
exact stay as they are (static MatMul/Gemm: tests/engines/test_halide_qmatmul.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.ops import run_reference
from woodpecker.passes import optimize

T = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}


def quant_params(rng, act, channels: int) -> tuple:
    """Weight scales (`channels` of them: saturation and rounding both exercised), the input's
    scale and zero point and the output's, as a QDQ file holds them."""
    ws = (10.0 ** rng.uniform(-3, -1, channels)).astype(np.float32)
    info = np.iinfo(act)
    xs = np.float32(10.0 ** rng.uniform(-2, 0))
    xz = np.asarray(rng.integers(info.min, info.max + 1), act)
    ys = np.float32(10.0 ** rng.uniform(-1, 1))
    yz = np.asarray(rng.integers(info.min, info.max + 1), act)
    return ws, xs, xz, ys, yz


def _model(rng, n, c, m, hw, k, groups, stride, pad, act, per_channel, bias,
           conv_reads_elsewhere=False) -> bytes:
    w = rng.integers(-64, 64, (m, c // groups, k, k)).astype(np.int8)  # 7 bits: no AVX2 u8s8
    ws, xs, xz, ys, yz = quant_params(rng, act, m if per_channel else 1)
    inits = [numpy_helper.from_array(a, name) for a, name in (
        (w, "wq"), (ws if per_channel else ws.reshape(()), "ws"), (np.zeros(ws.shape, np.int8)
                                                                  if per_channel else
                                                                  np.int8(0), "wz"),
        (xs, "xs"), (xz, "xz"), (ys, "ys"), (yz, "yz"))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0)]
    conv_in = ["xd", "wd"]
    if bias:
        bq = rng.integers(-5000, 5000, m).astype(np.int32)
        inits += [numpy_helper.from_array(bq, "bq"),
                  numpy_helper.from_array((xs * ws).astype(np.float32).reshape(-1)
                                          if per_channel else np.float32(xs * ws[0]), "bs"),
                  numpy_helper.from_array(np.zeros(m, np.int32) if per_channel else
                                          np.int32(0), "bz")]
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], axis=0))
        conv_in.append("bd")
    nodes += [helper.make_node("Conv", conv_in, ["y"], group=groups, strides=[stride] * 2,
                               pads=[pad] * 4, name="conv"),
              helper.make_node("QuantizeLinear", ["y", "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"])]
    o = (hw + 2 * pad - k) // stride + 1
    shape = [n, m, o, o]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)]
    if conv_reads_elsewhere:
        nodes.append(helper.make_node("Relu", ["y"], ["side"]))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, shape))
    g = helper.make_graph(nodes, "qconv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])],
                          outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


def run_graph(graph, feeds: dict) -> dict:
    """The graph's outputs by name, every node on its numpy reference."""
    vals = dict(feeds)
    for node in graph.nodes:
        ins = [None if v is None else (v.data if v.data is not None else vals[v.name])
               for v in node.inputs]
        for v, o in zip(node.outputs, run_reference(node, ins)):
            vals[v.name] = o
    return {v.name: vals[v.name] for v in graph.outputs}


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_folded_conv_equals_onnx_runtime(data):
    groups = data.draw(st.sampled_from([1, 2, 4]))
    c = groups * data.draw(st.integers(1, 3))
    m = groups * data.draw(st.integers(1, 3))
    k = data.draw(st.sampled_from([1, 3]))
    args = dict(n=data.draw(st.integers(1, 2)), c=c, m=m, hw=data.draw(st.integers(k, 7)), k=k,
                groups=groups, stride=data.draw(st.integers(1, 2)),
                pad=data.draw(st.integers(0, k // 2)),
                act=data.draw(st.sampled_from([np.uint8, np.int8])),
                per_channel=data.draw(st.booleans()), bias=data.draw(st.booleans()))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    model = _model(rng, **args)
    x = (rng.standard_normal((args["n"], c, args["hw"], args["hw"])) * 2).astype(np.float32)
    graph = import_onnx(model)
    assert optimize(graph)["fold_qdq"] == 1
    assert "Conv" not in {n.op for n in graph.nodes}
    # its output's DequantizeLinear joins it (passes/fuse_qconv_program.py) but after a
    # depthwise conv
    assert {"QLinearConv", "FusedQLinearConv"} & {n.op for n in graph.nodes}
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(run_graph(graph, {"x": x})["out"], want[0])


def test_a_conv_read_by_more_than_its_quantize_stays():
    rng = np.random.default_rng(0)
    model = _model(rng, 1, 4, 4, 5, 3, 1, 1, 1, np.uint8, True, True, conv_reads_elsewhere=True)
    graph = import_onnx(model)
    assert optimize(graph)["fold_qdq"] == 0
    assert "Conv" in {n.op for n in graph.nodes}


def test_a_bias_of_another_scale_stays():
    """A bias whose scale is not x_scale·w_scale cannot be added to the integer sums."""
    import onnx

    rng = np.random.default_rng(1)
    proto = onnx.load_from_string(_model(rng, 1, 4, 4, 5, 3, 1, 1, 1, np.uint8, False, True))
    for t in proto.graph.initializer:
        if t.name == "bs":
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(3), "bs"))
    graph = import_onnx(proto)
    assert optimize(graph)["fold_qdq"] == 0


def _pool_model(dtype, zp: int, scale_out: float, pads: int) -> bytes:
    """x (8-bit) → DequantizeLinear → MaxPool 3×3/2 → QuantizeLinear (scale_out, same zp)."""
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]),
             helper.make_node("MaxPool", ["xf"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[pads] * 4),
             helper.make_node("QuantizeLinear", ["p", "so", "z"], ["y"])]
    out = (5 + 2 * pads - 3) // 2 + 1
    graph = helper.make_graph(
        nodes, "pool", [helper.make_tensor_value_info("x", T[np.dtype(dtype)], [1, 8, 5, 5])],
        [helper.make_tensor_value_info("y", T[np.dtype(dtype)], [1, 8, out, out])],
        [numpy_helper.from_array(np.float32(0.05), "s"),
         numpy_helper.from_array(np.float32(scale_out), "so"),
         numpy_helper.from_array(np.array(zp, dtype), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


def test_a_maxpool_between_matching_qdq_runs_on_the_8_bit_tensor():
    """DQ → MaxPool → Q with one scale and zero point is a MaxPool of the 8-bit input: equal
    to ONNX Runtime's output on the QDQ file, padding included; another output scale stays."""
    rng = np.random.default_rng(4)
    for dtype, zp, pads in ((np.uint8, 131, 1), (np.int8, -7, 0), (np.uint8, 255, 1)):
        model = _pool_model(dtype, zp, 0.05, pads)
        graph = import_onnx(model)
        assert optimize(graph)["fold_qdq"] == 1
        assert [n.op for n in graph.nodes] == ["MaxPool"]
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max + 1, (1, 8, 5, 5)).astype(dtype)
        want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None,
                                                                                   {"x": x})
        np.testing.assert_array_equal(run_graph(graph, {"x": x})["y"], want[0])
    assert optimize(import_onnx(_pool_model(np.uint8, 3, 0.1, 1)))["fold_qdq"] == 0


def _move_model(op: str, dtype, scale_out: float) -> bytes:
    """x (8-bit, 2×6×4) → DequantizeLinear → `op` → QuantizeLinear (scale_out, same zp)."""
    ins, attrs, inits, shape = ["xf"], {}, [], None
    if op == "Reshape":
        ins.append("shape")
        inits.append(numpy_helper.from_array(np.array([2, 3, 8], np.int64), "shape"))
        shape = [2, 3, 8]
    elif op in ("Squeeze", "Unsqueeze"):
        ins.append("axes")
        inits.append(numpy_helper.from_array(np.array([0 if op == "Unsqueeze" else 1],
                                                      np.int64), "axes"))
        shape = [1, 2, 6, 4] if op == "Unsqueeze" else None
    elif op == "Transpose":
        attrs, shape = {"perm": [0, 2, 1]}, [2, 4, 6]
    elif op == "Flatten":
        attrs, shape = {"axis": 2}, [12, 4]
    x_shape = [2, 1, 24] if op == "Squeeze" else [2, 6, 4]
    shape = shape or [2, 24]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]),
             helper.make_node(op, ins, ["m"], **attrs),
             helper.make_node("QuantizeLinear", ["m", "so", "z"], ["y"])]
    graph = helper.make_graph(
        nodes, "move", [helper.make_tensor_value_info("x", T[np.dtype(dtype)], x_shape)],
        [helper.make_tensor_value_info("y", T[np.dtype(dtype)], shape)],
        inits + [numpy_helper.from_array(np.float32(0.05), "s"),
                 numpy_helper.from_array(np.float32(scale_out), "so"),
                 numpy_helper.from_array(np.array(7, dtype), "z")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]) \
        .SerializeToString()


@pytest.mark.parametrize("op", ["Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_a_move_between_matching_qdq_moves_the_8_bit_tensor(op, dtype):
    """DQ → Reshape/Transpose/… → Q with one scale and zero point (a quantized transformer's
    head reshapes) is the op on the 8-bit input: ONNX Runtime's output bit for bit; another
    output scale stays."""
    model = _move_model(op, dtype, 0.05)
    graph = import_onnx(model)
    assert optimize(graph)["fold_qdq"] == 1
    assert [n.op for n in graph.nodes] == [op]
    info = np.iinfo(dtype)
    shape = [d.dim_value for d in onnx.load_from_string(model).graph.input[0].type
             .tensor_type.shape.dim]
    x = np.random.default_rng(0).integers(info.min, info.max + 1, shape).astype(dtype)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(run_graph(graph, {"x": x})["y"], want[0])
    assert optimize(import_onnx(_move_model(op, dtype, 0.1)))["fold_qdq"] == 0
