"""The dynamic int8 dense templates (engines/halide/qdense_vnni.py; qdense_amx.py where the host
has AMX) compute tasks/qdense.py's contract — the quantization exact, so the outputs are the
reference's up to the float epilogue's last bit (a quantized value one step off would be off
by ~1e-2 of the output's range) — with hypothesis over shapes, inputs all positive, all
negative or constant, and each template's knobs; a dynamically quantized model compiles onto
them and gives ONNX Runtime's output."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnxruntime.quantization import QuantType, quantize_dynamic

from tests.passes.test_fold_dynamic_matmul import _float_model
from woodpecker.engines.halide import qdense_amx, qdense_vnni
from woodpecker.engines.halide.host import host_has_amx
from woodpecker.engines.halide.templates import kernel_arguments
from woodpecker.tasks.qdense import QDenseTask

TEMPLATES = [qdense_vnni, pytest.param(qdense_amx, marks=pytest.mark.skipif(
    not host_has_amx(), reason="no AMX on this host"))]


EPILOGUES = [(), (("Gelu", "none"),), (("Add",),), (("Add",), ("Relu",))]


def _close(got: np.ndarray, want: np.ndarray) -> None:
    """Equal up to the epilogue's multiply-add rounding."""
    scale = max(float(np.abs(want).max()), 1e-30)
    assert got.shape == want.shape and got.dtype == np.float32
    assert float(np.abs(got - want).max()) <= 2e-6 * scale


@pytest.mark.parametrize("template", TEMPLATES, ids=["vnni", "amx"])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_kernel_equals_the_reference(template, data):
    amx = template is qdense_amx
    task = QDenseTask(m=data.draw(st.integers(16 if amx else 1, 40)),
                      k=data.draw(st.integers(5 if amx else 1, 150)),
                      n=16 * data.draw(st.integers(1, 4)) if amx else
                      data.draw(st.integers(1, 70)),      # columns past whole tiles too
                      has_bias=data.draw(st.booleans()),
                      epilogue=(epilogue := data.draw(st.sampled_from(EPILOGUES))),
                      residuals=sum(step[0] == "Add" for step in epilogue))
    configs = list(template.space(task).valid_configs())
    config = data.draw(st.sampled_from(configs))
    inputs = task.random_inputs(data.draw(st.integers(0, 1000)))
    shift = data.draw(st.sampled_from([0.0, 20.0, -20.0]))     # all positive / negative
    inputs[0] = (inputs[0] + shift) * np.float32(data.draw(st.sampled_from([1e-3, 1.0, 50.0])))
    kernel = template.build(task, config, threads=2)
    _close(kernel(*kernel_arguments(template, task, config, inputs)), task.reference(inputs))


@pytest.mark.parametrize("template", TEMPLATES, ids=["vnni", "amx"])
def test_a_constant_input_quantizes_with_scale_one(template):
    task = QDenseTask(16, 24, 32, True)
    inputs = task.random_inputs(0)
    for value in (0.0, 3.0):
        inputs[0] = np.full((16, 24), value, np.float32)
        config = template.space(task).seeds[0]
        kernel = template.build(task, config, threads=2)
        _close(kernel(*kernel_arguments(template, task, config, inputs)),
               task.reference(inputs))


@pytest.mark.skipif(not host_has_amx(), reason="no AMX on this host")
def test_the_tuner_measures_amx_candidates():
    from woodpecker.tune.worker import measure_one

    task = QDenseTask(20, 64, 32, True)      # K of one step: the skewed row stride
    for config in qdense_amx.space(task).valid_configs():
        reply = measure_one({"kind": task.kind, "task": task.to_json(),
                             "template": "qdense_amx", "config": config, "repeats": 2}, 2, {})
        assert reply["ok"], (config, reply)
        assert reply["rel_err"] < 1e-6


def test_a_dynamically_quantized_model_runs_on_the_int8_kernels(tmp_path):
    """ONNX Runtime's dynamic quantizer's file, tuned briefly on generated kernels and numpy
    alone: every MatMul folds (its Relu fused after it) and runs on a qdense kernel, and the
    output is ONNX Runtime's."""
    import woodpecker
    from woodpecker.options import TuneOptions

    rng = np.random.default_rng(0)
    _float_model(rng, 32, 96, 64, 2, True, tmp_path / "f.onnx", relu=True)
    quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", weight_type=QuantType.QInt8)
    model = woodpecker.compile(str(tmp_path / "q.onnx"), engines=("halide", "numpy"),
                               tune=TuneOptions(budget="30s", max_trials=2),
                               tuning_log=str(tmp_path / "log.jsonl"))
    nodes = [n for n in model.plan.graph.nodes if n.op == "FusedDynamicQuantizeMatMul"]
    assert len(nodes) == 2
    assert {model.plan.choices[n.name].engine for n in nodes} == {"halide"}
    x = (rng.standard_normal((1, 32, 96)) * 2 + 0.5).astype(np.float32)
    want = ort.InferenceSession(str(tmp_path / "q.onnx"),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = model.run({"x": x})
    for name, w in zip(("r0", "r1"), want):
        _close(got[name], w)
