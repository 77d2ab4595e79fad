"""Shape and data-movement ops. Shape rules store their resolved static parameters on the node
(`_axes`, `_shape`, `_slices`, `_split`, `_pad_widths`) so engines never need the constant
inputs those parameters came from."""

from __future__ import annotations

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node
from woodpecker.ops.registry import (
    DataOf,
    broadcast,
    dtype_of,
    norm_axis,
    numel,
    op,
    optional_data,
    required_data,
    same_as_input,
    shape_of,
    where,
)


def _ints(a) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


# -- Identity, Dropout (inference), Constant ---------------------------------------------------
op("Identity", same_as_input)(lambda attrs, x: x)


def _dropout_check(node: Node) -> str | None:
    t = node.input(2)
    if t is not None and (t.data is None or bool(np.asarray(t.data).reshape(-1)[0])):
        return "Dropout in training mode"
    return None


def _dropout_infer(node: Node, data_of: DataOf):
    return [(shape_of(node, 0), dtype_of(node, 0)), (shape_of(node, 0), np.dtype(bool))]


@op("Dropout", _dropout_infer, check=_dropout_check)
def dropout(attrs, x, ratio=None, training=None):
    return x, np.ones(x.shape, dtype=bool)


def _const_infer(node: Node, data_of: DataOf):
    v = node.attrs["value"]
    return [(v.shape, v.dtype)]


op("Constant", _const_infer)(lambda attrs: attrs["value"])


# -- Shape, ConstantOfShape, Reshape, Flatten, Expand ----------------------------------------------
def _shape_range(node: Node, rank: int) -> tuple[int, int]:
    start, end = node.attr("start", 0), node.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, max(start, end)


def _shape_infer(node: Node, data_of: DataOf):
    start, end = _shape_range(node, len(shape_of(node, 0)))
    node.attrs["start"], node.attrs["end"] = start, end
    return [((end - start,), np.dtype("int64"))]


op("Shape", _shape_infer)(
    lambda attrs, x: np.array(x.shape[attrs["start"]:attrs["end"]], dtype=np.int64))


def _cos_infer(node: Node, data_of: DataOf):
    shape = tuple(_ints(required_data(node, 0, data_of, "shape")))
    value = node.attr("value")
    dt = value.dtype if value is not None else np.dtype("float32")
    node.attrs["_shape"] = list(shape)
    return [(shape, dt)]


@op("ConstantOfShape", _cos_infer)
def constant_of_shape(attrs, shape):
    value = attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else value
    return np.full(tuple(attrs["_shape"]), value.reshape(-1)[0], dtype=value.dtype)


def _reshape_infer(node: Node, data_of: DataOf):
    x = shape_of(node, 0)
    target = _ints(required_data(node, 1, data_of, "shape"))
    allowzero = node.attr("allowzero", 0)
    out = [x[i] if (d == 0 and not allowzero) else d for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise ModelError(f"{where(node)}: more than one -1 in shape {target}")
    if -1 in out:
        known = numel(tuple(d for d in out if d != -1))
        out[out.index(-1)] = numel(x) // known if known else 0
    if numel(tuple(out)) != numel(x):
        raise ModelError(f"{where(node)}: cannot reshape {x} to {target}")
    node.attrs["_shape"] = out
    return [(tuple(out), dtype_of(node, 0))]


op("Reshape", _reshape_infer)(lambda attrs, x, shape=None: x.reshape(attrs["_shape"]))


def _flatten_infer(node: Node, data_of: DataOf):
    x = shape_of(node, 0)
    axis = node.attr("axis", 1)
    axis = axis + len(x) if axis < 0 else axis
    if not 0 <= axis <= len(x):
        raise ModelError(f"{where(node)}: axis out of range for rank {len(x)}")
    node.attrs["axis"] = axis
    return [((numel(x[:axis]), numel(x[axis:])), dtype_of(node, 0))]


op("Flatten", _flatten_infer)(
    lambda attrs, x: x.reshape(numel(x.shape[:attrs["axis"]]), -1 if x.size else 0))


def _expand_infer(node: Node, data_of: DataOf):
    target = tuple(_ints(required_data(node, 1, data_of, "shape")))
    out = broadcast(node, shape_of(node, 0), target)
    node.attrs["_shape"] = list(out)
    return [(out, dtype_of(node, 0))]


op("Expand", _expand_infer)(
    lambda attrs, x, shape=None: np.broadcast_to(x, tuple(attrs["_shape"])).copy())


# Ops that only reinterpret their input's row-major bytes in another shape.
RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


# -- Transpose, Squeeze, Unsqueeze -------------------------------------------------------------
def _transpose_infer(node: Node, data_of: DataOf):
    x = shape_of(node, 0)
    perm = node.attr("perm") or list(range(len(x)))[::-1]
    if sorted(perm) != list(range(len(x))):
        raise ModelError(f"{where(node)}: perm {perm} is not a permutation of rank {len(x)}")
    node.attrs["perm"] = list(perm)
    return [(tuple(x[p] for p in perm), dtype_of(node, 0))]


op("Transpose", _transpose_infer)(lambda attrs, x: np.transpose(x, attrs["perm"]))


def _axes(node: Node, data_of: DataOf) -> list[int] | None:
    axes = node.attr("axes")
    if axes is None and node.input(1) is not None:
        axes = _ints(required_data(node, 1, data_of, "axes"))
    return axes


def _squeeze_infer(node: Node, data_of: DataOf):
    x = shape_of(node, 0)
    axes = _axes(node, data_of)
    if axes is None:
        axes = [i for i, d in enumerate(x) if d == 1]
    axes = sorted(norm_axis(node, a, len(x)) for a in axes)
    if any(x[a] != 1 for a in axes):
        raise ModelError(f"{where(node)}: cannot squeeze axes {axes} of shape {x}")
    node.attrs["_axes"] = axes
    return [(tuple(d for i, d in enumerate(x) if i not in axes), dtype_of(node, 0))]


op("Squeeze", _squeeze_infer)(
    lambda attrs, x, axes=None: np.squeeze(x, axis=tuple(attrs["_axes"])))


def _unsqueeze_infer(node: Node, data_of: DataOf):
    x = shape_of(node, 0)
    axes = _axes(node, data_of) or []
    rank = len(x) + len(axes)
    axes = sorted(norm_axis(node, a, rank) for a in axes)
    if len(set(axes)) != len(axes):
        raise ModelError(f"{where(node)}: repeated axes")
    node.attrs["_axes"] = axes
    out, it = [], iter(x)
    for i in range(rank):
        out.append(1 if i in axes else next(it))
    return [(tuple(out), dtype_of(node, 0))]


op("Unsqueeze", _unsqueeze_infer)(
    lambda attrs, x, axes=None: np.expand_dims(x, tuple(attrs["_axes"])))


# -- Concat, Split, Slice, Gather, Pad -----------------------------------------------------------
def _concat_infer(node: Node, data_of: DataOf):
    shapes = [shape_of(node, i) for i in range(len(node.inputs))]
    axis = norm_axis(node, node.attr("axis"), len(shapes[0]))
    node.attrs["axis"] = axis
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0]))
                                          if i != axis):
            raise ModelError(f"{where(node)}: cannot concatenate {shapes} on axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [(tuple(out), dtype_of(node, 0))]


op("Concat", _concat_infer)(lambda attrs, *xs: np.concatenate(xs, axis=attrs["axis"]))


def _split_infer(node: Node, data_of: DataOf):
    x = shape_of(node, 0)
    axis = norm_axis(node, node.attr("axis", 0), len(x))
    node.attrs["axis"] = axis
    split = node.attr("split")
    if split is None and node.input(1) is not None:
        split = _ints(required_data(node, 1, data_of, "split"))
    n = len(node.outputs)
    if split is None:
        parts = node.attr("num_outputs", n)
        size = -(-x[axis] // parts)
        split = [min(size, x[axis] - i * size) for i in range(parts)]
    if sum(split) != x[axis] or len(split) != n:
        raise ModelError(f"{where(node)}: split {split} does not fit axis of size {x[axis]}")
    node.attrs["_split"] = list(split)
    return [(x[:axis] + (s,) + x[axis + 1:], dtype_of(node, 0)) for s in split]


@op("Split", _split_infer)
def split(attrs, x, split_in=None):
    bounds = np.cumsum(attrs["_split"])[:-1]
    return tuple(np.split(x, bounds, axis=attrs["axis"]))


def _slice_infer(node: Node, data_of: DataOf):
    x = shape_of(node, 0)
    starts = _ints(required_data(node, 1, data_of, "starts"))
    ends = _ints(required_data(node, 2, data_of, "ends"))
    axes = optional_data(node, 3, data_of)
    steps = optional_data(node, 4, data_of)
    axes = _ints(axes) if axes is not None else list(range(len(starts)))
    steps = _ints(steps) if steps is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelError(f"{where(node)}: starts, ends, axes and steps differ in length "
                         f"({len(starts)}, {len(ends)}, {len(axes)}, {len(steps)})")
    if len({a % len(x) if len(x) else a for a in axes}) != len(axes):
        raise ModelError(f"{where(node)}: repeated axes {axes}")
    slices = [[0, d, 1] for d in x]
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = norm_axis(node, axis, len(x))
        d = x[axis]
        if step == 0:
            raise ModelError(f"{where(node)}: slice step 0")
        start = start + d if start < 0 else start
        end = end + d if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), d), min(max(end, 0), d)
        else:
            start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
        slices[axis] = [start, end, step]
    node.attrs["_slices"] = slices
    out = tuple(len(range(*s)) for s in slices)
    return [(out, dtype_of(node, 0))]


def slice_index(slices) -> tuple[slice, ...]:
    return tuple(slice(a, None if (b < 0 and c < 0) else b, c) for a, b, c in slices)


op("Slice", _slice_infer)(lambda attrs, x, *rest: x[slice_index(attrs["_slices"])])


def _gather_infer(node: Node, data_of: DataOf):
    x, idx = shape_of(node, 0), shape_of(node, 1)
    axis = norm_axis(node, node.attr("axis", 0), len(x))
    node.attrs["axis"] = axis
    return [(x[:axis] + idx + x[axis + 1:], dtype_of(node, 0))]


op("Gather", _gather_infer)(lambda attrs, x, i: np.take(x, i.astype(np.int64), axis=attrs["axis"]))


def _pad_infer(node: Node, data_of: DataOf):
    x = shape_of(node, 0)
    pads = _ints(required_data(node, 1, data_of, "pads"))
    axes = optional_data(node, 3, data_of)
    axes = [norm_axis(node, a, len(x)) for a in _ints(axes)] if axes is not None \
        else list(range(len(x)))
    if len(pads) != 2 * len(axes):
        raise ModelError(f"{where(node)}: {len(pads)} pads for {len(axes)} axes")
    widths = [[0, 0] for _ in x]
    for i, a in enumerate(axes):
        widths[a] = [pads[i], pads[i + len(axes)]]
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ModelError(f"{where(node)}: unknown pad mode {mode!r}")
    node.attrs["_pad_widths"] = widths
    out = tuple(d + b + e for d, (b, e) in zip(x, widths))
    if any(d < 0 for d in out):
        raise ModelError(f"{where(node)}: negative output size")
    return [(out, dtype_of(node, 0))]


@op("Pad", _pad_infer)
def pad(attrs, x, pads=None, value=None, axes=None):
    widths = attrs["_pad_widths"]
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(widths))
    x = x[crop]
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    mode = attrs.get("mode", "constant")
    if mode == "constant":
        fill = 0 if value is None or value.size == 0 else value.reshape(-1)[0]
        return np.pad(x, grow, mode="constant", constant_values=fill)
    return np.pad(x, grow, mode={"edge": "edge", "reflect": "reflect", "wrap": "wrap"}[mode])


# -- StridedView (Woodpecker's own) ------------------------------------------------------------
def view_indices(view: dict) -> np.ndarray:
    """The flat source index of each element of a strided view `{"shape", "offset",
    "strides"}` (in elements, over the source's row-major data), in the view's shape."""
    idx = np.full(view["shape"], view["offset"], np.int64)
    for axis, stride in enumerate(view["strides"]):
        shape = [1] * len(view["shape"])
        shape[axis] = view["shape"][axis]
        idx = idx + np.arange(view["shape"][axis], dtype=np.int64).reshape(shape) * stride
    return idx


def _view_infer(node: Node, data_of: DataOf):
    view = node.attrs["view"]
    size = numel(shape_of(node, 0))
    idx = view_indices(view)
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise ModelError(f"{where(node)}: a strided view past its source's {size} elements")
    return [(tuple(view["shape"]), dtype_of(node, 0))]


@op("StridedView", _view_infer)
def strided_view(attrs, x):
    """The elements of `x`'s row-major data at the view's flat indices (a copy); ONNX has it
    as a Reshape to one dimension and a Gather (frontend/onnx_export.py)."""
    view = attrs["view"]
    flat = np.ascontiguousarray(x).reshape(-1)
    strides = [s * flat.itemsize for s in view["strides"]]
    return np.lib.stride_tricks.as_strided(flat[view["offset"]:], view["shape"], strides,
                                           writeable=False).copy()
