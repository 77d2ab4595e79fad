"""Normalisations and reductions: BatchNormalization (inference), LayerNormalization,
RMSNormalization (ONNX opset 23; passes/rmsnorm.py builds it from the ops T5 and Llama export),
Softmax, ReduceMean."""

from __future__ import annotations

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node
from woodpecker.ops.registry import (
    DataOf,
    dtype_of,
    norm_axis,
    op,
    optional_data,
    output_numel,
    same_as_input,
    shape_of,
    where,
)


def _bn_check(node: Node) -> str | None:
    if node.attr("training_mode", 0):
        return "BatchNormalization with training_mode=1"
    return None


def _bn_infer(node: Node, data_of: DataOf):
    """The input's shape; scale, bias, mean and variance are vectors of its channels."""
    x = shape_of(node, 0)
    if len(x) < 2:
        raise ModelError(f"{where(node)}: needs an input of rank 2 or more, got shape {x}")
    for i, what in enumerate(("scale", "bias", "mean", "variance"), start=1):
        if shape_of(node, i) != (x[1],):
            raise ModelError(f"{where(node)}: {what} must be a vector of the input's {x[1]} "
                             f"channels, got shape {shape_of(node, i)}")
    return same_as_input(node, data_of)


@op("BatchNormalization", _bn_infer, lambda n: 2 * output_numel(n), _bn_check)
def batchnorm(attrs, x, scale, bias, mean, var):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale / np.sqrt(var + attrs.get("epsilon", 1e-5))
    return (x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)


def _ln_infer(node: Node, data_of: DataOf):
    shape = shape_of(node, 0)
    axis = norm_axis(node, node.attr("axis", -1), len(shape))
    stat = shape[:axis] + (1,) * (len(shape) - axis)
    stash = np.dtype("float32")
    return [(shape, dtype_of(node, 0)), (stat, stash), (stat, stash)]


@op("LayerNormalization", _ln_infer, lambda n: 8 * output_numel(n))
def layernorm(attrs, x, scale, bias=None):
    axis = attrs.get("axis", -1) % x.ndim
    axes = tuple(range(axis, x.ndim))
    x32 = x.astype(np.float32)
    mean = x32.mean(axis=axes, keepdims=True)
    var = ((x32 - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + attrs.get("epsilon", 1e-5))
    y = (x32 - mean) * inv * scale
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype), mean, inv


def _rms_infer(node: Node, data_of: DataOf):
    shape = shape_of(node, 0)
    norm_axis(node, node.attr("axis", -1), len(shape))
    return same_as_input(node, data_of)


@op("RMSNormalization", _rms_infer, lambda n: 4 * output_numel(n))
def rmsnorm(attrs, x, scale):
    """x / sqrt(mean(x²) + epsilon) · scale over the axes from `axis` on, in float32 (the
    spec's stash_type)."""
    axis = attrs.get("axis", -1) % x.ndim
    x32 = x.astype(np.float32)
    ms = (x32 * x32).mean(axis=tuple(range(axis, x.ndim)), keepdims=True)
    return (x32 / np.sqrt(ms + np.float32(attrs.get("epsilon", 1e-5))) * scale).astype(x.dtype)


@op("Softmax", same_as_input, lambda n: 5 * output_numel(n))
def softmax(attrs, x):
    axis = attrs.get("axis", -1)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def reduce_axes(node: Node, data_of: DataOf, rank: int) -> tuple[int, ...] | None:
    """The reduced axes (None = all), from the attribute (opset < 18) or input 1."""
    axes = node.attr("axes")
    if axes is None and len(node.inputs) > 1:
        data = optional_data(node, 1, data_of)
        axes = None if data is None else [int(a) for a in data.reshape(-1)]
    if axes is None or len(axes) == 0:
        return None
    if len(set(a % rank for a in axes)) != len(axes):
        raise ModelError(f"{where(node)}: repeated axes {axes}")
    return tuple(norm_axis(node, a, rank) for a in axes)


def _rm_infer(node: Node, data_of: DataOf):
    shape = shape_of(node, 0)
    axes = reduce_axes(node, data_of, len(shape))
    if axes is None:
        if node.attr("noop_with_empty_axes", 0):
            node.attrs["_axes"] = []
            return [(shape, dtype_of(node, 0))]
        axes = tuple(range(len(shape)))
    node.attrs["_axes"] = list(axes)
    keep = node.attr("keepdims", 1)
    out = tuple((1 if i in axes else d) for i, d in enumerate(shape) if keep or i not in axes)
    return [(out, dtype_of(node, 0))]


@op("ReduceMean", _rm_infer, lambda n: output_numel(n))
def reduce_mean(attrs, x, axes_in=None):
    axes = tuple(attrs["_axes"])
    if not axes:
        return x
    return np.mean(x, axis=axes, keepdims=bool(attrs.get("keepdims", 1))).astype(x.dtype)
