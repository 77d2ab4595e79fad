"""The int8 conv templates (engines/halide/qconv_gemm.py: VNNI; qconv_amx.py: AMX tiles, where
the host has them; qconv_depthwise.py) compute tasks/qconv.py's contract exactly — hypothesis
over shapes, strides, pads, dilations, int8/uint8 in and out, output channels past whole
tiles, a fused residual program (DequantizeLinear → Add → [Relu] → QuantizeLinear with a second
8-bit input), a fused SiLU read from its table, and each template's knobs — and a
QDQ file's folded QLinearConv, through `node_arguments`, gives ONNX Runtime's output bit for
bit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engines.test_halide_qdq_elementwise import _residual_task
from tests.passes.test_fold_qdq import _model
from woodpecker.engines.halide import qconv_amx, qconv_depthwise, qconv_gemm
from woodpecker.engines.halide.host import host_has_amx
from woodpecker.engines.halide.templates import kernel_arguments
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.passes import optimize
from woodpecker.tasks.qconv import QConvTask


def _run(task: QConvTask, config: dict, inputs: list[np.ndarray],
         template=qconv_gemm) -> np.ndarray:
    """The kernel on the node's inputs, through the template's `arguments` as the engine
    calls it."""
    kernel = template.build(task, config, threads=2)
    return kernel(*kernel_arguments(template, task, config, inputs))


def _silu_program(a: str, out: str) -> tuple:
    return (("DequantizeLinear", (("in", 0), ("const", 0), ("const", 1)), (("dtype", a),)),
            ("Sigmoid", (("step", 0),), ()), ("Mul", (("step", 0), ("step", 1)), ()),
            ("QuantizeLinear", (("step", 2), ("const", 2), ("const", 3)), (("dtype", out),)))


TEMPLATES = [qconv_gemm, qconv_depthwise, pytest.param(qconv_amx, marks=pytest.mark.skipif(
    not host_has_amx(), reason="no AMX on this host"))]


@pytest.mark.parametrize("template", TEMPLATES, ids=["vnni", "depthwise", "amx"])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_kernel_equals_the_integer_reference(template, data):
    amx, depthwise = template is qconv_amx, template is qconv_depthwise
    # output channels past a whole tile too (a pruned network's): the last tile masked
    k = data.draw(st.sampled_from([16, 32, 48, 21] if amx else [8, 16, 32, 48, 13]))
    kh = data.draw(st.sampled_from([1, 3]))
    kw = data.draw(st.sampled_from([1, 3]))
    task = QConvTask(
        n=data.draw(st.integers(1, 2)), c=k if depthwise else data.draw(st.integers(1, 20)),
        h=data.draw(st.integers(kh, 9)), w=data.draw(st.integers(kw, 20 if amx else 9)), k=k,
        kh=kh, kw=kw, stride=(s := data.draw(st.integers(1, 2)),
                              s if amx else data.draw(st.integers(1, 2))),
        pads=tuple(data.draw(st.integers(0, 1)) for _ in range(4)),
        dilation=(1, data.draw(st.integers(1, 2))) if kw == 3 else (1, 1),
        x_dtype=data.draw(st.sampled_from(["uint8", "int8"])),
        y_dtype=data.draw(st.sampled_from(["uint8", "int8"])), has_bias=data.draw(st.booleans()),
        groups=k if depthwise else 1)
    program = "none" if depthwise else data.draw(st.sampled_from(["none", "residual", "silu"]))
    if program == "residual":                     # a fused residual block's program
        extra = data.draw(st.sampled_from(["uint8", "int8"]))
        program = _residual_task(task.y_dtype, extra, data.draw(st.sampled_from(
            ["uint8", "int8"])), data.draw(st.booleans()), 1, 1, 1,
            data.draw(st.booleans())).program
        task = replace(task, program=program, extra=(extra,), consts=6)
    elif program == "silu":                       # EfficientNet's quantized SiLU: a table
        task = replace(task, program=_silu_program(task.y_dtype, data.draw(st.sampled_from(
            ["uint8", "int8"]))), consts=4)
        assert task.tabled
    configs = list(template.space(task).valid_configs()) \
        if task.out_w >= 1 and template.supports(task) else []
    if not configs:
        return
    config = data.draw(st.sampled_from(configs))
    inputs = task.random_inputs(data.draw(st.integers(0, 1000)))
    want = task.reference(inputs)
    got = _run(task, config, inputs, template)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_outputs_spread_and_saturate():
    """The random inputs exercise rounding and both saturation bounds."""
    task = QConvTask(1, 32, 8, 8, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1))
    y = task.reference(task.random_inputs(0))
    assert y.min() == 0 and y.max() == 255 and len(np.unique(y)) > 100


@pytest.mark.parametrize("template,c,m,groups", [(qconv_gemm, 12, 32, 1),
                                                  (qconv_depthwise, 24, 24, 24)],
                         ids=["conv", "depthwise"])
def test_a_folded_qdq_conv_runs_on_the_kernel_as_onnx_runtime_does(template, c, m, groups):
    from woodpecker.ops import run_reference

    rng = np.random.default_rng(3)
    model = _model(rng, n=1, c=c, m=m, hw=9, k=3, groups=groups, stride=1, pad=1, act=np.uint8,
                   per_channel=True, bias=True)
    graph = import_onnx(model)
    optimize(graph)
    # the input's QuantizeLinear, an element-wise group of one; the output's DequantizeLinear
    # fused into the conv (passes/fuse_qconv_program.py) but after a depthwise one
    node = next(n for n in graph.nodes if n.op in ("QLinearConv", "FusedQLinearConv"))
    assert node.op == ("QLinearConv" if groups > 1 else "FusedQLinearConv")
    q, *dq = (n for n in graph.nodes if n.op == "FusedElementwise")
    assert [s["op"] for s in q.attrs["program"]] == ["QuantizeLinear"]
    assert [s["op"] for n in (dq or [node]) for s in n.attrs["program"]] == ["DequantizeLinear"]
    task = QConvTask.from_node(node)
    assert template.supports(task)
    x = (rng.standard_normal((1, c, 9, 9)) * 2).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    xq = run_reference(q, [x, q.inputs[1].data])[0]
    inputs = [np.ascontiguousarray(xq.transpose(0, 2, 3, 1))] + \
        [task.constant(node, i) for i in range(1, len(node.inputs)) if node.inputs[i] is not None]
    y = _run(task, template.space(task).seeds[0], inputs, template)
    np.testing.assert_array_equal(y, task.reference(inputs))
    if dq:
        y = run_reference(dq[0], [y.transpose(0, 3, 1, 2), dq[0].inputs[1].data])[0]
    else:
        y = y.transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(y, want)


def test_a_quantized_model_compiles_onto_the_int8_kernels(tmp_path):
    """A QDQ classifier, tuned briefly, on generated kernels and numpy alone (so the test does
    not rest on a speed): its convs fold and run on qconv_gemm's kernels, and the plan's output
    equals ONNX Runtime's on the same file bit for bit (one conv with the group after it fused
    into its epilogue)."""
    import collections

    import woodpecker
    from woodpecker.options import TuneOptions
    from woodpecker.zoo.digits import digits_classifier

    d = digits_classifier(seed=0)
    path = tmp_path / "q.onnx"
    # 7-bit weights: ONNX Runtime's AVX2 path (no VNNI) saturates pairs of full-range products
    woodpecker.quantize(d.onnx, path, calibrate=d.train_images[:64],
                        options=woodpecker.QuantizeOptions(reduce_range=True))
    x = d.test_images[:8]
    model = woodpecker.compile(str(path), input_shapes={"image": x.shape},
                               engines=("halide", "numpy"),
                               tune=TuneOptions(budget="30s", max_trials=2),
                               tuning_log=str(tmp_path / "log.jsonl"))
    engines = collections.Counter(model.plan.choices[n.name].engine
                                  for n in model.plan.graph.nodes
                                  if n.op in ("QLinearConv", "FusedQLinearConv"))
    assert engines == {"halide": 2}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"image": x})[0]
    np.testing.assert_array_equal(model.run({"image": x})["logits"], want)


@pytest.mark.skipif(not host_has_amx(), reason="no AMX on this host")
def test_the_tuner_measures_amx_candidates():
    """The tuner's worker times a kernel on copies of its arguments (weights cold): every AMX
    config must survive that (a strided weight view did not: a copy loses its strides)."""
    from woodpecker.tune.worker import measure_one

    task = QConvTask(1, 20, 9, 18, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1))
    for config in qconv_amx.space(task).valid_configs():
        reply = measure_one({"kind": task.kind, "task": task.to_json(), "template": "qconv_amx",
                             "config": config, "repeats": 2}, 2, {})
        assert reply["ok"], (config, reply)
        assert reply["rel_err"] == 0.0


@pytest.mark.skipif(not host_has_amx(), reason="no AMX on this host")
@pytest.mark.parametrize("task", [
    QConvTask(1, 3, 32, 32, 64, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1)),          # a stem
    QConvTask(1, 3, 20, 19, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), x_dtype="int8"),
    QConvTask(2, 5, 9, 40, 32, 3, 5, (2, 2), (1, 2, 0, 2), (1, 2), y_dtype="int8"),
], ids=["stem", "int8-in", "dilated"])
def test_a_window_unfolded_into_the_channels_is_exact(task):
    """`input: unfold` (the window's columns as channels of one deeper step) on stems, int8
    input, dilation, uneven pads and a batch of two."""
    for channels in ("inner", "outer"):
        config = {"walk": "rows", "channels": channels, "input": "unfold", "parallel": "pixels"}
        assert qconv_amx.space(task).is_valid(config)
        inputs = task.random_inputs(channels == "inner")
        np.testing.assert_array_equal(_run(task, config, inputs, qconv_amx),
                                      task.reference(inputs))


@pytest.mark.skipif(not host_has_amx(), reason="no AMX on this host")
@pytest.mark.parametrize("task", [
    QConvTask(1, 64, 7, 7, 40, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),     # a partial last tile
    QConvTask(2, 128, 14, 14, 64, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1), y_dtype="int8"),
    QConvTask(1, 96, 9, 9, 48, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), x_dtype="int8"),
], ids=["3x3-partial-tile", "1x1-stride-2-batch-2", "int8-in"])
def test_channel_tiles_in_parallel_are_exact(task):
    """`parallel: channels` (the flat walk with the channel tiles as the parallel loop, the
    schedule small images want) is exact, with and without a fused residual program (its
    QuantizeLinear dividing or multiplying by the reciprocal)."""
    config = {"walk": "flat", "channels": "outer", "input": "copy", "parallel": "channels"}
    programs = [_residual_task(task.y_dtype, "uint8", "uint8", True, 1, 1, 1, reciprocal).program
                for reciprocal in (False, True)]
    for t in [task] + [replace(task, program=p, extra=("uint8",), consts=6) for p in programs]:
        assert qconv_amx.space(t).is_valid(config)
        inputs = t.random_inputs(1)
        np.testing.assert_array_equal(_run(t, config, inputs, qconv_amx), t.reference(inputs))
