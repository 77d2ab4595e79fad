"""Intensive fusion of attention (AGO §III): a MatMul of Q and Kᵀ whose scores (after the
scale and mask its epilogue holds) go only to a Softmax over the last axis, whose result goes
only to a MatMul with V, becomes one FusedAttention node (ops/attention.py), computed by one
generated kernel (engines/halide/attention.py) a block of query rows at a time.

Conditions: the three ops (and the Transposes below) weigh less than AGO's threshold together
(partition/weights.py, `config.PARTITION_THRESHOLD`: what one subgraph may weigh, so the task
can be tuned to stability in one task's budget); Q, Kᵀ and V of rank ≥ 2 with the
same leading dimensions; the first product's epilogue only `Mul` by a scale and `Add`s (the
mask); the second product without epilogue; neither the scores nor the probabilities read by
anything else or a graph output. Taken in too: a Transpose of the result that moves the query
rows first (ops.attention.rows_first), the result read by nothing else.

Views (ops/attention.py): Q, K and V are each read through a strided view of a source. The
pass walks back from each through data movement (reshapes, transposes, squeezes, gathers and
slices with constant indices) as far as the composed element map stays affine — computed
exactly, by running each op's reference on the flat indices of its input — so a transformer's
head split (the packed projection reshaped, transposed, gathered into Q, K and V, Kᵀ made by
one more Transpose) becomes three views of the projection's output, and those copies are gone
from the plan once nothing else reads them.

Choice: unlike conv chains, the three need not fall into one subgraph of Algorithm 1's
partition. Its greedy order (heaviest candidate first, lightest affix node) split them on the
transformer encoder — the softmax went with the next Gemm and LayerNorm, the scores' MatMul with
the head-splitting reshapes — though together they weigh 81, well under the threshold. The
partition is there to keep each subgraph acyclic and within the threshold; this pattern is
acyclic by itself (each op's result is read only by the next, so no path leaves it and comes
back: Theorem 1's guarantee, trivially), so the threshold is the only condition left.

Not in the default pipeline (passes.AGO adds it), like the conv chains.
"""

from __future__ import annotations

import numpy as np

from woodpecker.config import PARTITION_THRESHOLD
from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ops.attention import OP, contiguous_view, rows_first, swap_last
from woodpecker.ops.registry import run_reference
from woodpecker.ops.shape import view_indices
from woodpecker.partition.weights import op_weight

_PRODUCTS = ("MatMul", "FusedMatMul")
# data movement a view can stand for (what each does is checked, not assumed: see _fold)
_VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Gather",
                       "Slice", "Identity"})


def _only_reader(graph: Graph, v: Value, op: str) -> Node | None:
    """The one node reading `v` if it is an `op` and `v` is no graph output."""
    if graph.is_output(v) or len(v.consumers) != 1 or v.consumers[0].op != op:
        return None
    return v.consumers[0]


def _is_softmax(node: Node) -> bool:
    rank = len(node.inputs[0].shape)
    return node.attrs.get("axis", -1) % rank == rank - 1


def _match(graph: Graph, first: Node) -> list[Node] | None:
    """[first product, softmax, second product] starting at `first`, or None."""
    if len(first.inputs) < 2 or any(s["op"] not in ("Mul", "Add")
                                    for s in first.attrs.get("epilogue", [])):
        return None
    soft = _only_reader(graph, first.outputs[0], "Softmax")
    if soft is None or not _is_softmax(soft):
        return None
    probs = soft.outputs[0]
    if graph.is_output(probs) or len(probs.consumers) != 1:
        return None
    second = probs.consumers[0]
    if second.op not in _PRODUCTS or second.attrs.get("epilogue") or len(second.inputs) != 2 \
            or second.inputs[0] is not probs or second.inputs[1] is probs:
        return None
    q, kt, v = first.inputs[0], first.inputs[1], second.inputs[1]
    shapes = [q.shape, kt.shape, v.shape]
    if any(s is None or len(s) < 2 for s in shapes) or \
            not tuple(q.shape[:-2]) == tuple(kt.shape[:-2]) == tuple(v.shape[:-2]):
        return None
    return [first, soft, second]


def _affine(idx: np.ndarray) -> dict | None:
    """The strided view whose flat indices are `idx`, if there is one."""
    view = {"shape": list(idx.shape), "offset": int(idx.flat[0]),
            "strides": [int(np.take(idx, [1], axis=a).flat[0] - idx.flat[0])
                        if idx.shape[a] > 1 else 0 for a in range(idx.ndim)]}
    return view if np.array_equal(view_indices(view), idx) else None


def _fold(v: Value, view: dict) -> tuple[Value, dict]:
    """(source, view): walked back from `v` (read through `view`) through data movement while
    the composed view stays strided."""
    idx = view_indices(view)
    while v.producer is not None and v.producer.op in _VIEW_OPS:
        p = v.producer
        x = p.inputs[0]
        if x is None or x.shape is None or any(
                w is not None and w.data is None for w in p.inputs[1:]):
            break
        flat = np.arange(int(np.prod(x.shape)), dtype=np.int64).reshape(x.shape)
        try:
            mapped = run_reference(p, [flat, *(None if w is None else w.data
                                               for w in p.inputs[1:])])[0]
        except Exception:  # noqa: BLE001 - an op variant the index trick does not cover
            break
        if mapped.shape != tuple(v.shape) or mapped.dtype != np.int64:
            break
        folded = _affine(mapped.reshape(-1)[idx])
        if folded is None:
            break
        v, view, idx = x, folded, view_indices(folded)
    return v, view


def _out_transpose(graph: Graph, y: Value) -> Node | None:
    t = _only_reader(graph, y, "Transpose")
    if t is None or list(t.attrs.get("perm", [])) != rows_first(len(y.shape)):
        return None
    return t


def fuse_attention(graph: Graph) -> int:
    fused = 0
    for first in list(graph.nodes):
        if first not in graph.nodes or first.op not in _PRODUCTS:
            continue
        nodes = _match(graph, first)
        if nodes is None:
            continue
        _, _, second = nodes
        out_t = _out_transpose(graph, second.outputs[0])
        removed = nodes + ([out_t] if out_t is not None else [])
        if sum(op_weight(n) for n in removed) >= PARTITION_THRESHOLD:
            continue
        q, kt, *masks = first.inputs
        v = second.inputs[1]
        rank = len(q.shape)
        sources, views = [], []
        for x, perm in ((q, None), (kt, swap_last(rank)), (v, None)):
            src, view = _fold(x, contiguous_view(tuple(x.shape), perm))
            sources.append(src)
            views.append(view)
        attrs = {"scores": [dict(s) for s in first.attrs.get("epilogue", [])],
                 "views": views,
                 "out_perm": None if out_t is None else list(out_t.attrs["perm"])}
        last = out_t or second
        out = last.outputs[0]
        at = graph.nodes.index(last)     # where the node goes once the others are out
        index = at - sum(1 for n in removed if n is not last and graph.nodes.index(n) < at)
        for n in removed:
            graph.remove_node(n)
        graph.add_node(OP, [*sources, *masks], [out], attrs, second.name, index)
        fused += 1
    if fused:
        graph.dce()
    return fused
