"""A library running the user's whole graph must agree with ONNX Runtime before it may be the
plan (selection/library_first._check_outputs): within config.TOLERANCE, or where ONNX
Runtime's own result moves further with its graph optimisations off (the model's float
noise), within config.LIBRARY_SPREAD_FACTOR times that movement."""

from __future__ import annotations

import numpy as np
import pytest

from woodpecker.config import LIBRARY_SPREAD_FACTOR, TOLERANCE
from woodpecker.selection.library_first import _check_outputs, relative_difference


class _Outputs:
    """A plan seen through what the check uses of it: its inputs, its outputs on them."""

    inputs = [("x", (4,), np.dtype(np.float32))]

    def __init__(self, y: np.ndarray) -> None:
        self.y = y

    def run(self, feeds):
        return {"y": self.y}


WANT = np.array([1.0, -2.0, 0.5, 4.0], np.float32)


def _moved(by: float) -> np.ndarray:
    return WANT + np.float32(by * 4.0) * np.array([0, 1, 0, 0], np.float32)


def _check(other: np.ndarray, spread_by: float | None):
    plans = {"onnxruntime": _Outputs(WANT), "openvino": _Outputs(other)}
    refused, agreement = {}, {}
    spread = None if spread_by is None else (lambda feeds: [_moved(spread_by)])
    _check_outputs(plans, refused, None, spread, agreement)
    return plans, refused, agreement


def test_within_the_tolerance_no_spread_is_asked():
    def never(feeds):
        raise AssertionError("asked")

    plans = {"onnxruntime": _Outputs(WANT), "openvino": _Outputs(_moved(TOLERANCE / 2))}
    _check_outputs(plans, {}, None, never, {})
    assert "openvino" in plans


def test_the_models_own_float_noise_sets_the_bar_where_larger():
    noise = 10 * TOLERANCE
    plans, refused, agreement = _check(_moved(LIBRARY_SPREAD_FACTOR * noise * 0.9), noise)
    assert "openvino" in plans and not refused
    record = agreement["openvino"]
    assert record["max_rel_diff"] == pytest.approx(LIBRARY_SPREAD_FACTOR * noise * 0.9,
                                                   rel=1e-3)
    assert record["allowed"] == pytest.approx(LIBRARY_SPREAD_FACTOR * noise, rel=1e-3)


@pytest.mark.parametrize("noise", [None, 0.0, 10 * TOLERANCE])
def test_beyond_the_bar_the_library_is_refused_with_its_numbers(noise):
    bar = max(TOLERANCE, LIBRARY_SPREAD_FACTOR * (noise or 0.0))
    plans, refused, agreement = _check(_moved(bar * 1.5), noise)
    assert "openvino" not in plans and not agreement
    assert refused["openvino"].startswith("its output 0 differs from onnxruntime's by ")
    assert f"(allowed {bar:.2g})" in refused["openvino"]


def test_relative_difference():
    a = np.array([1.0, np.nan, np.inf, -3.0], np.float32)
    assert relative_difference(a.copy(), a) == 0.0
    b = a.copy()
    b[3] = -2.97
    assert relative_difference(b, a) == pytest.approx(0.01, rel=1e-3)   # of 3, the finite max
    b = a.copy()
    b[1] = 0.0
    assert relative_difference(b, a) == np.inf                           # NaN where not NaN
    assert relative_difference(a[:3], a) == np.inf                       # another shape
    ints = np.array([1, 2, 3])
    assert relative_difference(ints, ints) == 0.0
    assert relative_difference(ints + (ints == 3), ints) == np.inf
