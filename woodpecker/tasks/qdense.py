"""The qdense task: a dynamically quantized MatMul (ops/quant_matmul.py's DynamicQuantizeMatMul)
— float32 activations quantized to uint8 per call, an int8 weight matrix, float32 out.

Contract: for x (M, K) float32 (the node's leading dimensions flattened into M rows), int8
weights w (K, N) with zero point 0, per-column float32 scales σ and bias β, the kernel computes

    (q, s, z) = DynamicQuantizeLinear(x)                 (ONNX Runtime's formula, exact)
    acc[m, n] = Σ_k q[m, k] · w[k, n] − z · Σ_k w[k, n]  (int32: u8 × s8 products)
    y[m, n]   = float32(acc) · (s · σ[n]) + β[n]

— the node's reference: the quantization is exact (`strict_float`, division by the scale, round
half to even), so the integer sums are the reference's and the float epilogue differs at most in
the rounding of its multiply-add. u8 × s8 products summed in int32 are what x86's `vpdpbusd`
(AVX-VNNI, AVX512-VNNI) and AMX's `tdpbusd` compute; the zero-point correction z·Σw is one
product per column (`kernel_arguments` sums the columns once per kernel).

A fused epilogue (FusedDynamicQuantizeMatMul, passes/fuse_epilogue.py: a transformer's Gelu
after its first FFN product, the residual Add after its second) follows on y as in dense tasks;
its residuals have the output's shape.

Variants: weights int8 with zero point 0 (ONNX Runtime's dynamic quantizer's default, QInt8
symmetric); others stay on their library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.fused import apply_epilogue
from woodpecker.ops.quant_matmul import B_SCALE, B_ZP, BIAS, OP, B, X, dynamic_quantize_matmul
from woodpecker.tasks import Task, epilogue_dicts, epilogue_steps, steps_text

FUSED = "Fused" + OP


@dataclass(frozen=True)
class QDenseTask(Task):
    kind = "qdense"
    layout = ""
    ops = frozenset({OP, FUSED})

    m: int
    k: int
    n: int
    has_bias: bool = True
    epilogue: tuple[tuple, ...] = ()
    residuals: int = 0          # the epilogue's Add operands, each of the output's shape

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.m, self.n)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n

    @classmethod
    def from_node(cls, node: Node) -> "QDenseTask":
        if node.op not in cls.ops:
            raise ValueError(f"{node.op} node {node.name!r} is not a dynamic int8 MatMul")
        x, b = node.inputs[X], node.inputs[B]
        if any(node.inputs[i].data is None for i in (B, B_SCALE, B_ZP)) or \
                (node.input(BIAS) is not None and node.inputs[BIAS].data is None):
            raise ValueError(f"{node.name!r}: weights or their parameters computed at run time")
        if b.dtype != np.int8 or np.any(node.inputs[B_ZP].data != 0):
            raise ValueError(f"{node.name!r}: weights not symmetric int8")
        k, n = b.shape
        m = math.prod(x.shape[:-1])
        residuals = [v for v in node.inputs[BIAS + 1:] if v is not None]
        if any(math.prod(v.shape) != m * n or v.shape[-1:] != (n,) for v in residuals):
            raise ValueError(f"{node.name!r}: an added operand broadcasts")
        return cls(m, k, n, node.input(BIAS) is not None, epilogue_steps(node), len(residuals))

    def schedule_twin(self) -> "QDenseTask":
        return replace(self, epilogue=(), residuals=0)

    def constant(self, node: Node, i: int) -> np.ndarray:
        """Node input `i`'s constant as the task's arguments hold it: scales, zero points and
        the bias one value per column, the weights as they are."""
        a = node.inputs[i].data
        if i > BIAS:
            return np.ascontiguousarray(a).reshape(self.m, self.n)
        # a copy: a broadcast view keeps stride 0 even where contiguous (one column)
        return a if i == B else np.array(np.broadcast_to(np.ravel(a), (self.n,)))

    def kernel_arguments(self, inputs: list) -> list:
        """The node's inputs (x — None where it arrives at run time —, w, σ, w's zero point,
        β if any, the residuals) → the kernel's: x (M, K), w (K, N) int8, Σ_k w (int32, N),
        σ (float32, N), β (float32, N; zeros without a bias), the residuals."""
        x, w, sigma = inputs[0], inputs[1], inputs[2]
        bias = inputs[BIAS] if self.has_bias else np.zeros(self.n, np.float32)
        if x is not None:
            x = x.reshape(self.m, self.k)
        return [x, w, w.astype(np.int32).sum(axis=0, dtype=np.int32),
                np.array(np.broadcast_to(np.ravel(sigma), (self.n,)), np.float32),
                np.ascontiguousarray(np.ravel(bias), np.float32),
                *inputs[BIAS + self.has_bias:]]

    def describe(self) -> str:
        return f"int8 dynamic dense {self.m}x{self.k} . {self.k}x{self.n}" + \
            (" +bias" if self.has_bias else "") + steps_text(self.epilogue)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """The node's inputs: activations of a layer's statistics (normal, shifted so the zero
        point is not 0 or 128), int8 weights over their whole range, per-column scales."""
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal((self.m, self.k)) * 1.5 + 0.3).astype(np.float32)
        w = rng.integers(-127, 128, (self.k, self.n)).astype(np.int8)
        sigma = rng.uniform(0.0005, 0.005, self.n).astype(np.float32)
        arrays = [x, w, sigma, np.zeros(self.n, np.int8)]
        if self.has_bias:
            arrays.append(rng.standard_normal(self.n).astype(np.float32))
        return arrays + [rng.standard_normal((self.m, self.n)).astype(np.float32)
                         for _ in range(self.residuals)]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """ops/quant_matmul.py's DynamicQuantizeMatMul on the node's inputs, (M, N)."""
        x = inputs[0].reshape(self.m, self.k)
        base = BIAS + self.has_bias
        y = dynamic_quantize_matmul({}, x, *inputs[1:base])
        residuals = [r.reshape(self.m, self.n) for r in inputs[base:]]
        return apply_epilogue(y, epilogue_dicts(self.epilogue), residuals).astype(np.float32)
