"""NaN and infinity: every generated template gives NaN, +inf and -inf exactly where the numpy
reference does (engines/halide/ieee.py), and the reference gives them where ONNX Runtime does,
so a non-finite input never becomes a plausible number on whichever engine a node runs —
Winograd included, whose transforms would spread a non-finite input over its tile: it
recomputes such an input's output directly (conv_winograd._direct_fallback)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from tests.helpers import make_model, ort_run

pytest.importorskip("halide")
from tests.engines import test_halide_conv, test_halide_non_conv  # noqa: E402
from woodpecker.engines.halide.templates import kernel_arguments  # noqa: E402

CASES = test_halide_conv.CASES + test_halide_non_conv.CASES


def _spoil(a: np.ndarray, rng: np.random.Generator, share: float) -> np.ndarray:
    """`a` with about `share` of its entries NaN, +inf or -inf (at least one)."""
    flat = a.copy().ravel()
    pos = rng.choice(flat.size, size=max(1, int(flat.size * share)), replace=False)
    flat[pos] = rng.choice(np.array([np.nan, np.inf, -np.inf], np.float32), size=pos.size)
    return flat.reshape(a.shape)


def _classes(a: np.ndarray) -> np.ndarray:
    return np.select([np.isnan(a), np.isposinf(a), np.isneginf(a)], [1, 2, 3], 0)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(range(len(CASES))), st.integers(0, 2**16),
       st.sampled_from([0.005, 0.05, 1.0]))
def test_nonfinite_inputs_give_the_references_nonfinite_outputs(which, seed, share):
    template, task = CASES[which]
    rng = np.random.default_rng(seed)
    config = template.space(task).sample(random.Random(seed))
    inputs = task.random_inputs(seed)
    inputs[0] = _spoil(inputs[0], rng, share)
    got = template.build(task, config)(*kernel_arguments(template, task, config, inputs))
    with np.errstate(all="ignore"):
        want = task.reference(inputs)
    finite = np.isfinite(got) & np.isfinite(want)
    np.testing.assert_array_equal(_classes(got), _classes(want), err_msg=str(config))
    scale = np.max(np.abs(want[finite]), initial=1.0)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-3, atol=1e-4 * scale)


X = np.array([[np.nan, np.inf, -np.inf, 1.0, -1.0, 0.0, 7.0, -100.0, 100.0, 3e38, -3e38,
               1e30]], np.float32)


@pytest.mark.parametrize("op, attrs, consts", [
    ("Relu", {}, {}), ("Clip", {}, {"lo": 0.0, "hi": 6.0}), ("HardSigmoid", {}, {}),
    ("HardSwish", {}, {}), ("Sigmoid", {}, {}), ("Tanh", {}, {}), ("Gelu", {}, {}),
    ("Gelu", {"approximate": "tanh"}, {}), ("Softmax", {}, {}), ("LeakyRelu", {"alpha": 0.1}, {}),
])
def test_reference_treats_nonfinite_as_onnx_runtime_does(op, attrs, consts):
    """The numpy engine (the reference every kernel is checked against) on one-node models."""
    import woodpecker

    inits = {k: np.array(v, np.float32) for k, v in consts.items()}
    model = make_model([helper.make_node(op, ["x", *inits], ["y"], **attrs)],
                       [("x", list(X.shape))], [("y", list(X.shape))], inits, opset=20)
    want = ort_run(model, {"x": X})[0]
    with np.errstate(all="ignore"):
        got = woodpecker.compile(model, engines="numpy").run({"x": X})["y"]
    np.testing.assert_array_equal(_classes(got), _classes(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)


def test_maxpool_passes_over_nan_unless_the_window_is_all_nan():
    """ONNX Runtime's MaxPool skips a NaN before the window's other taps and returns NaN for a
    window of NaNs; the reference (np.fmax) does both, and ±inf as ONNX Runtime does."""
    import woodpecker

    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 0, 0] = np.nan                      # the first tap of window (0, 0)
    x[0, 0, 2:, 2:] = np.nan                    # all of window (1, 1)
    x[0, 0, 0, 2], x[0, 0, 2, 0] = np.inf, -np.inf
    model = make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2],
                                         strides=[2, 2])],
                       [("x", [1, 1, 4, 4])], [("y", [1, 1, 2, 2])])
    want = ort_run(model, {"x": x})[0]
    got = woodpecker.compile(model, engines="numpy").run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[0, 0, 1, 1]) and got[0, 0, 0, 0] == 5.0
