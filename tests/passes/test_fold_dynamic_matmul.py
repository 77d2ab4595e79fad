"""fold_dynamic_matmul: ONNX Runtime's dynamic quantizer's DynamicQuantizeLinear → MatMulInteger
→ Cast → Mul [→ Add] becomes one DynamicQuantizeMatMul per MatMul, whose reference equals ONNX
Runtime's output on the quantized file (hypothesis over shapes, per-tensor and per-column
weights, biases, a quantized input shared by several MatMuls); chains that do not match stay."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from tests.passes.test_fold_qdq import run_graph
from woodpecker.errors import ModelError
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.ops.quant_matmul import dynamic_quantize_linear
from woodpecker.passes import optimize


def _float_model(rng, rows: int, k: int, n: int, heads: int, bias: bool, path,
                 relu: bool = False) -> None:
    """x (1, rows, k) → `heads` MatMuls sharing x (each + bias if asked, then Relu)."""
    nodes, inits, outs = [], [], []
    for h in range(heads):
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{h}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{h}"], [f"m{h}"]))
        out = f"m{h}"
        if bias:
            inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32),
                                                 f"b{h}"))
            nodes.append(helper.make_node("Add", [f"m{h}", f"b{h}"], [f"a{h}"]))
            out = f"a{h}"
        if relu:
            nodes.append(helper.make_node("Relu", [out], [f"r{h}"]))
            out = f"r{h}"
        outs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, rows, n]))
    g = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, rows, k])], outs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())


def _session(model) -> ort.InferenceSession:
    """ONNX Runtime without graph optimizations (its fused contrib kernels round otherwise) on
    a file path or a ModelProto."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    source = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    return ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 9), k=st.integers(1, 40), n=st.integers(1, 24),
       heads=st.integers(1, 3), bias=st.booleans(), per_channel=st.booleans(),
       seed=st.integers(0, 2**16))
def test_folded_matmul_equals_onnx_runtime(tmp_path_factory, rows, k, n, heads, bias,
                                           per_channel, seed):
    folder = tmp_path_factory.mktemp("dyn")
    rng = np.random.default_rng(seed)
    _float_model(rng, rows, k, n, heads, bias, folder / "f.onnx")
    quantize_dynamic(folder / "f.onnx", folder / "q.onnx", weight_type=QuantType.QInt8,
                     per_channel=per_channel)
    x = (rng.standard_normal((1, rows, k)) * rng.uniform(0.1, 5)
         + rng.uniform(-1, 1)).astype(np.float32)
    graph = import_onnx(str(folder / "q.onnx"))
    assert optimize(graph)["fold_dynamic_matmul"] == heads
    ops = {n.op for n in graph.nodes}
    assert "MatMulInteger" not in ops and "DynamicQuantizeLinear" not in ops
    got = run_graph(graph, {"x": x})
    want = _session(folder / "q.onnx").run(None, {"x": x})
    for v, w in zip(graph.outputs, want):
        np.testing.assert_array_equal(got[v.name], w)


def test_the_unfolded_ops_equal_onnx_runtime_too(tmp_path):
    """DynamicQuantizeLinear and MatMulInteger are IR ops of their own: a chain that does not
    fold (here the accumulator is a graph output) runs on their references, exactly."""
    rng = np.random.default_rng(1)
    _float_model(rng, 5, 12, 8, 1, False, tmp_path / "f.onnx")
    quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", weight_type=QuantType.QInt8)
    import onnx

    m = onnx.load(str(tmp_path / "q.onnx"))
    acc = next(n.output[0] for n in m.graph.node if n.op_type == "MatMulInteger")
    m.graph.output.append(helper.make_tensor_value_info(acc, TensorProto.INT32, [1, 5, 8]))
    onnx.save(m, str(tmp_path / "q2.onnx"))
    graph = import_onnx(str(tmp_path / "q2.onnx"))
    assert optimize(graph)["fold_dynamic_matmul"] == 0
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= {n.op for n in graph.nodes}
    x = rng.standard_normal((1, 5, 12)).astype(np.float32)
    got = run_graph(graph, {"x": x})
    want = _session(tmp_path / "q2.onnx").run(None, {"x": x})
    for v, w in zip(graph.outputs, want):
        np.testing.assert_array_equal(got[v.name], w)


def test_constant_input_quantizes_like_onnx_runtime():
    """Edge values: all zeros (scale 1), all positive (zero point 0), halves of a step."""
    for x in (np.zeros((3, 4), np.float32), np.linspace(0.5, 3, 12, dtype=np.float32),
              np.linspace(-2, 0, 12, dtype=np.float32),
              np.array([-1.0, 0.0, 1.0, 254 / 510, 0.5], np.float32)):
        g = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["x"],
                                                ["y", "s", "z"])], "d",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(v, t, s) for v, t, s in
                               (("y", TensorProto.UINT8, x.shape), ("s", TensorProto.FLOAT, []),
                                ("z", TensorProto.UINT8, []))])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        want = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})
        for a, b in zip(dynamic_quantize_linear({}, x), want):
            np.testing.assert_array_equal(np.asarray(a), b)


def test_mixed_zero_point_type_is_one_line():
    g = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"], name="mmi")], "m",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 4])],
        [numpy_helper.from_array(np.ones((3, 4), np.int8), "b"),
         numpy_helper.from_array(np.int8(0), "az"), numpy_helper.from_array(np.int8(0), "bz")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match="mmi.*must have one type"):
        import_onnx(model.SerializeToString())


def test_folded_nodes_export_back_to_standard_onnx(tmp_path):
    """A DynamicQuantizeMatMul — with a fused epilogue too — exports as the standard ops it
    stands for (library engines run it so), and ONNX Runtime computes its reference."""
    from woodpecker.frontend.onnx_export import nodes_model
    from woodpecker.ops import run_reference

    rng = np.random.default_rng(2)
    _float_model(rng, 6, 20, 16, 2, True, tmp_path / "f.onnx", relu=True)
    quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", weight_type=QuantType.QInt8,
                     per_channel=True)
    graph = import_onnx(str(tmp_path / "q.onnx"))
    optimize(graph)
    nodes = [n for n in graph.nodes if n.op == "FusedDynamicQuantizeMatMul"]
    assert len(nodes) == 2
    x = rng.standard_normal((1, 6, 20)).astype(np.float32)
    for node in nodes:
        model = nodes_model([node], [node.inputs[0]], node.outputs, 17)
        assert "DynamicQuantizeMatMul" not in {p.op_type for p in model.graph.node}
        got = _session(model).run(None, {node.inputs[0].name: x})[0]
        want = run_reference(node, [x] + [None if v is None else v.data
                                          for v in node.inputs[1:]])[0]
        np.testing.assert_array_equal(got, want)


def test_a_product_reshaped_to_2d_and_back_folds_with_its_activation(tmp_path):
    """The 2-d Gemm form (x reshaped to rows, the product reshaped back, then Relu) folds into
    one node reading x and writing the activation, and keeps ONNX Runtime's output."""
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((12, 16)) / 4).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([10, 12], np.int64), "rows"),
             numpy_helper.from_array(np.array([2, 5, 16], np.int64), "back")]
    nodes = [helper.make_node("Reshape", ["x", "rows"], ["x2"]),
             helper.make_node("MatMul", ["x2", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Reshape", ["a", "back"], ["a3"]),
             helper.make_node("Relu", ["a3"], ["y"])]
    g = helper.make_graph(nodes, "gemm", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 5, 12])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [2, 5, 16])], inits)
    (tmp_path / "f.onnx").write_bytes(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", weight_type=QuantType.QInt8)
    graph = import_onnx(str(tmp_path / "q.onnx"))
    optimize(graph)
    assert [n.op for n in graph.nodes] == ["FusedDynamicQuantizeMatMul"]
    assert graph.nodes[0].inputs[0] is graph.inputs[0]
    x = rng.standard_normal((2, 5, 12)).astype(np.float32)
    np.testing.assert_array_equal(run_graph(graph, {"x": x})["y"],
                                  _session(tmp_path / "q.onnx").run(None, {"x": x})[0])


def test_a_per_row_zero_point_of_a_stays_with_the_libraries():
    """ONNX allows one zero point of A per row; Woodpecker leaves that MatMulInteger opaque
    (run by a library) rather than refusing the model."""
    g = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"], name="mmi")], "m",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 4])],
        [numpy_helper.from_array(np.ones((3, 4), np.int8), "b"),
         numpy_helper.from_array(np.array([1, 2], np.uint8), "az")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = import_onnx(model.SerializeToString())
    assert [n.op for n in graph.nodes] == ["Opaque"]
    assert "per-row zero point" in graph.nodes[0].attrs["why"]
