"""The dense task: Gemm and MatMul (2-d or batched) with a fused epilogue, as a batch of
(M×K)·(K×N) products in the node's own row-major layout (no conversions needed)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.fused import apply_epilogue
from woodpecker.tasks import COMPUTE, Task, epilogue_dicts, epilogue_steps, rounded, steps_text

GEMM = ("Gemm", "FusedGemm")


@dataclass(frozen=True)
class DenseTask(Task):
    """out[b] = act(A[b]·B[b] + bias + residuals), A (batch, M, K), out (batch, M, N).

    `weights`: B is one constant (K, N) matrix (a layer's weights, transposed once when the
    node stores it as (N, K)), which templates may pack; otherwise B is (batch, K, N), read as
    it arrives (attention's batched products). `bias` (Gemm's C) and each residual of the
    epilogue's Add steps are "row" (one value per output column, broadcast over rows) or
    "full" (the output's shape); "" is no bias. `compute`: the type the products are taken
    in — "float32", or "bfloat16" for a node a `--precision bf16` compile lowered
    (passes/precision.py: A and B rounded to bf16, their products summed in float32)."""

    kind = "dense"
    layout = ""
    ops = frozenset({*GEMM, "MatMul", "FusedMatMul"})

    batch: int
    m: int
    k: int
    n: int
    weights: bool
    bias: str
    residuals: tuple[str, ...]
    epilogue: tuple[tuple, ...]
    dtype: str = "float32"
    compute: str = "float32"

    LATER_FIELDS = ("compute",)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.batch, self.m, self.n)

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.k * self.n

    @classmethod
    def from_node(cls, node: Node) -> "DenseTask":
        a, b = node.inputs[0], node.inputs[1]
        out = tuple(node.outputs[0].shape)
        if len(a.shape) < 2 or len(b.shape) < 2:
            raise ValueError(f"{node.name!r}: a 1-d operand")
        if node.op in GEMM:
            at = node.attrs
            if at.get("transA", 0) or at.get("alpha", 1.0) != 1.0 or at.get("beta", 1.0) != 1.0:
                raise ValueError(f"{node.name!r}: transA, alpha or beta")
            if at.get("transB", 0) and b.data is None:
                raise ValueError(f"{node.name!r}: a run-time transposed B")
            first = 3
        else:
            first = 2
        if len(b.shape) == 2:
            batch, (m, k) = 1, (math.prod(a.shape[:-1]), a.shape[-1])
        elif tuple(a.shape[:-2]) == tuple(b.shape[:-2]):
            batch, m, k = math.prod(a.shape[:-2]), a.shape[-2], a.shape[-1]
        else:
            raise ValueError(f"{node.name!r}: broadcast batch dimensions")
        n = out[-1]
        c = node.input(2) if node.op in GEMM else None
        bias = "" if c is None else _addend(node, c.shape, out)
        residuals = tuple(_addend(node, v.shape, out) for v in node.inputs[first:]
                          if v is not None)
        return cls(batch, m, k, n, b.data is not None and len(b.shape) == 2, bias, residuals,
                   epilogue_steps(node), a.dtype.name, node.attrs.get(COMPUTE, "float32"))

    def schedule_twin(self) -> "DenseTask":
        return replace(self, bias="", residuals=(), epilogue=())

    def describe(self) -> str:
        lead = f"{self.batch}x" if self.batch > 1 else ""
        kind = "dense" if self.weights else "matmul"
        return f"{kind} {lead}{self.m}x{self.k} . {self.k}x{self.n}" + steps_text(self.epilogue)

    def arg_shapes(self) -> list[tuple[int, ...]]:
        """Each kernel argument's shape (then the output's), as the kernel indexes it."""
        full, row = (self.batch, self.m, self.n), (self.n,)
        shapes = [(self.batch, self.m, self.k),
                  (self.k, self.n) if self.weights else (self.batch, self.k, self.n)]
        if self.bias:
            shapes.append(row if self.bias == "row" else full)
        return shapes + [row if r == "row" else full for r in self.residuals] + [full]

    def constant(self, node: Node, i: int) -> np.ndarray:
        """Node input `i`'s constant in the kernel's layout: (N, K) weights (transB) as (K, N),
        every other constant reshaped to its argument's shape."""
        a = node.inputs[i].data
        if i == 1 and node.op in GEMM and node.attrs.get("transB", 0):
            a = a.T
        slot = sum(1 for v in node.inputs[:i] if v is not None)
        return np.ascontiguousarray(a).reshape(self.arg_shapes()[slot])

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(s).astype(np.float32) for s in self.arg_shapes()[:-1]]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        a, b = (rounded(v, self.compute).astype(np.float64) for v in inputs[:2])
        y = a @ b
        rest = inputs[2:]
        if self.bias:
            y, rest = y + rest[0], rest[1:]
        return apply_epilogue(y, epilogue_dicts(self.epilogue), list(rest)).astype(np.float32)


def _addend(node: Node, shape, out: tuple[int, ...]) -> str:
    """How an added operand of `shape` lies over output `out`: "full" or "row"."""
    if math.prod(shape) == math.prod(out) and np.broadcast_shapes(tuple(shape), out) == out:
        return "full"
    if shape and shape[-1] == out[-1] and math.prod(shape) == out[-1]:
        return "row"
    raise ValueError(f"{node.name!r}: an added operand of shape {tuple(shape)} broadcasts "
                     f"other than by rows")
