"""ConvTranspose (N-d, groups, strides, dilations, explicit pads, output_padding): the gradient
of a convolution with respect to its input, the upsampling layer of detectors and segmenters.

Contract: output size per spatial axis = stride·(in − 1) + output_padding + dilation·(k − 1)
+ 1 − pad_begin − pad_end; each input element scatters its weights times itself onto the
output window it maps to (kernel tap t of input i lands at i·stride + t·dilation − pad_begin).
The weights are (C, M / group, *kernel). The reference scatters one kernel tap at a time (a
matrix product per tap and group onto a strided slice), then crops the pads and adds the bias.
Variants left to the libraries (the node stays Opaque, reason given): `output_shape` and the
SAME auto-pads, whose pad split ONNX Runtime has computed otherwise than the ONNX spec in
some versions.

Paper: none of the papers defines it; issue 50 asks for it (PP-OCR's DBNet head upsamples with
two ConvTransposes).
"""

from __future__ import annotations

import itertools

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node
from woodpecker.ops.conv import bias_and_kernel
from woodpecker.ops.registry import DataOf, dtype_of, numel, op, shape_of, where


def _check(node: Node) -> str | None:
    if node.attrs.get("output_shape") is not None:
        return "ConvTranspose with output_shape"
    auto = node.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto not in ("NOTSET", "VALID"):
        return f"ConvTranspose auto_pad {auto}"
    return None


def _infer(node: Node, data_of: DataOf):
    x, w = shape_of(node, 0), shape_of(node, 1)
    nd = len(x) - 2
    groups = int(node.attr("group", 1))
    if nd < 1 or len(w) != len(x) or w[0] != x[1] or x[1] % groups:
        raise ModelError(f"{where(node)}: input {x} and weight {w} do not fit group={groups}")
    m = w[1] * groups
    kernel = bias_and_kernel(node, w, m)
    strides = list(node.attr("strides") or [1] * nd)
    dil = list(node.attr("dilations") or [1] * nd)
    pads = list(node.attr("pads") or [0] * (2 * nd))
    extra = list(node.attr("output_padding") or [0] * nd)
    if node.attr("auto_pad", "NOTSET") in ("VALID", b"VALID"):
        pads = [0] * (2 * nd)
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd or len(extra) != nd:
        raise ModelError(f"{where(node)}: strides/dilations/pads/output_padding do not match "
                         f"{nd} spatial dims")
    # (output_padding below the stride: ONNX Runtime refuses it at the stride even where the
    # dilation is larger, which the spec allows)
    if min(strides + dil) < 1 or min(pads + extra) < 0 or \
            any(e >= s for e, s in zip(extra, strides)):
        raise ModelError(f"{where(node)}: strides and dilations must be positive, pads "
                         "non-negative, output_padding below the stride")
    out = tuple(s * (i - 1) + e + d * (k - 1) + 1 - pads[a] - pads[a + nd]
                for a, (i, k, s, d, e) in enumerate(zip(x[2:], kernel, strides, dil, extra)))
    if min(out) < 1:
        raise ModelError(f"{where(node)}: the pads crop the whole output ({list(out)})")
    node.attrs.update(group=groups, strides=strides, dilations=dil, output_padding=extra,
                      _pads=pads)
    return [((x[0], m) + out, dtype_of(node, 0))]


def _flops(node: Node) -> int:
    x, w = node.inputs[0].shape, node.inputs[1].shape
    return 2 * numel(x) * numel(w[1:])


@op("ConvTranspose", _infer, _flops, _check)
def conv_transpose(attrs, x, w, b=None):
    g = attrs.get("group", 1)
    n, c = x.shape[:2]
    spatial, kernel = x.shape[2:], w.shape[2:]
    nd = len(kernel)
    s, d, pads, extra = attrs["strides"], attrs["dilations"], attrs["_pads"], \
        attrs["output_padding"]
    mg = w.shape[1]
    full = tuple(s[a] * (spatial[a] - 1) + extra[a] + d[a] * (kernel[a] - 1) + 1
                 for a in range(nd))
    y = np.zeros((n, g * mg) + full, np.float64 if x.dtype == np.float64 else np.float32)
    xg = x.reshape((n, g, c // g) + spatial)
    wg = w.reshape((g, c // g, mg) + kernel)
    for tap in itertools.product(*(range(k) for k in kernel)):
        part = np.einsum("ngc...,gcm->ngm...", xg, wg[(slice(None),) * 3 + tap], optimize=True)
        where_ = tuple(slice(t * d[a], t * d[a] + s[a] * (spatial[a] - 1) + 1, s[a])
                       for a, t in enumerate(tap))
        y[(slice(None), slice(None)) + where_] += part.reshape((n, g * mg) + spatial)
    y = y[(slice(None), slice(None)) + tuple(slice(pads[a], full[a] - pads[a + nd])
                                             for a in range(nd))]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nd)
    return np.ascontiguousarray(y, dtype=x.dtype)
