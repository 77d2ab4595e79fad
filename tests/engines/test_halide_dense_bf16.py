"""`--precision bf16` (options.Precision, passes/precision.py) and its dense template
(engines/halide/dense_bf16.py, AMX-BF16 tiles): the kernel computes the lowered task's
contract — bf16 operands, float32 sums — with hypothesis over shapes, biases, epilogues and
knobs; it is a bf16 kernel (its output is not the float32 product's); float32 and bf16 tasks
get only their own templates; a bf16 compile runs its dense layers on it within the
precision's tolerance of ONNX Runtime, reports its accuracy, and its plan refuses to load on a
CPU without bf16."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.passes.test_fold_dynamic_matmul import _float_model
from woodpecker.engines.halide import dense_bf16
from woodpecker.engines.halide.host import host_has_amx_bf16
from woodpecker.engines.halide.templates import kernel_arguments, templates_for
from woodpecker.errors import PlanError, WoodpeckerError
from woodpecker.options import CompileOptions, Precision
from woodpecker.tasks.dense import DenseTask
from woodpecker.tune.worker import relative_error

needs_amx_bf16 = pytest.mark.skipif(not host_has_amx_bf16(), reason="no AMX-BF16 on this host")
EPILOGUES = [(), (("Relu",),), (("Gelu", "none"),), (("Add",),), (("Add",), ("Relu",))]


def _task(m=32, k=48, n=32, bias="", epilogue=(), residual="full") -> DenseTask:
    residuals = tuple(residual for step in epilogue if step[0] == "Add")
    return DenseTask(1, m, k, n, True, bias, residuals, epilogue, "float32", "bfloat16")


@needs_amx_bf16
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_kernel_equals_the_bf16_reference(data):
    task = _task(m=data.draw(st.integers(16, 40)), k=data.draw(st.integers(3, 100)),
                 n=16 * data.draw(st.integers(1, 4)),
                 bias=data.draw(st.sampled_from(["", "row"])),
                 epilogue=data.draw(st.sampled_from(EPILOGUES)),
                 residual=data.draw(st.sampled_from(["full", "row"])))
    config = data.draw(st.sampled_from(list(dense_bf16.space(task).valid_configs())))
    inputs = task.random_inputs(data.draw(st.integers(0, 1000)))
    inputs[0] *= np.float32(data.draw(st.sampled_from([1e-3, 1.0, 50.0])))
    kernel = dense_bf16.build(task, config, threads=2)
    got = kernel(*kernel_arguments(dense_bf16, task, config, inputs))
    assert got.shape == task.out_shape and got.dtype == np.float32
    assert relative_error(got, task.reference(inputs)) <= 2e-6   # float32 summation order


@needs_amx_bf16
def test_the_kernel_computes_in_bf16_not_float32():
    task = _task(m=16, k=256, n=16)
    inputs = task.random_inputs(3)
    config = dense_bf16.SEEDS[0]
    got = dense_bf16.build(task, config)(*kernel_arguments(dense_bf16, task, config, inputs))
    exact = dataclasses.replace(task, compute="float32").reference(inputs)
    # bf16 keeps 8 bits of mantissa: its products are off the float32 ones by ~1e-3
    assert 1e-4 < relative_error(got, exact) < 3e-2


@needs_amx_bf16
def test_the_activations_round_as_ml_dtypes_does():
    """Through an identity weight matrix the output is the kernel's bf16 copy of A: ties to
    even (both ways), carries into the exponent, the largest finite bf16, signs — as ml_dtypes
    rounds them. (Infinities and NaN cannot pass an identity product unchanged, and AMX reads
    subnormal bf16 inputs as zero.)"""
    import ml_dtypes

    bits = np.array([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F7FFFFF, 0x7F7F7FFF, 0x00800000,
                     0xBF808001, 0xBF818000, 0x40490FDB, 0x3F800000, 0x4B7FFFFF, 0xC2F6E979,
                     0x38D1B717, 0x3EAAAAAB, 0x00000000, 0x477FE000], np.uint32)
    x = np.tile(bits.view(np.float32), (16, 1))
    task = _task(m=16, k=16, n=16)
    config = dense_bf16.SEEDS[0]
    eye = np.eye(16, dtype=np.float32)
    got = dense_bf16.build(task, config)(*kernel_arguments(dense_bf16, task, config, [x, eye]))
    np.testing.assert_array_equal(got[0], x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_each_task_gets_only_the_templates_of_its_type():
    bf16 = _task()
    fp32 = dataclasses.replace(bf16, compute="float32")
    assert "dense_bf16" not in templates_for(fp32) and "dense" in templates_for(fp32)
    assert "dense" not in templates_for(bf16)
    assert ("dense_bf16" in templates_for(bf16)) == host_has_amx_bf16()
    # the field is left out of a float32 task's key: earlier tuning logs still match
    assert "compute" not in fp32.key and "compute" in bf16.key


@needs_amx_bf16
def test_the_tuner_measures_bf16_candidates():
    from woodpecker.tune.worker import measure_one

    task = _task(m=20, k=24, n=32)      # K of one step: the skewed row stride
    for config in dense_bf16.space(task).valid_configs():
        reply = measure_one({"kind": task.kind, "task": task.to_json(),
                             "template": "dense_bf16", "config": config, "repeats": 2}, 2, {})
        assert reply["ok"], (config, reply)


def test_a_precision_is_checked_against_the_host(monkeypatch):
    with pytest.raises(WoodpeckerError, match="unknown precision 'int4'"):
        CompileOptions(precision="int4")
    assert Precision.BF16.unsupported(frozenset({"amx_bf16"})) is None
    assert Precision.BF16.unsupported(frozenset({"avx512_bf16"})) is None
    assert "avx512_bf16 or amx_bf16" in Precision.BF16.unsupported(frozenset({"avx2"}))
    monkeypatch.setattr("woodpecker.options.host_extensions", lambda: frozenset({"avx2"}))
    with pytest.raises(WoodpeckerError, match="needs a CPU with avx512_fp16"):
        CompileOptions(precision="fp16")
    assert CompileOptions(precision="fp32").precision is Precision.FP32


def test_lowering_marks_only_products_with_constant_weights():
    from woodpecker.ir.graph import Graph
    from woodpecker.passes.precision import lower_precision
    from woodpecker.tasks import COMPUTE
    from woodpecker.tasks.dense import DenseTask as Dense

    g = Graph("g")
    x, y = g.value("x", (4, 8), np.float32), g.value("y", (8, 6), np.float32)
    w = g.const(np.ones((8, 6), np.float32), "w")
    g.inputs = [x, y]
    weights = g.add_node("MatMul", [x, w], [g.value("a", (4, 6), np.float32)])
    runtime = g.add_node("MatMul", [x, y], [g.value("b", (4, 6), np.float32)])
    g.outputs = [weights.outputs[0], runtime.outputs[0]]
    assert lower_precision(g, Precision.FP32) == 0
    assert lower_precision(g, Precision.BF16) == 1
    assert weights.attrs[COMPUTE] == "bfloat16" and COMPUTE not in runtime.attrs
    assert Dense.from_node(weights).compute == "bfloat16"


@needs_amx_bf16
def test_a_bf16_compile_runs_its_layers_on_bf16_kernels(tmp_path, monkeypatch):
    """Two MatMul (+ bias, Relu) layers tuned briefly on generated kernels and numpy alone:
    both run on dense_bf16, the output is within bf16's tolerance of ONNX Runtime's float32
    (and not float32's own), the compile reports it, the saved plan loads and runs alike —
    and refuses to load on a CPU without bf16."""
    import woodpecker
    from woodpecker.options import TuneOptions

    rng = np.random.default_rng(0)
    _float_model(rng, 32, 96, 64, 2, True, tmp_path / "f.onnx", relu=True)
    model = woodpecker.compile(str(tmp_path / "f.onnx"), engines=("halide", "numpy"),
                               precision="bf16", tune=TuneOptions(budget="40s", max_trials=2),
                               tuning_log=str(tmp_path / "log.jsonl"))
    nodes = [n for n in model.plan.graph.nodes if n.op in ("FusedMatMul", "MatMul")]
    assert len(nodes) == 2
    assert {model.plan.choices[n.name].kernel.template for n in nodes} == {"dense_bf16"}
    x = rng.standard_normal((1, 32, 96)).astype(np.float32)
    want = ort.InferenceSession(str(tmp_path / "f.onnx"),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = model.run({"x": x})
    for name, w in zip(("r0", "r1"), want):
        assert 1e-6 < relative_error(got[name], w) < Precision.BF16.tolerance
    report = model.plan.meta["precision"]
    assert report["precision"] == "bf16" and report["inputs"] == 8
    assert all(0 < o["max_rel_diff"] < Precision.BF16.tolerance and o["sqnr_db"] > 30
               for o in report["outputs"])
    model.save(tmp_path / "plan")
    loaded = woodpecker.load(tmp_path / "plan")
    np.testing.assert_array_equal(loaded.run({"x": x})["r0"], got["r0"])
    assert loaded.plan.meta["precision"] == report
    assert loaded.plan.precision is Precision.BF16
    monkeypatch.setattr("woodpecker.options.host_extensions", lambda: frozenset({"avx2"}))
    with pytest.raises(PlanError, match="precision bf16 needs a CPU with"):
        woodpecker.load(tmp_path / "plan")


@pytest.mark.skipif(Precision.BF16.unsupported() is not None, reason="no bf16 on this host")
def test_openvino_steps_follow_the_build_contexts_precision():
    """OpenVINO's one-node step of a MatMul: float32 in a float32 context, moved off it (its
    precision hint took effect) but within the tolerance in a bf16 one."""
    pytest.importorskip("openvino")
    from woodpecker.engines.base import BuildContext
    from woodpecker.engines.registry import get_engine
    from woodpecker.ir.graph import Graph

    rng = np.random.default_rng(1)
    g = Graph("g")
    x = g.value("x", (32, 96), np.float32)
    w = g.const(rng.standard_normal((96, 64)).astype(np.float32), "w")
    node = g.add_node("MatMul", [x, w], [g.value("y", (32, 64), np.float32)])
    a = rng.standard_normal((32, 96)).astype(np.float32)
    want = a.astype(np.float64) @ w.data.astype(np.float64)
    engine = get_engine("openvino")
    got = {p: engine.build(node, BuildContext(2, 17, precision=p)).run(a)[0]
           for p in (Precision.FP32, Precision.BF16)}
    assert relative_error(got[Precision.FP32], want) < 1e-5
    assert 1e-4 < relative_error(got[Precision.BF16], want) < Precision.BF16.tolerance
