"""Gemm and MatMul (batched, broadcasting, 1-d operands as numpy.matmul)."""

from __future__ import annotations

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node
from woodpecker.ops.registry import DataOf, broadcast, dtype_of, numel, op, shape_of, where


def _gemm_dims(node: Node) -> tuple[int, int, int]:
    a, b = shape_of(node, 0), shape_of(node, 1)
    if len(a) != 2 or len(b) != 2:
        raise ModelError(f"{where(node)}: Gemm needs 2-d operands, got {a} and {b}")
    m, k = a[::-1] if node.attr("transA", 0) else a
    k2, n = b[::-1] if node.attr("transB", 0) else b
    if k != k2:
        raise ModelError(f"{where(node)}: inner dimensions {k} and {k2} differ")
    return m, k, n


def _gemm_infer(node: Node, data_of: DataOf):
    m, _, n = _gemm_dims(node)
    if node.input(2) is not None:
        broadcast(node, shape_of(node, 2), (m, n))
    return [((m, n), dtype_of(node, 0))]


def _gemm_flops(node: Node) -> int:
    m, k, n = _gemm_dims(node)
    return 2 * m * k * n


@op("Gemm", _gemm_infer, _gemm_flops)
def gemm(attrs, a, b, c=None):
    a = a.T if attrs.get("transA", 0) else a
    b = b.T if attrs.get("transB", 0) else b
    y = attrs.get("alpha", 1.0) * (a @ b)
    if c is not None:
        y = y + attrs.get("beta", 1.0) * c
    return y.astype(a.dtype, copy=False)


def matmul_shape(node: Node, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise ModelError(f"{where(node)}: MatMul operands must not be scalars")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ModelError(f"{where(node)}: inner dimensions of {a} and {b} differ")
    out = broadcast(node, a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul_infer(node: Node, data_of: DataOf):
    return [(matmul_shape(node, shape_of(node, 0), shape_of(node, 1)), dtype_of(node, 0))]


def _matmul_flops(node: Node) -> int:
    return 2 * numel(node.outputs[0].shape) * shape_of(node, 0)[-1]


op("MatMul", _matmul_infer, _matmul_flops)(lambda attrs, a, b: np.matmul(a, b))
