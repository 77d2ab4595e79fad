"""fuse_qconv_programs: a QDQ residual block's DequantizeLinear → Add → Relu → QuantizeLinear
after its last conv becomes that conv's epilogue (FusedQLinearConv), whose reference, its
export back to standard ONNX and its generated kernel in a compiled plan all give ONNX
Runtime's output on the file bit for bit."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tests.passes.test_fold_qdq import run_graph
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.ops import run_reference
from woodpecker.passes import optimize

C, HW = 16, 6


def _block(seed: int = 0, act=np.uint8, quantized_r: bool = False, out_scale: float = 0.1
           ) -> bytes:
    """x, r (1, 16, 6, 6) quantized; conv(x) + r → Relu → quantized → dequantized out
    (`quantized_r`: r an 8-bit input of the file, no QuantizeLinear of its own)."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(act)
    zp = lambda: np.asarray(rng.integers(info.min // 2, info.max // 2 + 1), act)  # noqa: E731
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (rng.integers(-64, 64, (C, C, 3, 3)).astype(np.int8), "wq"),
        (rng.uniform(0.002, 0.01, C).astype(np.float32), "ws"), (np.zeros(C, np.int8), "wz"),
        (np.float32(0.03), "xs"), (zp(), "xz"), (np.float32(0.05), "rs"), (zp(), "rz"),
        (np.float32(0.2), "ys"), (zp(), "yz"), (np.float32(out_scale), "os"), (zp(), "oz"))]
    q = lambda x, s, z, y: helper.make_node("QuantizeLinear", [x, s, z], [y])  # noqa: E731
    dq = lambda x, s, z, y, **kw: helper.make_node("DequantizeLinear", [x, s, z], [y], **kw)  # noqa: E731,E501
    nodes = [q("x", "xs", "xz", "xq"), dq("xq", "xs", "xz", "xd"),
             dq("wq", "ws", "wz", "wd", axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["y"], pads=[1, 1, 1, 1]),
             q("y", "ys", "yz", "yq"), dq("yq", "ys", "yz", "yd"),
             *([] if quantized_r else [q("r", "rs", "rz", "rq")]), dq("rq", "rs", "rz", "rd"),
             helper.make_node("Add", ["yd", "rd"], ["s"]), helper.make_node("Relu", ["s"], ["a"]),
             q("a", "os", "oz", "aq"), dq("aq", "os", "oz", "out")]
    shape = [1, C, HW, HW]
    r = helper.make_tensor_value_info("rq", helper.np_dtype_to_tensor_dtype(np.dtype(act)),
                                      shape) if quantized_r else \
        helper.make_tensor_value_info("r", TensorProto.FLOAT, shape)
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         shape), r],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


def _feeds(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {n: (rng.standard_normal((1, C, HW, HW)) * 2).astype(np.float32) for n in "xr"}


def _fused(graph):
    return next(n for n in graph.nodes if n.op == "FusedQLinearConv")


def test_the_residual_group_runs_in_the_conv_as_onnx_runtime_does():
    for act in (np.uint8, np.int8):
        model = _block(1, act)
        graph = import_onnx(model)
        assert optimize(graph)["fuse_qconv_programs"] == 1
        node = _fused(graph)
        # r's own Q/DQ and the output's Q/DQ join the group too: the node's output is float
        ops = [s["op"] for s in node.attrs["program"]]
        assert {"QuantizeLinear", "Add", "Relu"} <= set(ops) and ops[-1] == "DequantizeLinear"
        feeds = _feeds(2)
        want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
        np.testing.assert_array_equal(run_graph(graph, feeds)["out"], want[0])


def test_the_fused_node_exports_as_its_two_nodes():
    """Library engines run it from its parts (ops.registry.PARTS): the QLinearConv and the
    element-wise group, as standard ONNX."""
    from woodpecker.frontend.onnx_export import nodes_model

    graph = import_onnx(_block(3))
    optimize(graph)
    node = _fused(graph)
    runtime = [v for v in node.inputs if v is not None and v.data is None]
    model = nodes_model([node], runtime, node.outputs, 19)
    assert "FusedQLinearConv" not in {p.op_type for p in model.graph.node}
    rng = np.random.default_rng(4)
    arrays = {v.name: rng.integers(0, 256, v.shape).astype(v.dtype) for v in runtime}
    got = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, arrays)[0]
    want = run_reference(node, [arrays[v.name] if v is not None and v.data is None else
                                None if v is None else v.data for v in node.inputs])[0]
    np.testing.assert_array_equal(got, want)


def test_a_compiled_plan_runs_the_fused_conv_on_its_kernel(tmp_path):
    import woodpecker
    from woodpecker.options import TuneOptions

    model = _block(5)
    compiled = woodpecker.compile(model, engines=("halide", "numpy"),
                                  tune=TuneOptions(budget="30s", max_trials=2),
                                  tuning_log=str(tmp_path / "log.jsonl"))
    node = _fused(compiled.plan.graph)
    assert compiled.plan.choices[node.name].engine == "halide"
    feeds = _feeds(6)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(compiled.run(feeds)["out"], want[0])
