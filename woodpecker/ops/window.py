"""Sliding-window geometry shared by Conv and the pools: pads, auto_pad, ceil_mode, dilations.

The resolved begin/end pads are stored on the node as `_pads` by the shape rule, so engines and
references never re-derive them.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node
from woodpecker.ops.registry import where


def resolve(node: Node, spatial: tuple[int, ...], kernel: tuple[int, ...]) -> tuple[int, ...]:
    """Output spatial shape; stores `_pads` = (begins..., ends...) on the node."""
    nd = len(spatial)
    strides = list(node.attr("strides") or [1] * nd)
    dil = list(node.attr("dilations") or [1] * nd)
    pads = list(node.attr("pads") or [0] * (2 * nd))
    auto = node.attr("auto_pad", "NOTSET")
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd:
        raise ModelError(f"{where(node)}: strides/dilations/pads do not match {nd} spatial dims")
    _check(node, strides, dil, pads, kernel, auto)
    for i in range(nd):
        extent = dil[i] * (kernel[i] - 1) + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = math.ceil(spatial[i] / strides[i])
            total = max(0, (o - 1) * strides[i] + extent - spatial[i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + nd] = (small, big) if auto == "SAME_UPPER" else (big, small)
        elif auto == "VALID":
            pads[i] = pads[i + nd] = 0
        if spatial[i] + pads[i] + pads[i + nd] < extent:
            raise ModelError(f"{where(node)}: window larger than padded input")
    node.attrs["_pads"] = pads
    node.attrs["strides"], node.attrs["dilations"] = strides, dil
    return out_shape(spatial, kernel, node.attrs)


AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _check(node: Node, strides: list, dil: list, pads: list, kernel: tuple, auto) -> None:
    """The window attributes ONNX Runtime accepts, or a one-line ModelError: strides,
    dilations and kernel at least 1, pads not negative, a known auto_pad and not with explicit
    pads, and a pool's pads smaller than its kernel (a window of padding alone)."""
    if auto not in AUTO_PADS:
        raise ModelError(f"{where(node)}: auto_pad {auto!r} is none of {', '.join(AUTO_PADS)}")
    if auto != "NOTSET" and node.attr("pads") is not None:
        raise ModelError(f"{where(node)}: auto_pad {auto} and explicit pads together")
    for what, values, low in (("strides", strides, 1), ("dilations", dil, 1),
                              ("kernel_shape", kernel, 1), ("pads", pads, 0)):
        if any(not isinstance(v, (int, np.integer)) or v < low for v in values):
            raise ModelError(f"{where(node)}: {what} {list(values)} must be integers of at "
                             f"least {low}")
    nd = len(kernel)
    if node.op != "Conv" and any(max(pads[i], pads[i + nd]) >= kernel[i] for i in range(nd)):
        raise ModelError(f"{where(node)}: pads {list(pads)} must be smaller than the kernel "
                         f"{list(kernel)}")


def out_shape(spatial: tuple[int, ...], kernel: tuple[int, ...], attrs: dict) -> tuple[int, ...]:
    """Output spatial shape from resolved pads; with ceil_mode a last window that would start
    inside the end padding is dropped (ONNX pooling spec, as PyTorch)."""
    nd = len(kernel)
    pads, s, d = attrs["_pads"], attrs["strides"], attrs["dilations"]
    ceil_mode = attrs.get("ceil_mode", 0)
    out = []
    for i in range(nd):
        span = spatial[i] + pads[i] + pads[i + nd] - d[i] * (kernel[i] - 1) - 1
        o = (math.ceil if ceil_mode else math.floor)(span / s[i]) + 1
        if ceil_mode and (o - 1) * s[i] >= spatial[i] + pads[i]:
            o -= 1
        out.append(o)
    return tuple(out)


def windows(x: np.ndarray, attrs: dict, kernel: tuple[int, ...], out: tuple[int, ...],
            fill) -> np.ndarray:
    """Strided view of shape x.shape[:2] + out + kernel, padded with `fill` outside x."""
    nd = len(kernel)
    pads, strides, dil = attrs["_pads"], attrs["strides"], attrs["dilations"]
    widths = [(0, 0), (0, 0)]
    for i in range(nd):
        need = (out[i] - 1) * strides[i] + dil[i] * (kernel[i] - 1) + 1
        end = max(pads[i + nd], need - x.shape[2 + i] - pads[i])
        widths.append((pads[i], end))
    xp = np.pad(x, widths, constant_values=fill)
    extents = tuple(dil[i] * (kernel[i] - 1) + 1 for i in range(nd))
    w = sliding_window_view(xp, extents, axis=tuple(range(2, 2 + nd)))
    index = (slice(None), slice(None))
    index += tuple(slice(None, out[i] * strides[i], strides[i]) for i in range(nd))
    index += tuple(slice(None, None, dil[i]) for i in range(nd))
    return w[index][(slice(None), slice(None)) + tuple(slice(0, o) for o in out)]


def valid_mask(shape: tuple[int, ...], attrs: dict, include_pads: bool) -> np.ndarray:
    """1 where a window tap counts: inside x, or inside the explicit pads if `include_pads`.
    Taps added only by ceil_mode never count (the ONNX and PyTorch convention)."""
    nd = len(shape) - 2
    ones = np.ones((1, 1) + tuple(shape[2:]), dtype=np.float64)
    if include_pads:
        pads = attrs["_pads"]
        ones = np.pad(ones, [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)],
                      constant_values=1.0)
    return ones
