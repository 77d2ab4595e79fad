"""A quantized model's residual addition — DequantizeLinear of both branches, Add, Relu,
QuantizeLinear — is one element-wise group over 8-bit tensors (passes/fuse_elementwise.py); its
generated kernel equals the numpy reference bit for bit whatever the scales, zero points and
knobs, and the group exported back to ONNX computes what ONNX Runtime computes on the original
nodes."""

from __future__ import annotations

import random

import numpy as np
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from tests.helpers import make_model
from woodpecker.engines.halide import elementwise
from woodpecker.engines.halide.templates import kernel_arguments, templates_for
from woodpecker.engines.registry import get_engine
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.passes import optimize
from woodpecker.tasks.elementwise import ElementwiseTask

_ONNX_TYPE = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def _residual_task(a: str, b: str, out: str, relu: bool, c: int, h: int, w: int,
                   reciprocal: bool = False) -> ElementwiseTask:
    """`reciprocal`: the QuantizeLinear marked to multiply by its scale's reciprocal
    (ops/fused.with_reciprocals; the reference does the same)."""
    steps = [("DequantizeLinear", (("in", 0), ("const", 0), ("const", 1)), (("dtype", a),)),
             ("DequantizeLinear", (("in", 1), ("const", 2), ("const", 3)), (("dtype", b),)),
             ("Add", (("step", 0), ("step", 1)), ())]
    if relu:
        steps.append(("Relu", (("step", 2),), ()))
    steps.append(("QuantizeLinear", (("step", len(steps) - 1), ("const", 4), ("const", 5)),
                  (("dtype", out),) + ((("reciprocal", True),) if reciprocal else ())))
    return ElementwiseTask(1, h, w, c, 2, 6, tuple(steps), out, (a, b))


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(["uint8", "int8"]), st.sampled_from(["uint8", "int8"]),
       st.sampled_from(["uint8", "int8"]), st.booleans(), st.integers(4, 40),
       st.integers(1, 6), st.integers(0, 2**16), st.booleans())
def test_a_qdq_residual_kernel_equals_the_reference(a, b, out, relu, c, h, seed, reciprocal):
    task = _residual_task(a, b, out, relu, c, h, 7, reciprocal)
    assert templates_for(task) == ("elementwise",)
    config = elementwise.space(task).sample(random.Random(seed))
    inputs = task.random_inputs(seed)
    got = elementwise.build(task, config)(*kernel_arguments(elementwise, task, config, inputs))
    want = task.reference(inputs)
    assert got.dtype == want.dtype == np.dtype(out)
    np.testing.assert_array_equal(got, want)


def test_the_random_inputs_spread_and_saturate():
    """The hypothesis cases exercise rounding and both saturation bounds."""
    task = _residual_task("uint8", "int8", "uint8", False, 32, 8, 8)
    ys = [task.reference(task.random_inputs(seed)) for seed in range(3)]
    assert all(len(np.unique(y)) > 150 for y in ys)
    assert any(y.min() == 0 and y.max() == 255 for y in ys)


def _residual_model(rng, x_type: str, out_type: str) -> tuple:
    """u8/s8 x and r → DequantizeLinear each → Add → Relu → QuantizeLinear, per-tensor."""
    zp = {t: np.array(rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1), t)
          for t in (x_type, out_type)}
    inits = {"xs": np.float32(0.03), "xz": zp[x_type], "rs": np.float32(0.02), "rz": zp[x_type],
             "ys": np.float32(0.04), "yz": zp[out_type]}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["r", "rs", "rz"], ["rf"]),
             helper.make_node("Add", ["xf", "rf"], ["s"]),
             helper.make_node("Relu", ["s"], ["sr"]),
             helper.make_node("QuantizeLinear", ["sr", "ys", "yz"], ["y"])]
    shape = [1, 16, 5, 6]
    return make_model(nodes, [("x", shape, _ONNX_TYPE[x_type]), ("r", shape, _ONNX_TYPE[x_type])],
                      [("y", shape, _ONNX_TYPE[out_type])], inits), shape


def test_a_residual_block_is_one_group_that_runs_as_onnx_runtime_does(tmp_path):
    """Imported and optimized, the five nodes are one group; its reference, its generated
    kernel (through the compiled plan; torch declines Q/DQ steps) and its ONNX export each
    give ONNX Runtime's output on the original nodes (no graph optimization: its own
    QLinearAdd rounds differently)."""
    import woodpecker
    from woodpecker.frontend.onnx_export import nodes_model
    from woodpecker.ops import run_reference
    from woodpecker.options import TuneOptions

    rng = np.random.default_rng(5)
    for x_type, out_type in (("uint8", "uint8"), ("int8", "int8"), ("uint8", "int8")):
        model, shape = _residual_model(rng, x_type, out_type)
        info = np.iinfo(x_type)
        feeds = {n: rng.integers(info.min, info.max + 1, shape).astype(x_type) for n in "xr"}
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        (want,) = ort.InferenceSession(model.SerializeToString(), so,
                                       providers=["CPUExecutionProvider"]).run(None, feeds)
        graph = import_onnx(model)
        optimize(graph)
        (group,) = graph.nodes
        assert [s["op"] for s in group.attrs["program"]] == \
            ["DequantizeLinear", "DequantizeLinear", "Add", "Relu", "QuantizeLinear"]
        consts = [v.data for v in group.inputs[2:]]
        np.testing.assert_array_equal(run_reference(group, [feeds["x"], feeds["r"]] + consts)[0],
                                      want)
        exported = nodes_model([group], group.inputs[:2], group.outputs, 17)
        (again,) = ort.InferenceSession(exported.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"]).run(None, feeds)
        np.testing.assert_array_equal(again, want)
        assert not get_engine("torch").accepts(group, None)
        compiled = woodpecker.compile(model, engines=("halide", "torch", "numpy"), threads=1,
                                      tune=TuneOptions(budget="20s", max_trials=2),
                                      tuning_log=str(tmp_path / f"{x_type}{out_type}.jsonl"))
        assert compiled.plan.choices[group.name].engine == "halide"
        np.testing.assert_array_equal(compiled.run(feeds)["y"], want)


@settings(max_examples=8, deadline=None)
@given(st.sampled_from(["uint8", "int8"]), st.integers(1, 3), st.integers(4, 30),
       st.integers(0, 2**16))
def test_an_image_quantize_runs_its_vectors_along_the_rows(out, c, w, seed):
    """A model input's QuantizeLinear over 1–3 channels: the lanes run along the row."""
    task = ElementwiseTask(1, 3, w, c, 1, 2, (
        ("QuantizeLinear", (("in", 0), ("const", 0), ("const", 1)), (("dtype", out),)),), out)
    assert templates_for(task) == ("elementwise",)
    config = elementwise.space(task).sample(random.Random(seed))
    inputs = task.random_inputs(seed)
    inputs[0] *= 3
    got = elementwise.build(task, config)(*kernel_arguments(elementwise, task, config, inputs))
    np.testing.assert_array_equal(got, task.reference(inputs))


def _silu_task(c: int = 32) -> ElementwiseTask:
    """EfficientNet's quantized SiLU: DequantizeLinear, Sigmoid, Mul, QuantizeLinear."""
    return ElementwiseTask(1, 6, 7, c, 1, 4, (
        ("DequantizeLinear", (("in", 0), ("const", 0), ("const", 1)), (("dtype", "uint8"),)),
        ("Sigmoid", (("step", 0),), ()), ("Mul", (("step", 0), ("step", 1)), ()),
        ("QuantizeLinear", (("step", 2), ("const", 2), ("const", 3)), (("dtype", "uint8"),))),
        "uint8", ("uint8",))


def test_a_quantize_after_a_transcendental_may_be_one_step_off():
    """A Sigmoid's float result may differ in its last bit between Halide and numpy, so a
    QuantizeLinear after it may round a half step either way: such a group's kernels are
    accepted one step off, and no more; exact programs stay exact."""
    from woodpecker.tune.worker import agrees

    silu, residual = _silu_task(), _residual_task("uint8", "uint8", "uint8", True, 16, 4, 7)
    assert (silu.steps_off, residual.steps_off) == (1, 0)
    inputs = silu.random_inputs(0)
    config = {**elementwise.space(silu).seeds[0], "lut": False}    # the program, per element
    got = elementwise.build(silu, config)(*kernel_arguments(elementwise, silu, config, inputs))
    want = silu.reference(inputs)
    assert agrees(silu, got, want)[0] and np.mean(got == want) > 0.99
    inward = np.where(want < 128, 1, -1)          # a step towards the middle of the range
    off = want.astype(np.int16) + inward
    assert agrees(silu, off, want)[0] and not agrees(residual, off, want)[0]
    assert not agrees(silu, off + inward, want)[0]


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(["uint8", "int8"]), st.sampled_from(["uint8", "int8", "float32"]),
       st.booleans(), st.integers(0, 2**16))
def test_a_program_of_one_8bit_input_is_a_table_equal_to_the_reference(a, out, swish, seed):
    """SiLU or HardSwish between Q/DQ, to 8 bits or dequantized: with `lut` the kernel reads a
    256-entry table computed by the reference program, so it is exact (no step off)."""
    act = ("HardSwish", (("step", 0),), ()) if swish else ("Sigmoid", (("step", 0),), ())
    steps = [("DequantizeLinear", (("in", 0), ("const", 0), ("const", 1)), (("dtype", a),)),
             act, ("Mul", (("step", 0), ("step", 1)), ()),
             ("QuantizeLinear", (("step", 2), ("const", 2), ("const", 3)),
              (("dtype", "uint8" if out == "float32" else out),))]
    if out == "float32":
        steps.append(("DequantizeLinear", (("step", 3), ("const", 2), ("const", 3)),
                      (("dtype", "uint8"),)))
    task = ElementwiseTask(1, 5, 6, 24, 1, 4, tuple(steps), out, (a,))
    assert task.table_ready
    config = {**elementwise.space(task).sample(random.Random(seed)), "lut": True}
    inputs = task.random_inputs(seed)
    if out == "float32":                  # the dequantized output's zero point is a uint8's
        inputs[1][3] = float(np.random.default_rng(seed).integers(0, 256))
    got = elementwise.build(task, config)(*kernel_arguments(elementwise, task, config, inputs))
    np.testing.assert_array_equal(got, task.reference(inputs))


def test_a_table_needs_one_8bit_input_and_no_per_channel_constant():
    residual = _residual_task("uint8", "uint8", "uint8", True, 16, 4, 7)
    per_channel = ElementwiseTask(1, 2, 2, 4, 1, 6, (
        ("DequantizeLinear", (("in", 0), ("const", 0), ("const", 1)), (("dtype", "uint8"),)),
        ("Mul", (("step", 0), ("channel", 2)), ())), "float32", ("uint8",))
    for task in (residual, per_channel):
        assert not task.table_ready
        assert "lut" not in {k.name for k in elementwise.space(task).knobs}


def test_a_quantized_silu_is_one_group_over_the_8bit_tensor():
    """x's DequantizeLinear feeds both the Sigmoid and the Mul: it joins the group, which then
    reads the 8-bit tensor (a table lookup)."""
    inits = {"s": np.float32(0.05), "z": np.uint8(100), "t": np.float32(1 / 256),
             "tz": np.uint8(0), "o": np.float32(0.04), "oz": np.uint8(10)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]),
             helper.make_node("Sigmoid", ["xf"], ["sg"]),
             helper.make_node("QuantizeLinear", ["sg", "t", "tz"], ["sq"]),
             helper.make_node("DequantizeLinear", ["sq", "t", "tz"], ["sf"]),
             helper.make_node("Mul", ["xf", "sf"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "o", "oz"], ["y"])]
    shape = [1, 8, 4, 4]
    model = make_model(nodes, [("x", shape, TensorProto.UINT8)], [("y", shape, TensorProto.UINT8)],
                       inits)
    graph = import_onnx(model)
    optimize(graph)
    (group,) = graph.nodes
    assert group.op == "FusedElementwise" and group.inputs[0].dtype == np.uint8
    assert ElementwiseTask.from_node(group).table_ready
