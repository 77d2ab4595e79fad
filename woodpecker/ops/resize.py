"""Resize (ONNX opset 11 and later): nearest and linear interpolation of any axes.

Contract: the output's size per axis is `sizes`, or floor(size × scale) from `scales` (one of
them a compile-time constant, optionally over the `axes` attribute's axes); each output
coordinate maps back to the input by `coordinate_transformation_mode` (half_pixel,
pytorch_half_pixel, align_corners, asymmetric) and is read there — the nearest input element
by `nearest_mode`, or the two neighbours weighted linearly (multilinear over every resized
axis: bilinear on images), coordinates clamped to the input. The interpolation is separable,
so `axis_taps` gives each resized axis's two source indices and the weight of the second; the
numpy reference and the generated kernel (engines/halide/resize.py) read the same taps.
Variants left to the libraries (the node stays Opaque, reason given): cubic mode,
tf_crop_and_resize and half_pixel_symmetric coordinates, antialiasing, a keep-aspect-ratio
policy other than stretch, linear interpolation of integers.

Paper: none of the papers defines Resize; issue 50 asks for it because every detector and
segmenter the real-world set holds (PP-OCR's DBNet, SegFormer, DeepLabV3, HRNet) upsamples
with it.
"""

from __future__ import annotations

import math

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node
from woodpecker.ops.registry import (
    DataOf,
    dtype_of,
    op,
    optional_data,
    output_numel,
    shape_of,
    where,
)

MODES = ("nearest", "linear")
COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _text(v, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def attributes(attrs: dict) -> tuple[str, str, str]:
    """(mode, coordinate_transformation_mode, nearest_mode), ONNX's defaults filled in."""
    return (_text(attrs.get("mode"), "nearest"),
            _text(attrs.get("coordinate_transformation_mode"), "half_pixel"),
            _text(attrs.get("nearest_mode"), "round_prefer_floor"))


def _check(node: Node) -> str | None:
    mode, coordinates, nearest = attributes(node.attrs)
    if mode not in MODES:
        return f"Resize mode {mode}"
    if coordinates not in COORDINATES:
        return f"Resize coordinate_transformation_mode {coordinates}"
    if nearest not in NEAREST:
        return f"Resize nearest_mode {nearest}"
    if node.attrs.get("antialias", 0):
        return "Resize with antialias"
    policy = _text(node.attrs.get("keep_aspect_ratio_policy"), "stretch")
    if policy != "stretch":
        return f"Resize keep_aspect_ratio_policy {policy}"
    x = node.input(0)
    if mode == "linear" and x is not None and x.dtype is not None and \
            not np.issubdtype(x.dtype, np.floating):
        return "Resize linear of integers"
    return None


def geometry(attrs: dict, shape: tuple[int, ...], scales: np.ndarray | None,
             sizes: np.ndarray | None) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(output shape, the scale of each axis): from `sizes` (scale = out / in) or `scales`
    (out = floor(in × scale)), over the `axes` attribute's axes (all by default). A
    ValueError says what does not fit."""
    rank = len(shape)
    axes = [a % rank for a in attrs.get("axes", range(rank))]
    if scales is not None and scales.size == 0:
        scales = None
    if sizes is not None and sizes.size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        raise ValueError("exactly one of scales and sizes must be given")
    given = scales if scales is not None else sizes
    if given.ndim != 1 or given.size != len(axes):
        raise ValueError(f"{'scales' if sizes is None else 'sizes'} has {given.size} values "
                         f"for {len(axes)} axes")
    out, factor = list(shape), [1.0] * rank
    for a, g in zip(axes, given.tolist()):
        if sizes is not None:
            out[a] = int(g)
            factor[a] = float(np.float32(out[a]) / np.float32(shape[a])) if shape[a] else 1.0
        else:
            factor[a] = float(np.float32(g))
            out[a] = int(math.floor(shape[a] * factor[a]))
        if out[a] < 0 or factor[a] <= 0 and shape[a]:
            raise ValueError(f"axis {a}: a scale of {factor[a]:g} (size {out[a]})")
    return tuple(out), tuple(factor)


def axis_taps(attrs: dict, n_in: int, n_out: int, scale: float,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first source index, second source index, weight of the second) per output position of
    one axis — nearest mode: both indices the nearest element, weight 0."""
    mode, coordinates, nearest = attributes(attrs)
    # in float32, as ONNX Runtime computes them: (1 + 0.5) / 0.6 − 0.5 is 2 in float32 and
    # just under it in float64, which takes floor's nearest element one back
    f32 = np.float32
    x = np.arange(n_out, dtype=f32)
    s = f32(scale)
    if coordinates == "align_corners":
        # over the output's whole length, as ONNX Runtime computes it (ONNX's spec divides by
        # in × scale − 1 where scales are given: tests/conformance/selection.py, DIFFERS)
        orig = x * f32(n_in - 1) / f32(n_out - 1) if n_out > 1 else np.zeros(n_out, f32)
    elif coordinates == "asymmetric":
        orig = x / s
    elif coordinates == "pytorch_half_pixel" and n_out <= 1:
        orig = np.zeros(n_out, f32)
    else:   # half_pixel, pytorch_half_pixel
        orig = (x + f32(0.5)) / s - f32(0.5)
    orig = orig.astype(np.float64)
    last = max(n_in - 1, 0)
    if mode == "nearest":
        floor = np.floor(orig)
        half = orig - floor == 0.5
        index = {"floor": floor, "ceil": np.ceil(orig),
                 "round_prefer_floor": np.where(half, floor, np.round(orig)),
                 "round_prefer_ceil": np.where(half, floor + 1, np.round(orig))}[nearest]
        i = np.clip(index, 0, last).astype(np.int32)
        return i, i, np.zeros(n_out, np.float32)
    orig = np.clip(orig, 0, last)
    first = np.floor(orig)
    weight = (orig - first).astype(np.float32)
    return first.astype(np.int32), np.minimum(first + 1, last).astype(np.int32), weight


def _infer(node: Node, data_of: DataOf):
    x = shape_of(node, 0)
    try:
        out, _ = geometry(node.attrs, x, optional_data(node, 2, data_of),
                          optional_data(node, 3, data_of))
    except ValueError as e:
        raise ModelError(f"{where(node)}: {e}") from None
    return [(out, dtype_of(node, 0))]


def _flops(node: Node) -> int:
    """One read per output element (nearest), or the multilinear taps' multiply-adds."""
    mode, _, _ = attributes(node.attrs)
    if mode == "nearest":
        return output_numel(node)
    resized = sum(a != b for a, b in zip(node.inputs[0].shape, node.outputs[0].shape))
    return output_numel(node) * 2 * max(resized, 1)


@op("Resize", _infer, _flops, _check)
def resize(attrs, x, roi=None, scales=None, sizes=None):
    out, factor = geometry(attrs, x.shape, None if scales is None else np.asarray(scales),
                           None if sizes is None else np.asarray(sizes))
    mode, _, _ = attributes(attrs)
    y = x
    for axis, (n_in, n_out, scale) in enumerate(zip(x.shape, out, factor)):
        if n_in == n_out and scale == 1.0:
            continue
        first, second, weight = axis_taps(attrs, n_in, n_out, scale)
        if mode == "nearest":
            y = np.take(y, first, axis=axis)
            continue
        w = weight.reshape((-1,) + (1,) * (y.ndim - axis - 1)).astype(np.float64)
        y = np.take(y, first, axis=axis) * (1 - w) + np.take(y, second, axis=axis) * w
    return np.ascontiguousarray(y, dtype=x.dtype)
