"""Concatenation and reshapes in place: the parts of a Concat are written straight into their
slice of its output in the arena, and the Concat itself does nothing; a reshape's output is its
input's bytes seen in another shape.

SqueezeNet's fire modules end in a channel Concat of two convs; inception and DARTS cells
concatenate branches. Copying the parts cost 0.72 ms of SqueezeNet 1.1's 5.7 ms all-Halide
plan. In-place concatenation is the classic memory-planner rewrite (e.g. TVM's and TFLite's
"concat in place"); the conditions here are ours:

- the Concat runs as its own step (not inside a library region) and each part is read by it
  alone, once, is produced by a node (not a graph input or constant) and is not a graph
  output, nor itself a concatenation written in place;
- the part's slice is contiguous (every axis before the concat axis has size 1: NCHW channel
  concats at batch 1), or the concat axis is the innermost one and the producing engine writes
  through strides (`Engine.writes_strided`): a channel slice of an NHWC value, whose pixels are
  the whole value's channel count apart.

A Reshape, Flatten, Squeeze or Unsqueeze run by numpy as a step of its own is a view of its
input when that input is an arena value of its own (not a part, not a view): ShuffleNet v2's
channel shuffle has two per unit, 32 copies a run. Such an alias has axis `VIEW`.

The arena keeps an alias out of the placement, starts a whole's lifetime at its first part's
step and ends a viewed value's at its views' last reader (schedule/arena.py); a plan stores the
aliases and `check_arena` validates them on load.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from woodpecker.engines.registry import get_engine
from woodpecker.ir.graph import Graph, Value

Alias = tuple[str, int, int]     # (whole value, concat axis or VIEW, start index along it)
VIEW = -1
RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


def concat_aliases(graph: Graph, engines: Sequence[str],
                   steps: Sequence[Sequence[int]]) -> dict[str, Alias]:
    """Part value name → where it lives in its Concat's output, for every part that can."""
    step_of = {i: len(s) for s in steps for i in s}
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    outputs = {id(v) for v in graph.outputs}
    aliases: dict[str, Alias] = {}
    for i, node in enumerate(graph.nodes):
        if node.op != "Concat" or engines[i] != "numpy" or step_of[i] != 1 or \
                any(v is None or v.is_const for v in node.inputs):
            continue
        axis, whole, start = node.attrs["axis"], node.outputs[0], 0
        for v in node.inputs:
            if _in_place(v, node, axis, outputs, aliases, engines[index[id(v.producer)]]
                         if v.producer is not None else None):
                aliases[v.name] = (whole.name, axis, start)
            start += v.shape[axis]
    for i, node in enumerate(graph.nodes):
        x = node.inputs[0] if node.op in RESHAPES and node.inputs else None
        if x is None or engines[i] != "numpy" or step_of[i] != 1 or x.is_const or \
                x.producer is None or x.name in aliases or node.outputs[0].name in aliases:
            continue
        aliases[node.outputs[0].name] = (x.name, VIEW, 0)
    return aliases


def _in_place(v: Value, concat, axis: int, outputs, aliases, producer_engine) -> bool:
    if producer_engine is None or id(v) in outputs or v.consumers != [concat] \
            or concat.inputs.count(v) != 1 or any(w == v.name for w, _, _ in aliases.values()):
        return False
    contiguous = int(np.prod(v.shape[:axis])) == 1
    return contiguous or (axis == len(v.shape) - 1
                          and get_engine(producer_engine).writes_strided)


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
        if part is None or w is None or whole not in offsets:
            return f"alias {name!r} -> {whole!r} names an unknown or unplaced value"
        ps, ws = tuple(part.shape), tuple(w.shape)
        if axis == VIEW:
            if part.dtype != w.dtype or int(np.prod(ps)) != int(np.prod(ws)) or start:
                return f"alias {name!r} does not fit in {whole!r}"
            continue
        if len(ps) != len(ws) or not 0 <= axis < len(ws) or part.dtype != w.dtype or \
                any(a != b for k, (a, b) in enumerate(zip(ps, ws)) if k != axis) or \
                start < 0 or start + ps[axis] > ws[axis]:
            return f"alias {name!r} does not fit in {whole!r}"
        spans.setdefault(whole, []).append((start, start + ps[axis], name))
    for parts in spans.values():
        parts.sort()
        for (_, end, a), (begin, _, b) in zip(parts, parts[1:]):
            if begin < end:
                return f"aliases {a!r} and {b!r} overlap"
    return None
