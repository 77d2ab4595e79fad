"""Static int8 MatMul and Gemm (issue 53): fold_qdq turns a QDQ file's DequantizeLinear →
MatMul/Gemm → QuantizeLinear into one QLinearDense whose integer reference equals ONNX
Runtime's output on the file bit for bit (hypothesis over shapes, leading dimensions, per-tensor
and per-column weights, Gemm's transposed weights and int32 bias, uint8/int8 activations); the
qconv templates compute it as a 1×1 conv (tasks/qconv.QMatMulTask) exactly, reading the
(…, K) rows and writing the (…, N) output through views; a compiled QDQ MLP runs its products
on those kernels with ONNX Runtime's output, and on the libraries through the QDQ form the
node is exported as; patterns that are not exact stay as they are."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tests.engines.test_halide_qdq_elementwise import _residual_task
from tests.passes.test_fold_qdq import quant_params, run_graph
from woodpecker.engines.halide import qconv_amx, qconv_gemm
from woodpecker.engines.halide.host import host_has_amx
from woodpecker.engines.halide.templates import kernel_arguments, templates_for
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.ops.quant_dense import FUSED, OP
from woodpecker.passes import optimize
from woodpecker.tasks import task_from_node
from woodpecker.tasks.qconv import QMatMulTask

T = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}


def _model(rng, lead: tuple, k: int, n: int, gemm: bool = False, trans: bool = False,
           per_column: bool = True, bias: bool = False, act=np.uint8,
           alpha: float = 1.0) -> bytes:
    """x (float, lead + (K,)) → Q → DQ → MatMul (or Gemm) with DQ'd int8 weights [+ DQ'd
    int32 bias] → Q → DQ → out."""
    w = rng.integers(-64, 64, (n, k) if trans else (k, n)).astype(np.int8)  # 7 bits: AVX2 pairs
    ws, xs, xz, ys, yz = quant_params(rng, act, n if per_column else 1)
    inits = [numpy_helper.from_array(a, name) for a, name in (
        (w, "wq"), (ws if per_column else ws.reshape(()), "ws"),
        (np.zeros(ws.shape, np.int8) if per_column else np.int8(0), "wz"),
        (xs, "xs"), (xz, "xz"), (ys, "ys"), (yz, "yz"))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"],
                              axis=0 if trans else 1)]
    inputs = ["xd", "wd"]
    if bias:
        inits += [numpy_helper.from_array(rng.integers(-5000, 5000, n).astype(np.int32), "bq"),
                  numpy_helper.from_array((xs * ws).astype(np.float32).reshape(-1)
                                          if per_column else np.float32(xs * ws[0]), "bs"),
                  numpy_helper.from_array(np.zeros(n, np.int32) if per_column else np.int32(0),
                                          "bz")]
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], axis=0))
        inputs.append("bd")
    nodes += [helper.make_node("Gemm", inputs, ["y"], transB=int(trans), alpha=alpha, name="mm")
              if gemm else helper.make_node("MatMul", inputs, ["y"], name="mm"),
              helper.make_node("QuantizeLinear", ["y", "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"])]
    g = helper.make_graph(
        nodes, "qdense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*lead, k])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [*lead, n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


def _ort(model: bytes, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_folded_matmul_equals_onnx_runtime(data):
    gemm = data.draw(st.booleans())
    lead = (data.draw(st.integers(1, 9)),) if gemm else \
        tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    args = dict(lead=lead, k=data.draw(st.integers(1, 40)), n=data.draw(st.integers(1, 40)),
                gemm=gemm, trans=gemm and data.draw(st.booleans()),
                per_column=data.draw(st.booleans()), bias=gemm and data.draw(st.booleans()),
                act=data.draw(st.sampled_from([np.uint8, np.int8])))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    model = _model(rng, **args)
    graph = import_onnx(model)
    assert optimize(graph)["fold_qdq"] == 1
    assert not {"MatMul", "Gemm"} & {n.op for n in graph.nodes}
    node = next(n for n in graph.nodes if n.op == OP)
    assert isinstance(task_from_node(node), QMatMulTask)
    x = (rng.standard_normal((*lead, args["k"])) * 2).astype(np.float32)
    np.testing.assert_array_equal(run_graph(graph, {"x": x})["out"], _ort(model, x))


@pytest.mark.parametrize("change", ["alpha", "transA", "read elsewhere"])
def test_what_is_not_exact_stays(change):
    rng = np.random.default_rng(0)
    proto = onnx.load_from_string(_model(rng, (8,), 8, 8, gemm=True, bias=True,
                                         alpha=0.5 if change == "alpha" else 1.0))
    mm = next(n for n in proto.graph.node if n.name == "mm")
    if change == "transA":
        mm.attribute.append(helper.make_attribute("transA", 1))     # square: shapes hold
    elif change == "read elsewhere":
        proto.graph.node.append(helper.make_node("Relu", ["y"], ["side"]))
        proto.graph.output.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, [8, 8]))
    graph = import_onnx(proto)
    assert optimize(graph)["fold_qdq"] == 0
    assert "Gemm" in {n.op for n in graph.nodes}


TEMPLATES = [qconv_gemm, pytest.param(qconv_amx, marks=pytest.mark.skipif(
    not host_has_amx(), reason="no AMX on this host"))]


@pytest.mark.parametrize("template", TEMPLATES, ids=["vnni", "amx"])
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_the_conv_templates_compute_it_exactly(template, data):
    """Every valid config of a sampled task, the rows given as the node has them ((…, K)),
    the output read back as (…, N)."""
    lead = tuple(data.draw(st.lists(st.integers(1, 24), min_size=1, max_size=2)))
    m, k, n = int(np.prod(lead)), data.draw(st.integers(1, 70)), data.draw(st.integers(1, 40))
    task = QMatMulTask(1, k, 1, m, n, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1),
                       x_dtype=data.draw(st.sampled_from(["uint8", "int8"])),
                       y_dtype=data.draw(st.sampled_from(["uint8", "int8"])),
                       has_bias=data.draw(st.booleans()))
    program = data.draw(st.sampled_from(["none", "bias", "residual"]))
    if program == "bias":              # DQ → Add one value per column → Q (fuse_qdense_program)
        task = replace(task, program=_bias_program(task.y_dtype), consts=4 + n)
    elif program == "residual":        # DQ → Add DQ(a second 8-bit input) → Q
        extra = data.draw(st.sampled_from(["uint8", "int8"]))
        task = replace(task, program=_residual_task(task.y_dtype, extra, data.draw(
            st.sampled_from(["uint8", "int8"])), False, 1, 1, 1).program, extra=(extra,),
            consts=6)
    configs = list(template.space(task).valid_configs()) if template.supports(task) else []
    if not configs:
        return
    config = data.draw(st.sampled_from(configs))
    inputs = task.random_inputs(data.draw(st.integers(0, 1000)))
    want = task.reference(inputs)
    inputs[0] = inputs[0].reshape(*lead, k)
    if task.extra:                     # the residual as the node has it, (…, N)
        inputs[8 + task.has_bias] = inputs[8 + task.has_bias].reshape(*lead, n)
    kernel = template.build(task, config, threads=2)
    got = kernel(*kernel_arguments(template, task, config, inputs))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.reshape(want.shape), want)


def _bias_program(a: str) -> tuple:
    return (("DequantizeLinear", (("in", 0), ("const", 0), ("const", 1)), (("dtype", a),)),
            ("Add", (("step", 0), ("channel", 4)), ()),
            ("QuantizeLinear", (("step", 1), ("const", 2), ("const", 3)), (("dtype", a),)))


def test_the_int8_conv_templates_are_offered():
    task = QMatMulTask(1, 64, 1, 32, 48, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1))
    assert "qconv_gemm" in templates_for(task)
    assert ("qconv_amx" in templates_for(task)) == host_has_amx()
    assert "qconv_depthwise" not in templates_for(task)


def _mlp(tmp_path, rng) -> tuple:
    """A QDQ MLP as ONNX Runtime's static quantizer writes it: MatMul + Add, Relu, Gemm with a
    bias (per-column int8 weights, uint8 activations)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from woodpecker.quantization.ptq import FeedReader

    w1, b1 = rng.standard_normal((64, 96)) * 0.2, rng.standard_normal(96) * 0.1
    w2, b2 = rng.standard_normal((40, 96)) * 0.2, rng.standard_normal(40) * 0.1
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("Reshape", ["r1", "shape"], ["r2"]),
             helper.make_node("Gemm", ["r2", "w2", "b2"], ["y"], transB=1)]
    inits = [numpy_helper.from_array(a.astype(np.float32), name)
             for a, name in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", 1, [2, 16, 64])],
                          [helper.make_tensor_value_info("y", 1, [32, 40])],
                          inits + [numpy_helper.from_array(np.array([32, 96]), "shape")])
    fp32, int8 = tmp_path / "mlp.onnx", tmp_path / "mlp_int8.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), fp32)
    feeds = [{"x": rng.standard_normal((2, 16, 64)).astype(np.float32)} for _ in range(8)]
    quantize_static(str(fp32), str(int8), FeedReader(feeds), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, extra_options={"ActivationSymmetric": False})
    return int8, {"x": rng.standard_normal((2, 16, 64)).astype(np.float32)}


def test_a_quantized_mlp_runs_its_products_on_the_int8_kernels(tmp_path):
    """Tuned briefly on generated kernels and numpy alone (no speed asserted): both products
    fold and run on the conv templates' kernels; the plan's output, and the saved plan's,
    equal ONNX Runtime's on the same file bit for bit."""
    import woodpecker
    from woodpecker.options import TuneOptions

    path, feeds = _mlp(tmp_path, np.random.default_rng(5))
    model = woodpecker.compile(str(path), engines=("halide", "numpy"),
                               tune=TuneOptions(budget="30s", max_trials=2),
                               tuning_log=str(tmp_path / "log.jsonl"))
    # the MatMul's bias Add after it joins its epilogue; the Gemm holds its bias
    dense = [n for n in model.plan.graph.nodes if n.op in (OP, FUSED)]
    assert sorted(n.op for n in dense) == [FUSED, OP]
    assert {model.plan.choices[n.name].engine for n in dense} == {"halide"}
    assert {model.plan.choices[n.name].kernel.template for n in dense} <= \
        {"qconv_gemm", "qconv_amx"}
    want = _ort(path.read_bytes(), feeds["x"])
    np.testing.assert_array_equal(model.run(feeds)["y"], want)
    model.save(tmp_path / "plan")
    np.testing.assert_array_equal(woodpecker.load(tmp_path / "plan").run(feeds)["y"], want)


def test_a_library_runs_the_node_as_its_qdq_form(tmp_path):
    """On ONNX Runtime alone the folded nodes are exported as DequantizeLinear → MatMul [→
    Add] → QuantizeLinear, which it fuses back into its integer kernels: the same output."""
    import woodpecker

    path, feeds = _mlp(tmp_path, np.random.default_rng(6))
    model = woodpecker.compile(str(path), engines=("onnxruntime", "numpy"))
    assert {OP, FUSED} <= {n.op for n in model.plan.graph.nodes}
    np.testing.assert_array_equal(model.run(feeds)["y"], _ort(path.read_bytes(), feeds["x"]))


def test_a_projection_with_bias_and_residual_fuses_into_one_node(tmp_path):
    """A transformer's output projection as ONNX Runtime's static quantizer writes it —
    DQ → MatMul → Q, DQ → Add bias → Q, DQ → Add the block's input (its own DQ) → Q — is one
    FusedQLinearDense whose program holds both additions; its reference, its kernel through
    the engine's plan, and ONNX Runtime agree bit for bit."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    import woodpecker
    from woodpecker.options import TuneOptions
    from woodpecker.quantization.ptq import FeedReader

    rng = np.random.default_rng(7)
    w, b = rng.standard_normal((48, 48)) * 0.2, rng.standard_normal(48) * 0.1
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Add", ["a", "x"], ["y"])]
    g = helper.make_graph(nodes, "proj", [helper.make_tensor_value_info("x", 1, [1, 20, 48])],
                          [helper.make_tensor_value_info("y", 1, [1, 20, 48])],
                          [numpy_helper.from_array(w.astype(np.float32), "w"),
                           numpy_helper.from_array(b.astype(np.float32), "b")])
    fp32, int8 = tmp_path / "proj.onnx", tmp_path / "proj_int8.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), fp32)
    feeds = [{"x": rng.standard_normal((1, 20, 48)).astype(np.float32)} for _ in range(8)]
    quantize_static(str(fp32), str(int8), FeedReader(feeds), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    graph = import_onnx(str(int8))
    assert optimize(graph)["fuse_qdense_programs"] == 1
    node = next(n for n in graph.nodes if n.op == FUSED)
    assert [s["op"] for s in node.attrs["program"]].count("Add") == 2
    x = {"x": rng.standard_normal((1, 20, 48)).astype(np.float32)}
    want = _ort(int8.read_bytes(), x["x"])
    np.testing.assert_array_equal(run_graph(graph, x)["y"], want)
    model = woodpecker.compile(str(int8), engines=("halide", "numpy"),
                               tune=TuneOptions(budget="20s", max_trials=2),
                               tuning_log=str(tmp_path / "log.jsonl"))
    fused = next(n for n in model.plan.graph.nodes if n.op == FUSED)
    assert model.plan.choices[fused.name].engine == "halide"
    np.testing.assert_array_equal(model.run(x)["y"], want)
