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
from woodpecker.ops import chain, separable
from woodpecker.ops.shape import RESHAPES
from woodpecker.schedule.aliases import VIEW, Alias, slice_code

# Generated kernels reading their activation (input 0) through its strides, and those reading
# every input so (engines/halide/elementwise.py)
STRIDED_READERS = frozenset({"Conv", "FusedConv", separable.OP, chain.OP})
STRIDED_ALL_INPUTS = frozenset({"FusedElementwise"})


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
    concats = [i for i, node in enumerate(graph.nodes)
               if node.op == "Concat" and _views(engines[i]) and step_of[i] == 1
               and not any(v is None or v.is_const for v in node.inputs)]
    hosts = _prefix_hosts(graph, concats)
    # a Concat that begins another's inputs leaves the parts they share to the longer one
    for i in sorted(concats, key=lambda i: i in hosts):
        node = graph.nodes[i]
        axis, whole, start = _axis(node), node.outputs[0], 0
        for v in node.inputs:
            if _in_place(v, node, axis, outputs, aliases, engines[index[id(v.producer)]]
                         if v.producer is not None else None):
                aliases[v.name] = (whole.name, axis, start)
            start += v.shape[axis]
    for i, h in hosts.items():
        node, whole = graph.nodes[i], graph.nodes[h].outputs[0]
        if _prefix_view(node, whole, aliases, outputs, engines, index):
            aliases[node.outputs[0].name] = (whole.name, slice_code(_axis(node)), 0)
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
    if not _strided_readers_only(out, engines, index):
        return None
    axis, (start, _, _) = cut[0]
    return (x.name, slice_code(axis), start)


def _strided_readers_only(v: Value, engines, index) -> bool:
    """Every reader of `v` is a generated kernel reading it once through its strides: a conv
    as its activation, or a 4-d fused element-wise group as any input (one of another rank
    reads its inputs through a reshape, tasks/elementwise.ElementwiseRowsTask)."""
    return all(get_engine(engines[index[id(c)]]).caps.generated and c.inputs.count(v) == 1
               and ((c.op in STRIDED_ALL_INPUTS and len(c.outputs[0].shape) == 4)
                    or (c.op in STRIDED_READERS and c.inputs[0] is v))
               for c in v.consumers)


def _axis(node) -> int:
    return node.attrs["axis"] % len(node.outputs[0].shape)


def _prefix_hosts(graph: Graph, concats: list[int]) -> dict[int, int]:
    """Concat → the longest other Concat (same axis) whose inputs begin with all of its own:
    DenseNet's dense layers each concatenate every feature map before them, so each layer's
    Concat is a prefix of the next one's and of the block's last."""
    hosts: dict[int, int] = {}
    for i in concats:
        ins = graph.nodes[i].inputs
        longer = [j for j in concats if len(graph.nodes[j].inputs) > len(ins)
                  and _axis(graph.nodes[j]) == _axis(graph.nodes[i])
                  and all(a is b for a, b in zip(graph.nodes[j].inputs, ins))]
        if longer:
            hosts[i] = max(longer, key=lambda j: len(graph.nodes[j].inputs))
    return hosts


def _prefix_view(node, whole: Value, aliases, outputs, engines, index) -> bool:
    """Concat `node` can be a view of the start of `whole` (the output of a longer Concat of
    the same first inputs): each of its parts is written in place there, at the same offset,
    and its readers can read the view — a contiguous one (every axis before the concat axis
    of size 1), or, along the innermost axis, only by generated kernels reading it through
    its strides (`_strided_readers_only`)."""
    out, axis, start = node.outputs[0], _axis(node), 0
    if id(out) in outputs or out.name in aliases or not out.consumers:
        return False
    for v in node.inputs:
        if aliases.get(v.name) != (whole.name, axis, start):
            return False
        start += v.shape[axis]
    return int(np.prod(out.shape[:axis])) == 1 or \
        (axis == len(out.shape) - 1 and _strided_readers_only(out, engines, index))


def _in_place(v: Value, concat, axis: int, outputs, aliases, producer_engine) -> bool:
    if producer_engine is None or id(v) in outputs or v.name in aliases \
            or concat.inputs.count(v) != 1 or any(w == v.name for w, _, _ in aliases.values()):
        return False
    contiguous = int(np.prod(v.shape[:axis])) == 1
    return contiguous or (axis == len(v.shape) - 1
                          and get_engine(producer_engine).caps.writes_strided)
