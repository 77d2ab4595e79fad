"""The rows task: Softmax, LayerNormalization and RMSNormalization over the last axis (or the
norms' trailing axes), as `rows` independent rows of `width` values in the node's own row-major
layout."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.norm import layernorm, rmsnorm, softmax
from woodpecker.tasks import Task


@dataclass(frozen=True)
class RowTask(Task):
    """`op`: "softmax" (out = exp(x − max) / Σ exp(x − max)), "layernorm" (out = (x − mean)
    / sqrt(var + epsilon) · scale + bias, with the scale and optional bias per column) or
    "rmsnorm" (out = x / sqrt(mean(x²) + epsilon) · scale)."""

    kind = "rows"
    layout = ""
    ops = frozenset({"Softmax", "LayerNormalization", "RMSNormalization"})

    rows: int
    width: int
    op: str
    epsilon: float
    has_bias: bool
    dtype: str = "float32"

    @property
    def flops(self) -> int:
        """As ops/norm counts them: 5 per value for softmax, 8 for layernorm, 4 for rmsnorm."""
        return {"softmax": 5, "layernorm": 8, "rmsnorm": 4}[self.op] * self.rows * self.width

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.rows, self.width)

    @classmethod
    def from_node(cls, node: Node) -> "RowTask":
        x = node.inputs[0]
        rank = len(x.shape)
        axis = node.attrs.get("axis", -1) % rank if rank else 0
        if rank < 1 or any(o is not None for o in node.outputs[1:]):
            raise ValueError(f"{node.name!r}: mean and inverse std-dev outputs")
        if node.op == "Softmax":
            if axis != rank - 1:
                raise ValueError(f"{node.name!r}: softmax over a leading axis")
            return cls(math.prod(x.shape[:-1]), x.shape[-1], "softmax", 0.0, False,
                       x.dtype.name)
        width = math.prod(x.shape[axis:])
        if any(v is not None and math.prod(v.shape) != width for v in node.inputs[1:]):
            raise ValueError(f"{node.name!r}: scale or bias broadcast over the normalised axes")
        op = "rmsnorm" if node.op == "RMSNormalization" else "layernorm"
        return cls(math.prod(x.shape[:axis]), width, op,
                   float(node.attrs.get("epsilon", 1e-5)), node.input(2) is not None,
                   x.dtype.name)

    def describe(self) -> str:
        return f"{self.op} {self.rows}x{self.width}"

    def arg_shapes(self) -> list[tuple[int, ...]]:
        """x, then (the norms) the scale and bias if any, then the output."""
        extra = [] if self.op == "softmax" else [(self.width,)] * (1 + self.has_bias)
        return [self.out_shape, *extra, self.out_shape]

    def constant(self, node: Node, i: int) -> np.ndarray:
        return np.ascontiguousarray(node.inputs[i].data).reshape(self.arg_shapes()[i])

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(s).astype(np.float32) for s in self.arg_shapes()[:-1]]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        if self.op == "softmax":
            return softmax({"axis": -1}, inputs[0])
        if self.op == "rmsnorm":
            return rmsnorm({"axis": -1, "epsilon": self.epsilon}, *inputs)
        return layernorm({"axis": -1, "epsilon": self.epsilon}, *inputs)[0]
