"""MaxPool (with optional Indices), AveragePool, GlobalAveragePool."""

from __future__ import annotations

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node
from woodpecker.ops import window
from woodpecker.ops.registry import DataOf, dtype_of, numel, op, output_numel, shape_of, where


def _pool_infer(node: Node, data_of: DataOf):
    x = shape_of(node, 0)
    kernel = tuple(node.attr("kernel_shape"))
    out = x[:2] + window.resolve(node, x[2:], kernel)
    return [(out, dtype_of(node, 0)), (out, np.dtype("int64"))]


def _pool_flops(node: Node) -> int:
    return output_numel(node) * numel(tuple(node.attrs["kernel_shape"]))


@op("MaxPool", _pool_infer, _pool_flops)
def maxpool(attrs, x):
    kernel = tuple(attrs["kernel_shape"])
    nd = len(kernel)
    out = window.out_shape(x.shape[2:], kernel, attrs)
    floating = np.issubdtype(x.dtype, np.floating)
    # NaN as ONNX Runtime treats it: a window's NaNs are passed over unless all its taps are
    # NaN (np.fmax); padding is NaN too, so it never wins (ONNX Runtime 1.32 keeps a NaN
    # that ends a window, which no order-free rule matches; ignoring them is its usual result)
    w = window.windows(x, attrs, kernel, out, np.nan if floating else np.iinfo(x.dtype).min)
    flat = w.reshape(w.shape[: 2 + nd] + (-1,))
    y = np.fmax.reduce(flat, axis=-1) if floating else flat.max(axis=-1)
    # Indices: flattened input position of each maximum (row-major, or column-major over
    # the spatial dims when storage_order=1), as ONNX MaxPool's second output.
    arg = np.unravel_index((np.where(np.isnan(flat), -np.inf, flat) if floating else flat)
                           .argmax(axis=-1), kernel)
    pads, s, d = attrs["_pads"], attrs["strides"], attrs["dilations"]
    coords = []
    for i in range(nd):
        o = np.arange(out[i]).reshape((1, 1) + tuple(-1 if j == i else 1 for j in range(nd)))
        coords.append(o * s[i] + arg[i] * d[i] - pads[i])
    spatial = x.shape[2:]
    if attrs.get("storage_order", 0):
        pos, mul = 0, 1
        for i in range(nd):
            pos, mul = pos + coords[i] * mul, mul * spatial[i]
    else:
        pos = 0
        for i in range(nd):
            pos = pos * spatial[i] + coords[i]
    nc = (np.arange(x.shape[0]).reshape((-1, 1) + (1,) * nd) * x.shape[1]
          + np.arange(x.shape[1]).reshape((1, -1) + (1,) * nd))
    return y, (nc * numel(spatial) + pos).astype(np.int64)


@op("AveragePool", _pool_infer, _pool_flops)
def avgpool(attrs, x):
    kernel = tuple(attrs["kernel_shape"])
    nd = len(kernel)
    out = window.out_shape(x.shape[2:], kernel, attrs)
    axes = tuple(range(-nd, 0))
    total = window.windows(x.astype(np.float64), attrs, kernel, out, 0).sum(axis=axes)
    include = bool(attrs.get("count_include_pad", 0))
    mask = window.valid_mask(x.shape, attrs, include)
    if include:
        # the mask already holds the explicit pads: window it with no further padding
        attrs_m = dict(attrs, _pads=[0] * (2 * nd))
        count = window.windows(mask, attrs_m, kernel, out, 0).sum(axis=axes)
    else:
        count = window.windows(mask, attrs, kernel, out, 0).sum(axis=axes)
    return (total / count).astype(x.dtype)


def _gap_infer(node: Node, data_of: DataOf):
    x = shape_of(node, 0)
    if len(x) < 3:
        raise ModelError(f"{where(node)}: needs an input of rank 3 or more (N, C, spatial…), "
                         f"got shape {x}")
    return [(x[:2] + (1,) * (len(x) - 2), dtype_of(node, 0))]


@op("GlobalAveragePool", _gap_infer, lambda n: numel(n.inputs[0].shape))
def global_avgpool(attrs, x):
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype)
