"""Which values are written in place (schedule/aliases.py describes the aliases and why): the
parts of a Concat into its output, reshapes and slices as views of their input. The decision
needs the engine of each node (who writes through strides, which kernels read strided
inputs), so it is made here, at assembly, not in the engine-free schedule package.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from woodpecker.engines.registry import get_engine
from woodpecker.ir.graph import Graph, Value
from woodpecker.ops import separable
from woodpecker.ops.shape import RESHAPES
from woodpecker.schedule.aliases import VIEW, Alias, slice_code

# Halide kernels reading x through strides
STRIDED_READERS = frozenset({"Conv", "FusedConv", separable.OP})


def _views(engine: str) -> bool:
    """The engine runs data movement as views (a Concat written in place does nothing)."""
    return get_engine(engine).caps.views


def concat_aliases(graph: Graph, engines: Sequence[str],
                   steps: Sequence[Sequence[int]]) -> dict[str, Alias]:
    """Part value name → where it lives in its Concat's output, for every part that can
    (`engines`: each node's engine, in graph order)."""
    step_of = {i: len(s) for s in steps for i in s}
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    outputs = {id(v) for v in graph.outputs}
    aliases: dict[str, Alias] = {}
    for i, node in enumerate(graph.nodes):
        if node.op != "Concat" or not _views(engines[i]) or step_of[i] != 1 or \
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
        if x is None or not _views(engines[i]) or step_of[i] != 1 or x.is_const or \
                x.producer is None or x.name in aliases or node.outputs[0].name in aliases:
            continue
        aliases[node.outputs[0].name] = (x.name, VIEW, 0)
    for i, node in enumerate(graph.nodes):
        view = _slice_view(node, aliases, outputs, engines, index) \
            if node.op == "Slice" and _views(engines[i]) and step_of[i] == 1 else None
        if view is not None:
            aliases[node.outputs[0].name] = view
    return aliases


def _slice_view(node, aliases, outputs, engines, index) -> Alias | None:
    x, out = node.inputs[0], node.outputs[0]
    if x.is_const or x.producer is None or aliases.get(x.name, ("", VIEW))[1] != VIEW \
            or out.name in aliases or id(out) in outputs or not out.consumers:
        return None   # x: a placed value or a reshape view of one (ShuffleNet's shuffle)
    cut = [(a, s) for a, s in enumerate(node.attrs["_slices"]) if list(s) != [0, x.shape[a], 1]]
    if len(cut) != 1 or cut[0][1][2] != 1:
        return None
    if any(c.op not in STRIDED_READERS or not get_engine(engines[index[id(c)]]).caps.generated
           or c.inputs[0] is not out or c.inputs.count(out) != 1 for c in out.consumers):
        return None
    axis, (start, _, _) = cut[0]
    return (x.name, slice_code(axis), start)


def _in_place(v: Value, concat, axis: int, outputs, aliases, producer_engine) -> bool:
    if producer_engine is None or id(v) in outputs or v.name in aliases \
            or concat.inputs.count(v) != 1 or any(w == v.name for w, _, _ in aliases.values()):
        return False
    contiguous = int(np.prod(v.shape[:axis])) == 1
    return contiguous or (axis == len(v.shape) - 1
                          and get_engine(producer_engine).caps.writes_strided)
