"""GatherElements, GatherND and Range: what the current PyTorch exporter makes of transformers'
position ids and attention-mask building (BERT's `token_type_ids` buffer, DistilBERT's and BERT's
mask expansion). Negative indices count from the end, as ONNX allows; Range needs its three
scalars at compile time (its length is its shape).
"""

from __future__ import annotations

import math

import numpy as np

from woodpecker.errors import DynamicShapeError, ModelError
from woodpecker.ir.graph import Node
from woodpecker.ops.registry import (
    DataOf,
    dtype_of,
    norm_axis,
    op,
    output_numel,
    shape_of,
    where,
)


def _gather_elements_infer(node: Node, data_of: DataOf):
    data, idx = shape_of(node, 0), shape_of(node, 1)
    if len(data) != len(idx):
        raise ModelError(f"{where(node)}: data and indices must have the same rank, got "
                         f"{data} and {idx}")
    norm_axis(node, node.attrs.get("axis", 0), len(data))
    return [(idx, dtype_of(node, 0))]


@op("GatherElements", _gather_elements_infer, output_numel)
def _gather_elements(attrs, x, i):
    axis = attrs.get("axis", 0) % max(x.ndim, 1)
    i = i.astype(np.int64)
    return np.take_along_axis(x, np.where(i < 0, i + x.shape[axis], i), axis=axis)


def _gather_nd_infer(node: Node, data_of: DataOf):
    data, idx = shape_of(node, 0), shape_of(node, 1)
    b = node.attrs.get("batch_dims", 0)
    if not idx or b >= min(len(data), len(idx)) or b + idx[-1] > len(data) \
            or data[:b] != idx[:b]:
        raise ModelError(f"{where(node)}: indices of shape {idx} cannot index data of shape "
                         f"{data} with batch_dims {b}")
    return [(tuple(idx[:-1]) + tuple(data[b + idx[-1]:]), dtype_of(node, 0))]


@op("GatherND", _gather_nd_infer, output_numel)
def _gather_nd(attrs, x, i):
    b = attrs.get("batch_dims", 0)
    i = i.astype(np.int64)
    m = i.shape[-1]
    batch = int(np.prod(x.shape[:b], dtype=np.int64))
    xs = x.reshape((batch,) + x.shape[b:])
    ix = i.reshape((batch, -1, m))
    out = [xs[k][tuple(ix[k, :, j] for j in range(m))] for k in range(batch)]
    return np.stack(out).reshape(i.shape[:-1] + x.shape[b + m:])


def _range_infer(node: Node, data_of: DataOf):
    vals = [data_of(v) for v in node.inputs]
    if any(v is None for v in vals):
        raise DynamicShapeError(f"{where(node)}: its start, limit and delta are computed at run "
                                "time; Woodpecker needs them static (its length is its shape)")
    start, limit, delta = (np.asarray(v).reshape(()) for v in vals)
    if delta == 0:
        raise ModelError(f"{where(node)}: delta is 0")
    n = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    return [((n,), dtype_of(node, 0))]


@op("Range", _range_infer, output_numel)
def _range(attrs, start, limit, delta):
    start, limit, delta = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    n = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    return (start + delta * np.arange(n, dtype=start.dtype)).astype(start.dtype)
