"""Each pass keeps the math: graph outputs before and after it agree on random inputs (and with
onnxruntime), and the pass really rewrote something."""

from __future__ import annotations

import random

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import woodpecker
from tests.helpers import conv_bn_relu_residual, make_model, ort_run, rand
from woodpecker.engines.halide.templates import template_module
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.passes import DEFAULT, optimize
from woodpecker.tune.extract import extract_tasks
from woodpecker.tune.records import TuningLog, TuningRecord


def _compile(model, passes, engines="numpy"):
    return woodpecker.compile(model, engines=engines, passes=passes, threads=1)


def _ops(compiled):
    return [n.op for n in compiled.graph.nodes]


def _conv_mean():
    """x → Conv → mean over H, W (keepdims 0), as torchvision's ShuffleNet v2 ends."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["c"], ["y"], axes=[2, 3], keepdims=0)]
    return make_model(nodes, [("x", [1, 8, 6, 6])], [("y", [1, 4])],
                      {"w": rand(4, 8, 3, 3, seed=1)})


def _relu_conv():
    """x → Relu → padded Conv (the ReLU becomes the conv's prologue)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1])]
    return make_model(nodes, [("x", [1, 8, 6, 6])], [("y", [1, 4, 6, 6])],
                      {"w": rand(4, 8, 3, 3, seed=1)})


def _renamed_axes():
    """x → Transpose of a size-1 axis → Unsqueeze → Reshape → Gather of one index → Relu, as
    PyTorch's attention exports its batch-first transposes and q/k/v split."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2, 3]),
             helper.make_node("Unsqueeze", ["t", "ax"], ["u"]),
             helper.make_node("Reshape", ["u", "shape"], ["r"]),
             helper.make_node("Gather", ["r", "i"], ["g"], axis=1),
             helper.make_node("Relu", ["g"], ["y"])]
    return make_model(nodes, [("x", [1, 8, 6, 6])], [("y", [1, 36])],
                      {"ax": np.array([0], np.int64), "shape": np.array([1, 8, 36], np.int64),
                       "i": np.array(-3, np.int64)})


def _scaled_attention():
    """x viewed as (48, 6): q = x/2, kᵀ = xᵀ/4, Relu(q·kᵀ)·w reshaped back and added to x, as
    PyTorch's attention scales q and kᵀ and adds its projected output to the layer's input."""
    nodes = [helper.make_node("Reshape", ["x", "rows"], ["a"]),
             helper.make_node("Mul", ["a", "half"], ["q"]),
             helper.make_node("Transpose", ["a"], ["at"], perm=[1, 0]),
             helper.make_node("Mul", ["quarter", "at"], ["kt"]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["p"]),
             helper.make_node("Reshape", ["p", "back"], ["pb"]),
             helper.make_node("Add", ["x", "pb"], ["y"])]
    return make_model(nodes, [("x", [1, 8, 6, 6])], [("y", [1, 8, 6, 6])],
                      {"rows": np.array([48, 6], np.int64), "half": np.array(0.5, np.float32),
                       "quarter": np.array([0.25], np.float32), "w": rand(48, 6, seed=1),
                       "back": np.array([1, 8, 6, 6], np.int64)})


def _shared_concats():
    """Three convs; Concat(a, b) and Concat(b, c), each read by a depthwise conv + ReLU, summed:
    SwiftNet's dense cell, where part b can be written in place in one Concat only."""
    inits = {f"w{p}": rand(4, 8, 3, 3, seed=i) for i, p in enumerate("abc")}
    inits.update({f"d{i}": rand(8, 1, 3, 3, seed=5 + i) for i in range(2)})
    nodes = [helper.make_node("Conv", ["x", f"w{p}"], [p], pads=[1, 1, 1, 1]) for p in "abc"]
    for i, parts in enumerate((["a", "b"], ["b", "c"])):
        nodes += [helper.make_node("Concat", parts, [f"cat{i}"], axis=1),
                  helper.make_node("Conv", [f"cat{i}", f"d{i}"], [f"dw{i}"], pads=[1, 1, 1, 1],
                                   group=8),
                  helper.make_node("Relu", [f"dw{i}"], [f"r{i}"])]
    nodes.append(helper.make_node("Add", ["r0", "r1"], ["y"]))
    return make_model(nodes, [("x", [1, 8, 6, 6])], [("y", [1, 8, 6, 6])], inits)


def _separable(activations: bool = False):
    """x → depthwise 3x3 conv → 1x1 conv; with `activations`, DARTS' and MobileNet's extras:
    a ReLU before the depthwise conv (its prologue), a ReLU between, a residual add of x."""
    nodes = [helper.make_node("Relu", ["x"], ["rx"])] if activations else []
    nodes += [helper.make_node("Conv", ["rx" if activations else "x", "wd", "bd"], ["d"],
                               pads=[1, 1, 1, 1], group=8)]
    if activations:
        nodes.append(helper.make_node("Relu", ["d"], ["rd"]))
    nodes.append(helper.make_node("Conv", ["rd" if activations else "d", "wp", "bp"],
                                  ["p" if activations else "y"]))
    if activations:
        nodes.append(helper.make_node("Add", ["p", "x"], ["y"]))
    return make_model(nodes, [("x", [1, 8, 6, 6])], [("y", [1, 8, 6, 6])],
                      {"wd": rand(8, 1, 3, 3, seed=1), "bd": rand(8, seed=2),
                       "wp": rand(8, 8, 1, 1, seed=3), "bp": rand(8, seed=4)})


def _conv_gelu(form: str = "A"):
    """A conv, then GELU in the erf form PyTorch exports below opset 20: form A (x · s) · 0.5
    (TorchScript exporter), B (0.5 · x) · s, C (0.5 · s) · x (dynamo exporter, DistilBERT);
    forms "tanh-B" (GPT-2's gelu_new, the cube a Pow) and "tanh-A" (the cube x · (x · x)):
    s = 1 + tanh(√(2/π) · (x + 0.044715 · x³))."""
    inits = {"w": rand(8, 8, 3, 3, seed=1) * 0.2, "r2": np.array(np.sqrt(2), np.float32),
             "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32),
             "three": np.array(3.0, np.float32), "k": np.array(0.044715, np.float32),
             "c": np.array(np.sqrt(2 / np.pi), np.float32)}
    tail = {"A": [("a", "s", "p"), ("p", "half", "y")],
            "B": [("half", "a", "p"), ("p", "s", "y")],
            "C": [("half", "s", "p"), ("a", "p", "y")]}[form[-1]]
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1])]
    if form.startswith("tanh"):
        nodes += [helper.make_node("Pow", ["a", "three"], ["cube"])] if form == "tanh-B" else \
            [helper.make_node("Mul", ["a", "a"], ["sq"]),
             helper.make_node("Mul", ["sq", "a"], ["cube"])]
        nodes += [helper.make_node("Mul", ["cube", "k"], ["kc"]),
                  helper.make_node("Add", ["a", "kc"], ["in"]),
                  helper.make_node("Mul", ["c", "in"], ["d"]),
                  helper.make_node("Tanh", ["d"], ["e"])]
    else:
        nodes += [helper.make_node("Div", ["a", "r2"], ["d"]),
                  helper.make_node("Erf", ["d"], ["e"])]
    nodes.append(helper.make_node("Add", ["e", "one"], ["s"]))
    nodes += [helper.make_node("Mul", [u, v], [out]) for u, v, out in tail]
    return make_model(nodes, [("x", [1, 8, 6, 6])], [("y", [1, 8, 6, 6])], inits)


@pytest.mark.parametrize("form", ["A", "B", "C", "tanh-A", "tanh-B"])
def test_each_exported_gelu_form_is_one_node(form):
    model = _conv_gelu(form)
    c = _compile(model, ("fuse_gelu",))
    assert _ops(c) == ["Conv", "Gelu"]
    assert c.graph.nodes[1].attrs.get("approximate", "none") == \
        ("tanh" if form.startswith("tanh") else "none")
    x = rand(1, 8, 6, 6, seed=3)
    np.testing.assert_allclose(c(x), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_tanh_of_another_cubic_or_a_shared_step_is_no_gelu():
    model = _conv_gelu("tanh-B")
    k = next(i for i in model.graph.initializer if i.name == "k")
    k.CopyFrom(numpy_helper.from_array(np.array(0.05, np.float32), "k"))
    assert "Gelu" not in _ops(_compile(model, ("fuse_gelu",)))
    model = _conv_gelu("tanh-B")      # the cube is also a graph output
    model.graph.output.append(helper.make_tensor_value_info("cube", 1, [1, 8, 6, 6]))
    assert "Gelu" not in _ops(_compile(model, ("fuse_gelu",)))


def _conv_tokens_gelu():
    """A conv whose output is flattened and transposed to tokens, then GELU (erf form):
    SegFormer's Mix-FFN."""
    model = _conv_gelu("C")
    model.graph.node[0].output[0] = "conv"
    model.graph.node.insert(1, helper.make_node("Reshape", ["conv", "flat"], ["f"]))
    model.graph.node.insert(2, helper.make_node("Transpose", ["f"], ["a"], perm=[0, 2, 1]))
    model.graph.initializer.append(numpy_helper.from_array(np.array([1, 8, 36], np.int64),
                                                           "flat"))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", 1, [1, 36, 8]))
    return model


@pytest.mark.parametrize("extra_reader", [False, True])
def test_an_activation_after_reshape_and_transpose_joins_the_conv(extra_reader):
    model = _conv_tokens_gelu()
    if extra_reader:   # the flattened conv output is also a graph output: nothing moves
        model.graph.output.append(helper.make_tensor_value_info("f", 1, [1, 8, 36]))
    c = _compile(model, DEFAULT)
    ops = _ops(c)
    if extra_reader:
        assert "Gelu" in ops
    else:
        assert ops == ["FusedConv", "Reshape", "Transpose"]
        assert [s["op"] for s in c.graph.nodes[0].attrs["epilogue"]] == ["Gelu"]
    x = rand(1, 8, 6, 6, seed=2)
    want = ort_run(model, {"x": x})
    for got, ref in zip(c.run({"x": x}).values(), want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_an_activation_after_a_matmuls_transpose_stays_where_it_is():
    """Moved into a batched product's epilogue, LeViT's HardSwish after its attention's P·V
    made the plan slower (passes/expose_epilogues.py): only a conv takes it."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]),
             helper.make_node("Transpose", ["p"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("HardSwish", ["t"], ["y"])]
    model = make_model(nodes, [("x", [1, 8, 6, 6])], [("y", [1, 6, 8, 6])],
                       {"w": rand(6, 6, seed=1)})
    c = _compile(model, DEFAULT)
    assert c.plan.meta["passes"]["expose_epilogues"] == 0
    assert _ops(c)[:2] == ["MatMul", "Transpose"]     # no epilogue: the activation follows
    x = rand(1, 8, 6, 6, seed=2)
    np.testing.assert_allclose(c(x), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def _rmsnorm(divide: bool = False):
    """T5's RMSNorm over the last axis: x · (1 / sqrt(mean(x²) + ε)) · w, or x / sqrt(…)."""
    inits = {"two": np.array(2.0, np.float32), "eps": np.array(1e-6, np.float32),
             "w": rand(6, seed=5)}
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["v"]),
             helper.make_node("Sqrt", ["v"], ["root"])]
    nodes += [helper.make_node("Div", ["x", "root"], ["n"])] if divide else \
        [helper.make_node("Reciprocal", ["root"], ["inv"]),
         helper.make_node("Mul", ["x", "inv"], ["n"])]
    nodes.append(helper.make_node("Mul", ["w", "n"], ["y"]))
    return make_model(nodes, [("x", [1, 8, 6, 6])], [("y", [1, 8, 6, 6])], inits)


def _any_config_log(model, path) -> str:
    """A tuning log giving each of `model`'s tasks a random valid config of its template."""
    graph = import_onnx(model)
    optimize(graph)
    log = TuningLog(path / "tuning.jsonl")
    for i, g in enumerate(extract_tasks(graph)):
        config = template_module(g.templates[0]).space(g.task).sample(random.Random(i))
        log.append(TuningRecord(task=g.task.key, template=g.templates[0], config=config,
                                cost_s=1e-4, error=None))
    return str(log.path)


@pytest.mark.parametrize("divide", [False, True])
@pytest.mark.parametrize("engines", ["numpy", "halide", "onnxruntime"])
def test_rmsnorm_is_one_node_on_every_engine(divide, engines, tmp_path):
    model = _rmsnorm(divide)
    if engines == "halide":
        pytest.importorskip("halide")
    log = _any_config_log(model, tmp_path) if engines == "halide" else None
    c = woodpecker.compile(model, engines=engines + ",numpy", threads=1, tuning_log=log)
    assert _ops(c) == ["RMSNormalization"] and c.plan.engines == [engines]
    x = rand(1, 8, 6, 6, seed=7)
    np.testing.assert_allclose(c(x), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_mean_over_another_axis_or_a_shared_square_is_no_rmsnorm():
    model = _rmsnorm()
    model.graph.node[1].attribute[0].ints[:] = [2]
    assert "RMSNormalization" not in _ops(_compile(model, DEFAULT))
    model = _rmsnorm()
    model.graph.output.append(helper.make_tensor_value_info("sq", 1, [1, 8, 6, 6]))
    assert "RMSNormalization" not in _ops(_compile(model, DEFAULT))


# passes that conv_bn_relu_residual lacks work for
def _qdq_conv():
    """A QDQ conv of `x` (1, 8, 6, 6): DequantizeLinear → Conv → QuantizeLinear."""
    import onnx

    from tests.passes.test_fold_qdq import _model

    return onnx.load_from_string(_model(np.random.default_rng(5), n=1, c=8, m=8, hw=6, k=3,
                                        groups=1, stride=1, pad=1, act=np.uint8,
                                        per_channel=True, bias=True))


def _matmul_bias(seed: int):
    """The float graph `x` (1, 8, 6, 6) times a (6, 8) matrix plus a bias, which the quantized
    product models below quantize."""
    rng = np.random.default_rng(seed)
    w = helper.make_tensor("w", TensorProto.FLOAT, [6, 8], rng.standard_normal(48).tolist())
    b = helper.make_tensor("b", TensorProto.FLOAT, [8], rng.standard_normal(8).tolist())
    return helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]),
                              helper.make_node("Add", ["m", "b"], ["y"])], "product",
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            [1, 8, 6, 6])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                            [1, 8, 6, 8])], [w, b])


def _dynamic_matmul():
    """`x` (1, 8, 6, 6) times a (6, 8) matrix plus a bias, dynamically quantized by ONNX
    Runtime's quantizer: DynamicQuantizeLinear → MatMulInteger → Cast → Mul → Add."""
    import tempfile
    from pathlib import Path

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    g = _matmul_bias(6)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "f.onnx", Path(tmp) / "q.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        return onnx.load(dst)


def _static_matmul():
    """`x` (1, 8, 6, 6) times a (6, 8) matrix plus a bias, statically quantized (QDQ) by ONNX
    Runtime's quantizer: the product and its bias Add between Q/DQ."""
    import tempfile
    from pathlib import Path

    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from woodpecker.quantization.ptq import FeedReader

    g = _matmul_bias(8)
    feeds = [{"x": rand(1, 8, 6, 6, seed=10 + i)} for i in range(4)]
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "f.onnx", Path(tmp) / "q.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
        quantize_static(src, dst, FeedReader(feeds), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return onnx.load(dst)


def _rows_qdq():
    """`x` seen as (8, 6, 6), quantized, plus a constant per last-axis value, requantized and
    dequantized: Q/DQ around an addition over a 3-d tensor."""
    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (np.array([8, 6, 6], np.int64), "rows"), (np.array([1, 8, 6, 6], np.int64), "back"),
        (np.float32(0.02), "s"), (np.uint8(128), "z"), (np.float32(0.03), "s2"),
        (np.uint8(120), "z2"), (rng.standard_normal(6).astype(np.float32), "bias"))]
    nodes = [helper.make_node("Reshape", ["x", "rows"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s", "z"], ["rd"]),
             helper.make_node("Add", ["rd", "bias"], ["a"]),
             helper.make_node("QuantizeLinear", ["a", "s2", "z2"], ["aq"]),
             helper.make_node("DequantizeLinear", ["aq", "s2", "z2"], ["ad"]),
             helper.make_node("Reshape", ["ad", "back"], ["y"])]
    g = helper.make_graph(nodes, "rows", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 8, 6, 6])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 8, 6, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


MODELS = {"reduce_mean_to_pool": _conv_mean, "fuse_prologues": _relu_conv,
          "simplify_reshapes": _renamed_axes, "expose_epilogues": _scaled_attention,
          "split_copied_concats": _shared_concats, "fuse_separable": _separable,
          "fuse_gelu": _conv_gelu, "fuse_rmsnorm": _rmsnorm, "fold_qdq": _qdq_conv,
          "fold_dynamic_matmul": _dynamic_matmul, "fuse_qconv_programs": _qdq_conv,
          "fuse_qdense_programs": _static_matmul, "fuse_row_elementwise": _rows_qdq}
# the passes a pass rewrites the output of (run before it, and in the graph it is compared with)
BEFORE = {"fuse_qconv_programs": ("fold_qdq", "fuse_elementwise"),
          "fuse_qdense_programs": ("fold_qdq", "fold_constants")}


@pytest.mark.parametrize("name", DEFAULT)
def test_each_pass_keeps_outputs(name):
    """Each pass on a model it rewrites: the outputs those of the graph without it and ONNX
    Runtime's (fold_qdq: ONNX Runtime computes the folded QLinearConv itself)."""
    model = MODELS.get(name, conv_bn_relu_residual)()
    base = _compile(model, BEFORE.get(name, ()))
    after = _compile(model, BEFORE.get(name, ()) + (name,))
    assert after.plan.meta["passes"][name] > 0, f"{name} rewrote nothing"
    for seed in range(3):
        x = rand(1, 8, 6, 6, seed=seed)
        np.testing.assert_allclose(after(x), base(x), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(after(x), ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_a_concat_whose_part_another_concat_holds_is_split_and_the_rest_go_in_place():
    c = _compile(_shared_concats(), DEFAULT)
    # splitting the first Concat leaves b to the second alone, which then needs no split
    assert c.plan.meta["passes"]["split_copied_concats"] == 1
    concats = [n for n in c.graph.nodes if n.op == "Concat"]
    assert len(concats) == 2
    parts = [v.name for n in concats for v in n.inputs]
    assert sorted(c.plan.arena.aliases) == sorted(parts)
    x = rand(1, 8, 6, 6, seed=4)
    np.testing.assert_allclose(c(x), ort_run(_shared_concats(), {"x": x})[0], rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("engines", ["numpy", "torch", "onnxruntime"])
def test_a_separable_conv_is_one_node_on_every_engine(engines):
    model = _separable(activations=True)
    c = _compile(model, DEFAULT, engines=engines + ",numpy")
    assert _ops(c) == ["FusedSeparableConv"] and c.plan.engines == [engines]
    node = c.graph.nodes[0]
    assert node.attrs["depthwise"]["prologue"] and \
        [s["op"] for s in node.attrs["pointwise"]["epilogue"]] == ["Add"]
    for seed in range(2):
        x = rand(1, 8, 6, 6, seed=seed)
        np.testing.assert_allclose(c(x), ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_a_depthwise_conv_read_twice_or_strided_pointwise_stays_apart():
    model = _separable()
    model.graph.output.append(helper.make_tensor_value_info("d", 1, [1, 8, 6, 6]))
    assert "FusedSeparableConv" not in _ops(_compile(model, DEFAULT))
    model = _separable()
    model.graph.node[1].attribute.append(helper.make_attribute("strides", [2, 2]))
    model.graph.output[0].type.tensor_type.shape.dim[2].dim_value = 3
    model.graph.output[0].type.tensor_type.shape.dim[3].dim_value = 3
    assert "FusedSeparableConv" not in _ops(_compile(model, DEFAULT))


def test_pipeline_result_shape():
    c = _compile(conv_bn_relu_residual(), DEFAULT)
    assert _ops(c) == ["FusedConv", "FusedConv", "Reshape"]
    first, second = c.graph.nodes[:2]
    assert [s["op"] for s in first.attrs["epilogue"]] == ["Add", "Relu"]
    assert [s["op"] for s in second.attrs["epilogue"]] == ["Add", "Clip"]


@pytest.mark.parametrize("engines", ["numpy", "torch", "onnxruntime"])
def test_fused_nodes_on_every_engine(engines):
    model = conv_bn_relu_residual()
    c = _compile(model, DEFAULT, engines=engines + ",numpy")
    assert engines in c.plan.engines
    x = rand(1, 8, 6, 6, seed=9)
    np.testing.assert_allclose(c(x), ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_batchnorm_folds_into_gemm(trans_b):
    w = rand(16, 10, seed=1) if trans_b else rand(10, 16, seed=1)
    rng = np.random.default_rng(0)
    inits = {"w": w, "b": rand(16, seed=2), "g": (1 + rng.random(16)).astype(np.float32),
             "be": rand(16, seed=3), "m": rand(16, seed=4), "v": (0.5 + rng.random(16))
             .astype(np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y0"], transB=trans_b, alpha=0.5,
                              beta=2.0),
             helper.make_node("BatchNormalization", ["y0", "g", "be", "m", "v"], ["y1"]),
             helper.make_node("Sigmoid", ["y1"], ["y"])]
    model = make_model(nodes, [("x", [4, 10])], [("y", [4, 16])], inits)
    c = _compile(model, DEFAULT, engines="torch,numpy")
    assert _ops(c) == ["FusedGemm"]
    x = rand(4, 10, seed=5)
    np.testing.assert_allclose(c(x), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_graph_output_names_survive_identity_removal():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"])]
    model = make_model(nodes, [("x", [3])], [("y", [3])])
    c = _compile(model, DEFAULT)
    assert _ops(c) == ["Relu"] and c.outputs[0][0] == "y"
    assert c.run({"x": np.array([-1, 0, 2], np.float32)})["y"].tolist() == [0, 0, 2]


def test_folding_does_not_inflate_constants():
    """A large ConstantOfShape stays a node instead of becoming megabytes of weights."""
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["z"]),
             helper.make_node("Add", ["x", "z"], ["y"])]
    model = make_model(nodes, [("x", [1024, 1024])], [("y", [1024, 1024])],
                       {"s": np.array([1024, 1024], np.int64)})
    c = _compile(model, DEFAULT)
    assert "ConstantOfShape" in _ops(c)


def test_a_large_constant_node_folds_and_its_conv_gets_a_task():
    """paddle2onnx writes every weight as a Constant node: its value is in memory already, so
    it folds whatever its size, and the conv reading it is a task with packed weights."""
    from woodpecker.tasks import task_from_node

    w = np.random.default_rng(0).standard_normal((384, 192, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w)),
             helper.make_node("Conv", ["x", "w"], ["y"])]
    model = make_model(nodes, [("x", [1, 192, 4, 4])], [("y", [1, 384, 4, 4])])
    c = _compile(model, DEFAULT)
    (conv,) = c.graph.nodes
    assert conv.inputs[1].is_const and task_from_node(conv) is not None


def test_a_conv_with_run_time_weights_has_no_task():
    """A generated conv packs its weights when it is built: weights that are a run-time value
    (a graph input here) leave the conv to the libraries."""
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.tasks import task_from_node

    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"])],
                       [("x", [1, 8, 4, 4]), ("w", [4, 8, 1, 1])], [("y", [1, 4, 4, 4])])
    (conv,) = import_onnx(model).nodes
    assert task_from_node(conv) is None


@pytest.mark.parametrize("engines", ["numpy", "torch", "onnxruntime"])
def test_scales_and_residual_adds_join_the_products_epilogues(engines):
    """(The Halide dense template's scale step: tests/engines/test_halide_non_conv.py.)"""
    c = _compile(_scaled_attention(), DEFAULT, engines=engines + ",numpy")
    assert c.plan.meta["passes"]["expose_epilogues"] == 2
    products = [n for n in c.graph.nodes if n.op == "FusedMatMul"]
    assert [[s["op"] for s in n.attrs["epilogue"]] for n in products] == [["Mul", "Relu"],
                                                                         ["Add"]]
    assert products[0].attrs["epilogue"][0]["scale"] == 0.125
    assert "Mul" not in _ops(c) and "Add" not in _ops(c)
    assert {c.plan.engines[i] for i, n in enumerate(c.graph.nodes)
            if n.op == "FusedMatMul"} == {engines}
    x = rand(1, 8, 6, 6, seed=4)
    np.testing.assert_allclose(c(x), ort_run(_scaled_attention(), {"x": x})[0], rtol=1e-4,
                               atol=1e-4)


def test_a_scale_stays_when_the_product_is_read_twice():
    nodes = [helper.make_node("Mul", ["x", "s"], ["a"]),
             helper.make_node("MatMul", ["a", "w"], ["y"]),
             helper.make_node("Relu", ["y"], ["z"])]
    model = make_model(nodes, [("x", [4, 6])], [("y", [4, 5]), ("z", [4, 5])],
                       {"s": np.array(3.0, np.float32), "w": rand(6, 5, seed=2)})
    c = _compile(model, ("expose_epilogues",))
    assert c.plan.meta["passes"]["expose_epilogues"] == 0


def test_axis_renames_become_one_reshape_of_the_input():
    c = _compile(_renamed_axes(), ("simplify_reshapes", "dce"))
    assert c.plan.meta["passes"]["simplify_reshapes"] == 3
    assert _ops(c) == ["Reshape", "Gather", "Relu"]
    assert c.graph.nodes[0].inputs[0].name == "x"


def test_a_transpose_moving_data_and_a_reshape_of_an_output_stay():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["t", "s1"], ["r"]),
             helper.make_node("Reshape", ["r", "s2"], ["y"])]
    model = make_model(nodes, [("x", [1, 8, 6, 6])], [("y", [1, 288]), ("r", [6, 48])],
                       {"s1": np.array([6, 48], np.int64), "s2": np.array([1, 288], np.int64)})
    c = _compile(model, ("simplify_reshapes", "dce"))
    assert c.plan.meta["passes"]["simplify_reshapes"] == 0
    assert _ops(c) == ["Transpose", "Reshape", "Reshape"]
    x = rand(1, 8, 6, 6)
    for got, want in zip(c(x), ort_run(model, {"x": x})):
        np.testing.assert_array_equal(got, want)
