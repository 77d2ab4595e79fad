"""Operator weights, AGO Eq. (1): how much tuning an operator needs, from its loop nest.

Contract: `loop_extents(node)` is the extents of the loops a kernel for `node` runs — one per
output dimension, then the reduction loops (a conv's input channels and window, a matrix
product's inner dimension, a pool's window, the axis a softmax or normalization reduces) —
leaving out extents of 1, which are no loops. `op_weight(node)` is AGO's

    w_v = c × Π_{l ∈ L_v} log(s_l) + b                                          (Eq. 1)

with the natural log, the product over no loop being 0 (an op with nothing to tune weighs b),
and c, b (`config.WEIGHT_SLOPE`, `config.WEIGHT_BIAS`) fitted by least squares to the tuning
effort measured on this machine (benchmarks/partition_weights.py: per task and template of the
15-minute `ga` logs, the measurements until the best came within 5 % of its final best — AGO's
"budget to obtain stable performance"). The weight is thus in measurements. A subgraph weighs
the sum of its operators' weights (AGO's second observation); a `FusedSeparableConv` or a
`FusedConvChain` is its convs, a `FusedAttention` its products and softmax.
"""

from __future__ import annotations

import math

from woodpecker.config import WEIGHT_BIAS, WEIGHT_SLOPE
from woodpecker.ir.graph import Node

CONVS = frozenset({"Conv", "FusedConv"})
PRODUCTS = frozenset({"MatMul", "FusedMatMul", "Gemm", "FusedGemm"})
# operators AGO calls complex: a reduction over a weight tensor, what tuning is mostly for
# several complex ops in one node (ops.registry.PARTS: a conv chain, attention)
COMPOSITE = frozenset({"FusedSeparableConv", "FusedConvChain", "FusedAttention"})
COMPLEX = CONVS | PRODUCTS | COMPOSITE


def _reduction(node: Node) -> tuple[int, ...]:
    op = node.op
    first = node.inputs[0].shape if node.inputs and node.inputs[0] is not None else None
    if op in CONVS:
        return tuple(node.inputs[1].shape[1:])
    if op in ("MatMul", "FusedMatMul"):
        return (first[-1],)
    if op in ("Gemm", "FusedGemm"):
        return (first[0] if node.attr("transA", 0) else first[-1],)
    if op in ("MaxPool", "AveragePool"):
        return tuple(node.attr("kernel_shape", ()))
    if op in ("GlobalAveragePool", "ReduceMean"):
        out = node.outputs[0].shape
        return tuple(d for d, o in zip(first, out) if o == 1 and d > 1) if \
            len(out) == len(first) else tuple(first[len(out):])
    if op in ("Softmax", "LayerNormalization", "RMSNormalization"):
        axis = node.attr("axis", -1) % len(first)
        return (first[axis],) if op == "Softmax" else tuple(first[axis:])
    return ()


def loop_extents(node: Node) -> tuple[int, ...]:
    """The extents (> 1) of the loops of `node`'s kernel: output dimensions, then reductions."""
    if node.op in COMPOSITE:
        raise ValueError(f"a {node.op} is several loop nests: weigh its parts")
    out = node.outputs[0].shape or ()
    return tuple(int(s) for s in (*out, *_reduction(node)) if s and s > 1)


def complexity(node: Node) -> float:
    """Π log(s_l) over the loops of `node` (0 without loops)."""
    extents = loop_extents(node)
    return math.prod(math.log(s) for s in extents) if extents else 0.0


def op_weight(node: Node, slope: float = WEIGHT_SLOPE, bias: float = WEIGHT_BIAS) -> float:
    """Eq. (1) for one graph node, in measurements; a composite node weighs its parts."""
    if node.op in COMPOSITE:
        return sum(op_weight(p, slope, bias) for p in composite_parts(node))
    return slope * complexity(node) + bias


def composite_parts(node: Node) -> list[Node]:
    """The nodes a composite node stands for."""
    import woodpecker.ops  # noqa: F401 - registers the composite ops
    from woodpecker.ops.registry import PARTS

    return list(PARTS[node.op](node))


def is_complex(node: Node) -> bool:
    return node.op in COMPLEX
