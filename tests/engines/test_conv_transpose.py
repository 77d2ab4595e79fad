"""ConvTranspose (ops/conv_transpose.py, tasks/conv_transpose.py,
engines/halide/conv_transpose.py): the reference matches ONNX Runtime over strides, dilations,
pads, output_padding, groups and 1-3 spatial dims; the variants Woodpecker does not define
(output_shape, SAME auto-pads) stay Opaque and still run. Every valid configuration of the
generated kernel matches the reference: TASKS, in test_halide_non_conv's cases. (A plan with
generated transposed convolutions: tests/engines/test_resize.py.)"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.tasks.conv_transpose import ConvTransposeTask


def _model(nd, c, m, groups, size, k, stride, dilation, pads, extra, bias, **attrs):
    shape = [1, c] + [size] * nd
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    node = helper.make_node("ConvTranspose", inputs, ["y"], strides=[stride] * nd,
                            dilations=[dilation] * nd, pads=list(pads) * 2 if pads else None,
                            output_padding=[extra] * nd, group=groups, **attrs)
    inits = {"w": rand(c, m // groups, *[k] * nd, seed=1) * 0.3}
    if bias:
        inits["b"] = rand(m, seed=2)
    out = [f"d{i}" for i in range(len(shape))]
    return make_model([node], [("x", shape)], [("y", out)], inits), rand(*shape, seed=3)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.sampled_from([(2, 4, 1), (4, 6, 2), (3, 3, 3)]),
       st.integers(2, 5), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2),
       st.integers(0, 1), st.integers(0, 2), st.booleans())
def test_reference_matches_onnxruntime(nd, channels, size, k, stride, dilation, pad, extra,
                                       bias):
    c, m, groups = channels
    extra = min(extra, stride - 1)
    pads = [pad] * nd
    if stride * (size - 1) + extra + dilation * (k - 1) + 1 - 2 * pad < 1:
        return    # the pads would crop the whole output (an error, tested by ORT's own rule)
    model, x = _model(nd, c, m, groups, size, k, stride, dilation, pads, extra, bias)
    m_ = woodpecker.compile(model, engines="numpy", threads=1)
    assert [n.op for n in m_.graph.nodes] == ["ConvTranspose"]
    want = ort_run(model, {"x": x})[0]
    got = m_(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_output_shape_and_same_pads_stay_opaque_and_run():
    for attrs, why in (({"output_shape": [9, 9]}, "output_shape"),
                       ({"auto_pad": "SAME_UPPER"}, "auto_pad SAME_UPPER")):
        model, x = _model(2, 2, 4, 1, 4, 3, 2, 1, None, 0, True, **attrs)
        graph = import_onnx(model)
        assert [n.op for n in graph.nodes] == ["Opaque"] and why in graph.nodes[0].attrs["why"]
        m = woodpecker.compile(model, threads=1, library_first=False)
        np.testing.assert_allclose(m(x), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


TASKS = [
    ConvTransposeTask(1, 8, 4, 5, 8, 2, 2, (2, 2), (0, 0, 0, 0), (0, 0), True),  # DBNet's
    ConvTransposeTask(2, 3, 5, 4, 12, 3, 3, (2, 2), (1, 1, 0, 1), (1, 0), False),
    ConvTransposeTask(1, 6, 3, 3, 4, 4, 3, (3, 2), (0, 2, 1, 0), (0, 1), True),
    ConvTransposeTask(1, 5, 6, 6, 16, 3, 3, (1, 1), (1, 1, 1, 1), (0, 0), True),
]
