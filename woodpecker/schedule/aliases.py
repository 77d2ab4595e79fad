"""Concatenation and reshapes in place: the parts of a Concat are written straight into their
slice of its output in the arena, and the Concat itself does nothing; a reshape's output is its
input's bytes seen in another shape.

SqueezeNet's fire modules end in a channel Concat of two convs; inception and DARTS cells
concatenate branches. Copying the parts cost 0.72 ms of SqueezeNet 1.1's 5.7 ms all-Halide
plan. In-place concatenation is the classic memory-planner rewrite (e.g. TVM's and TFLite's
"concat in place"); the conditions here are ours:

- the Concat runs as its own step (not inside a library region) and reads each part once;
  a part is produced by a node (not a graph input or constant), is not a graph output, nor
  itself a concatenation written in place, nor a part of another Concat. Other readers of a
  part read it in its slice (every engine reads strided arrays; ONNX Runtime copies them for
  its I/O binding), and the whole then lives until the last of them: DARTS' cells and
  SwiftNet's dense blocks concatenate states that later ops of the cell read too;
- the part's slice is contiguous (every axis before the concat axis has size 1: NCHW channel
  concats at batch 1), or the concat axis is the innermost one and the producing engine writes
  through strides (`Engine.writes_strided`): a channel slice of an NHWC value, whose pixels are
  the whole value's channel count apart.

A Reshape, Flatten, Squeeze or Unsqueeze run by numpy as a step of its own is a view of its
input when that input is an arena value of its own (not a part, not a view): ShuffleNet v2's
channel shuffle has two per unit, 32 copies a run. Such an alias has axis `VIEW`.

A Slice along one axis with step 1, run by numpy as a step of its own, is likewise a view of its
input when every reader is a generated kernel reading it through its strides (a conv as its
activation, a fused element-wise group as any input), so an NHWC channel slice (pixels the
whole value's channel count apart) needs no copy. ShuffleNet v2's stride-1 units split their
input in two halves and feed the second to a 1×1 conv: 13 of its 26 slice copies a run. Such
an alias has axis `slice_code(axis)` (below −1).

A Concat whose inputs begin another Concat's inputs (the longest such, same axis) is likewise a
view of the first channels of that one's output, when each of its parts is written in place
there and its readers can read the view (contiguous, or strided by generated kernels as
above). DenseNet's dense layers each concatenate every feature map before them: each feature
map is then written once into its block's last Concat, and every layer's Concat is a prefix
view of it, instead of one copy of all earlier feature maps per layer. Its alias has axis
`slice_code(axis)`, start 0.

The arena keeps an alias out of the placement, starts a whole's lifetime at its first part's
step and ends it no earlier than the last reader of its views and parts (schedule/arena.py); a
plan stores the aliases and `check_arena` validates them on load.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from woodpecker.ir.graph import Graph

Alias = tuple[str, int, int]     # (whole value, concat axis or VIEW, start index along it)
VIEW = -1


def slice_code(axis: int) -> int:
    """The alias axis of a slice view along `axis` (its own inverse)."""
    return -2 - axis


def is_view(axis: int) -> bool:
    """The alias is a view of its input (a reshape or a slice), not a part of a Concat."""
    return axis < 0


def sliced_axis(axis: int) -> int:
    """The axis a Concat part or a slice view (not a reshape view) is cut along."""
    return slice_code(axis) if is_view(axis) else axis


def view_root(aliases: dict[str, Alias], name: str) -> str:
    """The placed value that view `name` (or a view of a view) lies in."""
    seen = set()
    while name in aliases and is_view(aliases[name][1]) and name not in seen:
        seen.add(name)
        name = aliases[name][0]
    return name


def part_index(shape: Sequence[int], axis: int, start: int, size: int) -> tuple[slice, ...]:
    """The index of a part of `size` along `axis` at `start` in an array of `shape`."""
    return tuple(slice(start, start + size) if a == axis else slice(None)
                 for a in range(len(shape)))


def alias_problem(graph: Graph, aliases: dict[str, Alias], offsets: dict[str, int]) -> str | None:
    """Why `aliases` cannot be trusted (a plan file's): an unknown value, a whole without an
    offset, a part that does not fit its whole, or two parts that overlap; None if sound."""
    spans: dict[str, list[tuple[int, int, str]]] = {}
    for name, (whole, axis, start) in aliases.items():
        part, w = graph.values.get(name), graph.values.get(whole)
        if part is None or w is None or view_root(aliases, whole) not in offsets:
            return f"alias {name!r} -> {whole!r} names an unknown or unplaced value"
        ps, ws = tuple(part.shape), tuple(w.shape)
        if axis == VIEW:
            if part.dtype != w.dtype or int(np.prod(ps)) != int(np.prod(ws)) or start:
                return f"alias {name!r} does not fit in {whole!r}"
            continue
        sliced, axis = is_view(axis), sliced_axis(axis)
        if len(ps) != len(ws) or not 0 <= axis < len(ws) or part.dtype != w.dtype or \
                any(a != b for k, (a, b) in enumerate(zip(ps, ws)) if k != axis) or \
                start < 0 or start + ps[axis] > ws[axis]:
            return f"alias {name!r} does not fit in {whole!r}"
        if not sliced:   # slices of one value may overlap; parts of one Concat may not
            spans.setdefault(whole, []).append((start, start + ps[axis], name))
    for parts in spans.values():
        parts.sort()
        for (_, end, a), (begin, _, b) in zip(parts, parts[1:]):
            if begin < end:
                return f"aliases {a!r} and {b!r} overlap"
    return None
