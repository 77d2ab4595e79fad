"""FusedAttention: scaled dot-product attention, softmax(Q·Kᵀ · scale + mask)·V, as one node —
AGO's intensive fusion of complex operators (AGO §III) applied to a transformer's
MatMul→Softmax→MatMul (passes/fuse_attention.py makes it), so that a generated kernel
(engines/halide/attention.py) computes a block of query rows' scores, their softmax and their
product with V in cache, never writing the (M × N) score matrix to memory.

Inputs: the sources of Q, K and V, then one operand per `Add` step of `attrs["scores"]`.
`attrs["views"]` holds, for Q, K and V in turn, where its elements lie in its source: a
strided view `{"shape", "offset", "strides"}` (in elements) of the source's flat, row-major
data, of logical shape Q (…, M, D), K (…, N, D), V (…, N, Dv), the leading (batch, head)
dimensions the same for all three. The pass folds the reshapes, transposes and gathers that
split a packed Q/K/V projection into heads into these views, so the kernel reads the
projection where it lies. `attrs["scores"]` is the first product's epilogue (ops/fused.py
steps: `Mul` by a constant scale, `Add` of a mask broadcast over the scores), applied before
the softmax over the last axis. `attrs["out_perm"]`, when not None, is a Transpose of the
result (…, M, Dv) that the node also does; it moves M first and keeps Dv last (the heads
gathered back per token). Library engines, the ONNX export and selection's unfused alternative
run the node as its `parts`: a StridedView each (ops/shape.py), the products, the softmax, the
Transpose.
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Node, Value
from woodpecker.ops.fused import apply_epilogue
from woodpecker.ops.norm import softmax
from woodpecker.ops.registry import OPS, DataOf, composite, op
from woodpecker.ops.shape import strided_view

OP = "FusedAttention"


def swap_last(rank: int) -> list[int]:
    """The permutation that swaps the last two axes."""
    return list(range(rank - 2)) + [rank - 1, rank - 2]


def rows_first(rank: int) -> list[int]:
    """The only output permutation the node does: (…, M, Dv) → (M, …, Dv)."""
    return [rank - 2] + list(range(rank - 2)) + [rank - 1]


def permuted(view: dict, perm: list[int]) -> dict:
    """`view` with its axes taken in `perm`'s order."""
    return {"shape": [view["shape"][p] for p in perm], "offset": view["offset"],
            "strides": [view["strides"][p] for p in perm]}


def contiguous_view(shape: tuple[int, ...], perm: list[int] | None = None) -> dict:
    """The view of a whole row-major array of `shape`, its axes taken in `perm`'s order."""
    strides = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
    whole = {"shape": [int(d) for d in shape], "offset": 0, "strides": strides}
    return whole if perm is None else permuted(whole, perm)


def _context_shape(node: Node) -> tuple[int, ...]:
    q, v = node.attrs["views"][0]["shape"], node.attrs["views"][2]["shape"]
    return tuple(q[:-1]) + (v[-1],)


def parts(node: Node) -> list[Node]:
    """The nodes `node` stands for: a StridedView (ops/shape.py) each of Q, Kᵀ and V, the
    scores' FusedMatMul (with their scale and mask), Softmax, MatMul, and the output's
    Transpose if any; the values between them are named after `node`."""
    q_src, k_src, v_src, *masks = node.inputs
    y = node.outputs[0]
    a = node.attrs
    out: list[Node] = []

    def add(op_name: str, suffix: str, ins: list, shape, attrs: dict) -> Value:
        dst = y if shape is None else Value(f"{node.name}/{suffix}", tuple(shape), y.dtype)
        part = Node(op_name, f"{node.name}/{suffix}", ins, [dst], attrs)
        if dst is not y:
            dst.producer = part
        out.append(part)
        return dst

    qv, kv, vv = a["views"]
    q = add("StridedView", "q", [q_src], qv["shape"], {"view": qv})
    kt_view = permuted(kv, swap_last(len(kv["shape"])))
    kt = add("StridedView", "kt", [k_src], kt_view["shape"], {"view": kt_view})
    v = add("StridedView", "v", [v_src], vv["shape"], {"view": vv})
    scores_shape = tuple(qv["shape"][:-1]) + (kv["shape"][-2],)
    scores = add("FusedMatMul", "qk", [q, kt, *masks], scores_shape,
                 {"epilogue": [dict(s) for s in a["scores"]]})
    probs = add("Softmax", "softmax", [scores], scores_shape, {"axis": -1})
    if a.get("out_perm") is None:
        add("MatMul", "pv", [probs, v], None, {})
    else:
        ctx = add("MatMul", "pv", [probs, v], _context_shape(node), {})
        add("Transpose", "out_t", [ctx], None, {"perm": list(a["out_perm"])})
    return out


def _infer(node: Node, data_of: DataOf):
    shape = _context_shape(node)
    perm = node.attrs.get("out_perm")
    if perm is not None:
        shape = tuple(shape[p] for p in perm)
    return [(shape, node.inputs[0].dtype)]


def _flops(node: Node) -> int:
    return sum(OPS[p.op].flops(p) for p in parts(node))


@op(OP, _infer, _flops)
def attention(attrs, q_src, k_src, v_src, *masks):
    q, k, v = (strided_view({"view": view}, src)
               for src, view in zip((q_src, k_src, v_src), attrs["views"]))
    scores = np.matmul(q, np.swapaxes(k, -1, -2))
    scores = apply_epilogue(scores, attrs["scores"], list(masks)).astype(q.dtype)
    y = np.matmul(softmax({"axis": -1}, scores), v)
    perm = attrs.get("out_perm")
    return y if perm is None else np.ascontiguousarray(np.transpose(y, perm))


composite(OP, parts)
