"""Data-movement ops on values held in a permuted layout, for the layout pass.

A value `v` may be held physically as `v.transpose(perm)` (NHWC: perm [0, 2, 3, 1]). Concat,
Split, Slice, Transpose, Reshape and Flatten can run on that physical array directly: only the
axes they name change. So NHWC flows from one Halide kernel through SqueezeNet's fire-module
concats and ShuffleNet's channel shuffle and split into the next, where each such node used to
cost a conversion back to NCHW and one forward again (measured on SqueezeNet 1.1's all-Halide
plan: 26 transposes, 2.9 of its 9.8 ms). The ops and the rules are ours; the thesis (ch. 5)
has engines declare the layouts they take, which is what this widens.

`moved_op` says how a node runs on inputs held in `perm` and which layout each output then has
(None when it cannot: e.g. a Flatten of NHWC with a spatial extent, whose elements must be
reordered).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.tasks import NHWC_PERM

FOLLOWERS = frozenset({"Concat", "Split", "Slice", "Transpose", "Reshape", "Flatten"})


@dataclass
class MovedOp:
    """A node's form on permuted inputs: its op, attributes, replaced constant inputs
    (position → array) and each output's permutation."""

    op: str
    attrs: dict
    constants: dict[int, np.ndarray]
    out_perms: list[tuple[int, ...]]


def moved_op(node: Node, perm: tuple[int, ...]) -> MovedOp | None:
    """`node` run on its runtime inputs held as `x.transpose(perm)`, or None."""
    rank = len(perm)
    attrs = dict(node.attrs)
    if node.op == "Concat":
        if any(v is None or v.is_const for v in node.inputs):
            return None
        attrs["axis"] = perm.index(attrs["axis"])
        return MovedOp("Concat", attrs, {}, [perm])
    if node.op == "Split":
        attrs["axis"] = perm.index(attrs["axis"])
        return MovedOp("Split", attrs, {}, [perm] * len(node.outputs))
    if node.op == "Slice":
        attrs["_slices"] = [attrs["_slices"][a] for a in perm]
        starts = node.inputs[1].data
        axes = node.input(3)
        axes = range(len(starts)) if axes is None else [int(a) % rank for a in axes.data]
        return MovedOp("Slice", attrs, {3: np.array([perm.index(a) for a in axes], np.int64)},
                       [perm])
    if node.op == "Transpose":
        # Keep the output in the input's permutation: the physical transpose is then the
        # logical one conjugated by `perm` (the identity when it only moves size-1 axes).
        t = attrs["perm"]
        attrs["perm"] = [perm.index(t[perm[k]]) for k in range(rank)]
        return MovedOp("Transpose", attrs, {}, [perm])
    if node.op in ("Reshape", "Flatten"):
        src, dst = node.inputs[0].shape, node.outputs[0].shape
        out = reshape_perm(src, dst, perm)
        if out is None:
            return None
        shape = [dst[a] for a in out]
        attrs = {"_shape": shape}
        return MovedOp("Reshape", attrs, {1: np.array(shape, np.int64)}, [out])
    return None


def reshape_perm(src, dst, perm) -> tuple[int, ...] | None:
    """The permutation in which reshaping `x` (logical shape `src`, held as x.transpose(perm))
    gives `x.reshape(dst)`, by a plain reshape of the held array; None if none does.

    Size-1 axes are free to move. The other axes form groups that a reshape merges or splits
    (e.g. (116,) ↔ (2, 58)); each group's input axes must be held next to each other and in
    order, and the output keeps the groups in their held order."""
    a = [i for i, d in enumerate(src) if d != 1]
    b = [j for j, d in enumerate(dst) if d != 1]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a):
        gi, gj = [a[i]], [b[j]]
        pi, pj = src[a[i]], dst[b[j]]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                gi.append(a[i])
                pi *= src[a[i]]
                i += 1
            else:
                gj.append(b[j])
                pj *= dst[b[j]]
                j += 1
        groups.append((gi, gj))
    held = [x for x in perm if src[x] != 1]
    pos = {x: k for k, x in enumerate(held)}
    for gi, _ in groups:
        if [pos[x] for x in gi] != list(range(pos[gi[0]], pos[gi[0]] + len(gi))):
            return None
    order = [x for _, gj in sorted(groups, key=lambda g: pos[g[0][0]]) for x in gj]
    ones = [j for j, d in enumerate(dst) if d == 1]
    preferred = [NHWC_PERM] if len(dst) == 4 else []
    for cand in preferred + [tuple(range(len(dst)))]:
        if [x for x in cand if dst[x] != 1] == order:
            return tuple(cand)
    return tuple(ones + order)
