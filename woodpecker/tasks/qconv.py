"""The qconv2d task: an integer 2-d convolution with fused requantisation (QLinearConv), NHWC.

Contract: the kernel computes, for uint8 (or int8) activations x, int8 weights w (HWIO) and
per output channel an int32 bias β and a float32 multiplier μ,

    acc[n, y, x, k] = Σ u(x)[n, y·s + i − p, x·s + j − p, c] · w[i, j, c, k] + β[k]
    out = saturate(round_half_even(float32(acc) · μ[k]) + y_zp)   (in the output type)

where u(x) is x as uint8 (int8 activations are offset by 128) and the padding reads the input's
zero point, offset alike. The task's arguments are the node's inputs (`random_inputs`,
`constant`, `reference`: ops/quant_conv.py's QLinearConv); `kernel_arguments` turns them into
the kernel's — β = B − u(x_zp)·Σw per channel, μ = x_scale·w_scale/y_scale in float32 (ONNX
Runtime's order) — so the kernel's output equals the op's reference bit for bit. u8×s8
products summed in int32 are what x86's VNNI instruction (`vpdpbusd`) computes: the offset and
the zero-point correction move into β at build time, so the kernel's inner loop is the
instruction alone.

A fused element-wise program (FusedQLinearConv, passes/fuse_qconv_program.py: a residual
block's DequantizeLinear → Add → Relu → QuantizeLinear) runs on the requantised 8-bit value:
`program` (tasks/elementwise.py's form, the conv's output its run-time input 0), the types of
its other run-time inputs (`extra`, NHWC of the output's shape) and the length of its constant
vector; the output type is then the program's.

Variants: groups 1 or depthwise (groups = input channels = output channels; other grouped
int8 convs are not built), symmetric weights (w_zero_point 0, as ONNX Runtime's and NNCF's
quantizers write per-channel weights), per-tensor activation zero points; a QLinearConv outside
these stays on its library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.fused import program_dtype, runtime_count
from woodpecker.ops.quant_conv import (
    FUSED,
    N_CONV,
    WS,
    WZ,
    XS,
    XZ,
    YS,
    YZ,
    B,
    W,
    X,
    qlinear_conv,
)
from woodpecker.ops.quant_dense import FUSED as FUSED_DENSE
from woodpecker.ops.quant_dense import OP as DENSE
from woodpecker.ops.quant_dense import qlinear_dense
from woodpecker.tasks import NHWC, Task, program_dicts, program_steps
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.elementwise import ElementwiseTask


def _check_constants(node: Node) -> None:
    """ValueError (the node stays on its library) unless the weights, scales, zero points and
    bias are constants and the weights symmetric int8 — the variant the templates compute."""
    if any(node.inputs[i].data is None for i in (XS, XZ, W, WS, WZ, YS, YZ)) or \
            (node.input(B) is not None and node.inputs[B].data is None):
        raise ValueError(f"{node.name!r}: quantization parameters computed at run time")
    if node.inputs[W].dtype != np.int8 or np.any(node.inputs[WZ].data != 0):
        raise ValueError(f"{node.name!r}: weights not symmetric int8")


def fused_program(node: Node) -> tuple[tuple, tuple[str, ...], int]:
    """A fused node's (program, its other run-time inputs' types, its constant vector's
    length) — the inputs after the integer op's nine; nothing for the op alone."""
    if "program" not in node.attrs:
        return (), (), 0
    n_in = runtime_count(node.attrs["program"])
    extra = tuple(v.dtype.name for v in node.inputs[N_CONV:N_CONV + n_in - 1])
    rest = node.inputs[N_CONV + n_in - 1:]
    return program_steps(node.attrs["program"]), extra, rest[0].data.size if rest else 0


@dataclass(frozen=True)
class QConvTask(Task):
    kind = "qconv2d"
    layout = NHWC
    ops = frozenset({"QLinearConv", FUSED})

    n: int
    c: int
    h: int
    w: int
    k: int
    kh: int
    kw: int
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]          # top, left, bottom, right
    dilation: tuple[int, int]
    x_dtype: str = "uint8"
    y_dtype: str = "uint8"
    has_bias: bool = True
    groups: int = 1
    program: tuple = ()             # a fused element-wise program on the 8-bit output
    extra: tuple[str, ...] = ()     # its other run-time inputs' types
    consts: int = 0                 # its constant vector's length

    LATER_FIELDS = ("groups", "program", "extra", "consts")
    out_h = ConvTask.out_h          # the same geometry, the same output size
    out_w = ConvTask.out_w

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.n, self.out_h, self.out_w, self.k)

    @property
    def x_view(self) -> tuple[int, ...] | None:
        """The shape the kernel sees the run-time input as: its own (NHWC) for a conv."""
        return None

    @property
    def extra_view(self) -> tuple[int, ...] | None:
        """The shape the kernel sees the program's other run-time inputs as: their own."""
        return None

    @property
    def out_dtype(self) -> np.dtype:
        return program_dtype(program_dicts(self.program), np.dtype(self.y_dtype)) \
            if self.program else np.dtype(self.y_dtype)

    def program_task(self) -> ElementwiseTask:
        """The fused program as the element-wise task over the output it computes (its input 0
        the requantised conv output)."""
        return ElementwiseTask(self.n, self.out_h, self.out_w, self.k, 1 + len(self.extra),
                               self.consts, self.program, self.out_dtype.name,
                               (self.y_dtype, *self.extra))

    @property
    def steps_off(self) -> int:
        return self.program_task().steps_off if self.program else 0

    @property
    def tabled(self) -> bool:
        """The fused program reads only the requantised value and computes a transcendental
        step (a quantized SiLU): the kernel reads its output from the program's 256-entry
        table (`ElementwiseTask.table`, passed in place of the constant vector) — one load
        where the epilogue would evaluate the program per output, and exact."""
        return bool(self.program) and not self.extra and self.program_task().table_ready \
            and self.program_task().steps_off > 0

    @property
    def flops(self) -> int:
        return 2 * self.n * self.k * self.out_h * self.out_w * (self.c // self.groups) \
            * self.kh * self.kw

    @classmethod
    def from_node(cls, node: Node) -> "QConvTask":
        if node.op not in cls.ops or len(node.inputs[X].shape) != 4:
            raise ValueError(f"{node.op} node {node.name!r} is not a 2-d convolution")
        groups = node.attrs.get("group", 1)
        n, c, h, w = node.inputs[X].shape
        k, _, kh, kw = node.inputs[W].shape
        if groups != 1 and not groups == c == k:
            raise ValueError(f"{node.name!r}: grouped int8 convs (other than depthwise) are "
                             "not built")
        _check_constants(node)
        p, a = node.attrs["_pads"], node.attrs
        return cls(n, c, h, w, k, kh, kw, tuple(a["strides"]), (p[0], p[1], p[2], p[3]),
                   tuple(a["dilations"]), node.inputs[X].dtype.name,
                   node.inputs[YZ].dtype.name, node.input(B) is not None, groups,
                   *fused_program(node))

    def constant(self, node: Node, i: int) -> np.ndarray:
        """Node input `i`'s constant as the task's arguments hold it: OIHW weights as HWIO,
        every other as it is."""
        a = node.inputs[i].data
        if i >= N_CONV:      # the program's constants (or a constant input of it, NHWC)
            return np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if a.ndim == 4 else \
                np.ascontiguousarray(a, np.float32).reshape(-1)
        return np.ascontiguousarray(a.transpose(2, 3, 1, 0)) if i == W else a

    def kernel_arguments(self, inputs: list) -> list:
        """The node's inputs in the task's order (x NHWC — None where it arrives at run time —,
        x_scale, x_zero_point, w HWIO, w_scale, w_zero_point, y_scale, y_zero_point, B if
        any) → the kernel's: x, w, β (int32, K), μ (float32, K), u(x_zp) (uint8, one),
        y_zp (int32, one)."""
        x, xs, xz, w, ws, _, ys, yz = inputs[:8]
        x_zp = int(np.ravel(xz)[0]) + (128 if self.x_dtype == "int8" else 0)
        beta = -x_zp * w.astype(np.int64).sum(axis=(0, 1, 2))
        if self.has_bias:
            beta = beta + inputs[B].astype(np.int64)
        mu = (np.float32(np.ravel(xs)[0]) * np.broadcast_to(
            np.ravel(ws), (self.k,)).astype(np.float32)) / np.float32(np.ravel(ys)[0])
        rest = list(inputs[8 + self.has_bias:])
        if self.tabled:
            rest = [self.program_task().table(rest[0] if rest else None).astype(np.float32)]
        return [x, w, beta.astype(np.int32), mu.astype(np.float32),
                np.array([x_zp], np.uint8), np.array([int(np.ravel(yz)[0])], np.int32), *rest]

    def describe(self) -> str:
        kind = "conv" if self.groups == 1 else "dwconv"
        program = " +" + "+".join(op for op, _, _ in self.program) if self.program else ""
        return (f"int8 {kind} {self.kh}x{self.kw}/{self.stride[0]} {self.c}->{self.k} @ "
                f"{self.h}x{self.w} ({self.x_dtype} in, {self.out_dtype.name} out){program}")

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """The node's inputs (x NHWC, weights HWIO): 8-bit values over their whole range,
        per-channel weight scales, and an output scale that spreads the results over the
        8-bit range with some saturating."""
        rng = np.random.default_rng(seed)
        xi, yi = np.iinfo(self.x_dtype), np.iinfo(self.y_dtype)
        x = rng.integers(xi.min, xi.max + 1, (self.n, self.h, self.w, self.c))
        w = rng.integers(-128, 128, (self.kh, self.kw, self.c // self.groups, self.k))
        taps = self.kh * self.kw * self.c // self.groups
        xs = np.float32(rng.uniform(0.005, 0.05))
        ws = rng.uniform(0.002, 0.02, self.k).astype(np.float32)
        # sums of taps products of std ~74·74 land about 60 steps from the zero point
        ys = np.float32(float(xs) * float(ws.mean()) * 90.0 * np.sqrt(taps))
        arrays = [x.astype(self.x_dtype), xs,
                  np.asarray(rng.integers(xi.min, xi.max + 1), self.x_dtype),
                  w.astype(np.int8), ws, np.zeros(self.k, np.int8), ys,
                  np.asarray(rng.integers(yi.min, yi.max + 1), self.y_dtype)]
        if self.has_bias:
            arrays.append(rng.integers(-(1 << 16), 1 << 16, self.k).astype(np.int32))
        if self.program:     # the program's other inputs and constants, as its task draws them
            arrays += self.program_task().random_inputs(seed + 1)[1:]
        return arrays

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """ops/quant_conv.py's QLinearConv on the node's inputs, NHWC."""
        attrs = {"_pads": list(self.pads), "strides": list(self.stride),
                 "dilations": list(self.dilation), "group": self.groups}
        n_conv = 8 + self.has_bias
        args = list(inputs[:n_conv])
        args[X] = inputs[X].transpose(0, 3, 1, 2)
        args[W] = inputs[W].transpose(3, 2, 0, 1)
        y = np.ascontiguousarray(qlinear_conv(attrs, *args).transpose(0, 2, 3, 1))
        if not self.program:
            return y
        return self.program_task().reference([y, *inputs[n_conv:]])


@dataclass(frozen=True)
class QMatMulTask(QConvTask):
    """The qmatmul task: a QLinearDense (ops/quant_dense.py) — x (…, K) times constant int8
    weights (K, N), requantised — computed as the 1×1 int8 conv it is over the rows as one
    line of M = ∏ x.shape[:-1] pixels of K channels (n = h = 1, w = M, c = K, k = N): the
    row-major (…, K) input *is* that conv's NHWC input, so the qconv templates compute it
    unchanged, reading x and writing the (…, N) output through views of those shapes
    (`x_view`, `out_shape`). Weights, scales, zero points and bias reach the kernel exactly as
    a QLinearConv's (`constant` gives the (K, N) weights as HWIO (1, 1, K, N))."""

    kind = "qmatmul"
    layout = ""
    ops = frozenset({DENSE, FUSED_DENSE})

    @property
    def x_view(self) -> tuple[int, ...] | None:
        return (1, 1, self.w, self.c)

    @property
    def extra_view(self) -> tuple[int, ...] | None:
        return self.out_shape

    @classmethod
    def from_node(cls, node: Node) -> "QMatMulTask":
        if node.op not in cls.ops:
            raise ValueError(f"{node.op} node {node.name!r} is not a static int8 MatMul")
        _check_constants(node)
        k, n = node.inputs[W].shape
        m = math.prod(node.inputs[X].shape[:-1])
        return cls(1, k, 1, m, n, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), node.inputs[X].dtype.name,
                   node.inputs[YZ].dtype.name, node.input(B) is not None, 1,
                   *fused_program(node))

    def constant(self, node: Node, i: int) -> np.ndarray:
        """The (K, N) weights as HWIO (1, 1, K, N); every other input as it is."""
        a = node.inputs[i].data
        return a.reshape(1, 1, *a.shape) if i == W else a

    def describe(self) -> str:
        program = " +" + "+".join(op for op, _, _ in self.program) if self.program else ""
        return (f"int8 dense {self.w}x{self.c} . {self.c}x{self.k} ({self.x_dtype} in, "
                f"{self.out_dtype.name} out)" + (" +bias" if self.has_bias else "") + program)

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """ops/quant_dense.py's QLinearDense on the node's inputs, (1, 1, M, N), then the
        fused program if any."""
        n_dense = 8 + self.has_bias
        args = list(inputs[:n_dense])
        args[X] = inputs[X].reshape(self.w, self.c)
        args[W] = inputs[W].reshape(self.c, self.k)
        y = qlinear_dense({}, *args).reshape(self.out_shape)
        if not self.program:
            return y
        return self.program_task().reference([y, *inputs[n_dense:]])
