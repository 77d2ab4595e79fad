"""Resize (ops/resize.py, tasks/resize.py, engines/halide/resize.py): the reference matches
ONNX Runtime over modes, coordinate transforms, nearest modes, scales and sizes; the
generated kernel matches the reference for every valid configuration (TASKS, in
test_halide_non_conv's cases); a plan with generated resize and transposed-convolution kernels
between convolutions matches ONNX Runtime, saved and loaded; the variants Woodpecker does not
define stay Opaque and still run."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.ops.resize import COORDINATES, NEAREST
from woodpecker.tasks import task_from_node
from woodpecker.tasks.resize import ResizeTask


def _resize_model(shape, mode, coordinates, nearest, scales=None, sizes=None):
    inits = {"scales": np.array(scales, np.float32)} if scales is not None else \
        {"sizes": np.array(sizes, np.int64)}
    inputs = ["x", "", "scales"] if scales is not None else ["x", "", "", "sizes"]
    node = helper.make_node("Resize", inputs, ["y"], mode=mode,
                            coordinate_transformation_mode=coordinates, nearest_mode=nearest)
    return make_model([node], [("x", list(shape))], [("y", ["n", "c", "h", "w"])], inits)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["nearest", "linear"]), st.sampled_from(COORDINATES),
       st.sampled_from(NEAREST), st.integers(1, 9), st.integers(1, 9),
       st.sampled_from([0.5, 0.6, 1.0, 1.5, 2.0, 3.0]), st.integers(1, 12), st.booleans())
def test_reference_matches_onnxruntime(mode, coordinates, nearest, h, w, scale, out_w,
                                       by_sizes):
    shape = (1, 2, h, w)
    if by_sizes:
        model = _resize_model(shape, mode, coordinates, nearest, sizes=[1, 2, h, out_w])
    else:
        model = _resize_model(shape, mode, coordinates, nearest, scales=[1, 1, scale, scale])
        if int(h * scale) == 0 or int(w * scale) == 0:
            return
    x = rand(*shape, seed=h * 10 + w)
    m = woodpecker.compile(model, engines="numpy", threads=1)
    assert [n.op for n in m.graph.nodes] == ["Resize"]
    want = ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(m(x), want, rtol=1e-5, atol=1e-6)


TASKS = [
    ResizeTask(1, 8, 5, 7, 10, 14, 2.0, 2.0, "nearest", "asymmetric", "floor", False),
    ResizeTask(1, 12, 6, 5, 12, 10, 2.0, 2.0, "linear", "half_pixel", "round_prefer_floor",
               False),
    ResizeTask(2, 4, 9, 9, 5, 7, 5 / 9, 7 / 9, "linear", "align_corners", "round_prefer_floor",
               True),
    ResizeTask(1, 16, 8, 8, 4, 6, 0.5, 0.75, "nearest", "half_pixel", "round_prefer_ceil",
               False),
    # the rows kept (read, not blended), the columns ×2.25
    ResizeTask(1, 8, 6, 4, 6, 9, 1.0, 2.25, "linear", "half_pixel", "round_prefer_floor",
               False),
]


def _conv_resize_model():
    """conv → nearest ×2 (scales) → ConvTranspose 3×3/2 (a DBNet head's, cropped by a pad)
    → conv → bilinear to 13×11 (sizes) → Relu."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c1", "", "s"], ["u1"], mode="nearest"),
             helper.make_node("ConvTranspose", ["u1", "wt", "bt"], ["t"], strides=[2, 2],
                              pads=[1, 1, 0, 0]),
             helper.make_node("Conv", ["t", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c2", "", "", "sizes"], ["u2"], mode="linear"),
             helper.make_node("Relu", ["u2"], ["y"])]
    inits = {"w1": rand(8, 4, 3, 3, seed=1) * 0.3, "w2": rand(8, 8, 3, 3, seed=2) * 0.2,
             "wt": rand(8, 8, 3, 3, seed=3) * 0.2, "bt": rand(8, seed=4),
             "s": np.array([1, 1, 2, 2], np.float32),
             "sizes": np.array([1, 8, 13, 11], np.int64)}
    return make_model(nodes, [("x", [1, 4, 4, 5])], [("y", [1, 8, 13, 11])], inits)


def test_a_plan_with_generated_resize_and_conv_transpose_kernels_matches_onnxruntime(tmp_path):
    pytest.importorskip("halide")
    from woodpecker.engines.halide.templates import template_module
    from woodpecker.passes import optimize
    from woodpecker.tune.extract import extract_tasks
    from woodpecker.tune.records import TuningLog, TuningRecord

    model = _conv_resize_model()
    graph = import_onnx(model)
    optimize(graph)
    log = TuningLog(tmp_path / "tuning.jsonl")
    groups = extract_tasks(graph)
    assert sorted(g.task.kind for g in groups if g.task.kind in ("resize", "conv_transpose")) \
        == ["conv_transpose", "resize", "resize"]
    for i, g in enumerate(groups):
        config = template_module(g.templates[0]).space(g.task).sample(random.Random(i))
        log.append(TuningRecord(task=g.task.key, template=g.templates[0], config=config,
                                cost_s=1e-4, error=None))
    m = woodpecker.compile(model, engines="halide,numpy", tuning_log=str(log.path), threads=2)
    on = {n.op: e for n, e in zip(m.plan.graph.nodes, m.plan.engines)}
    assert on["Resize"] == on["ConvTranspose"] == "halide"
    x = rand(1, 4, 4, 5, seed=5)
    want = ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(m(x), want, rtol=1e-4, atol=1e-5)
    m.save(tmp_path / "p")
    np.testing.assert_array_equal(woodpecker.load(tmp_path / "p")(x), m(x))


def test_resize_variants_woodpecker_does_not_define_stay_opaque_and_run():
    model = _resize_model((1, 2, 5, 5), "cubic", "half_pixel", "floor", scales=[1, 1, 2, 2])
    graph = import_onnx(model)
    assert [n.op for n in graph.nodes] == ["Opaque"]
    assert "Resize mode cubic" in graph.nodes[0].attrs["why"]
    m = woodpecker.compile(model, threads=1, library_first=False)
    x = rand(1, 2, 5, 5)
    np.testing.assert_allclose(m(x), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_a_resize_of_channels_or_with_run_time_sizes_has_no_task():
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")
    model = make_model([node], [("x", [1, 4, 3, 3])], [("y", ["n", "c", "h", "w"])],
                       {"s": np.array([1, 2, 1, 1], np.float32)})
    (resize,) = import_onnx(model).nodes
    assert resize.outputs[0].shape == (1, 8, 3, 3) and task_from_node(resize) is None
