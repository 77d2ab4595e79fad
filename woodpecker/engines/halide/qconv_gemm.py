"""GEMM-style int8 convolution (tasks/qconv.py), NHWC: u8 × s8 products summed in int32 four at
a time — x86's `vpdpbusd` (AVX512-VNNI, AVX-VNNI) — then requantised to 8 bits in the same
kernel.

Algorithm (innermost first): acc[lane, p, tile, n] = β[co] + Σ_{q, kx, ky, r<4}
u8(col[4q + r, kx, ky, p, n]) · w[r, lane, (ky·kw + kx)·Q + q, tile], with co = tile·T + lane,
p = oy·OW + ox, col the im2col view of the input padded with its zero point, channels padded to
a multiple of 4 (Q = ⌈C/4⌉ groups; padded channels read the zero point against zero weights);
out[co, p, n] = saturate(round(float32(acc) · μ[co]) + y_zp). Halide's x86 backend turns a
4-wide sum of widening u8·i8 products, vectorised over the reduction's 4 and the lanes (the
update `atomic`), into one `vpdpbusd` per 16 output channels where the target has
AVX512_SapphireRapids (or AVXVNNI for 8 lanes), and into `vpmaddwd` pairs elsewhere.

Weights are packed per channel tile as (⌈K/T⌉, kh·kw·Q, T, 4) int8, so one vector of weights is
64 contiguous bytes: declaring those strides to Halide is what makes it one load (measured on
Emerald Rapids, a 1×1 conv of 256→64 channels at 56²: 0.80 ms with the strides unknown — the
weights gathered byte group by byte group — against 0.26, 396 GOP/s, declared; with 8-pixel
tiles 0.15 ms, 696 GOP/s, where the fp32 templates reach 100-130 GFLOP/s).

Knobs: `vec` (16), `co_block` vectors and `x_block` pixels per register tile, `parallel`
(`p`: pixel tiles in parallel, `co`: channel tiles).

Input channels that are not a whole number of groups of 4 are copied once, padded with the
zero point, before the product: read through the boundary condition, every 4-byte group paid a
per-byte select (measured on Emerald Rapids, 3×3 122→256 at 19×8: 6.9 ms against 0.20 for 128
channels). Output channels that are not a whole number of tiles (a pruned network's 122 or 243) are
computed in whole tiles over zero-padded weights, β and μ (`padded_channels`), and the last
tile's stores are masked (GuardWithIf).
"""

from __future__ import annotations

import numpy as np

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import program_output, program_params, requantised
from woodpecker.engines.halide.template_parts import (
    compiled,
    halide_type,
    padded_channels,
    uint8_padded,
)
from woodpecker.tasks.qconv import QConvTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "qconv2d"
KINDS = (KIND, "qmatmul")     # a static int8 MatMul is a 1×1 conv (tasks/qconv.QMatMulTask)
GROUP = 4           # bytes one 32-bit lane of vpdpbusd sums

SEEDS = ({"vec": 16, "co_block": 2, "x_block": 8, "parallel": "p"},
         {"vec": 16, "co_block": 2, "x_block": 4, "parallel": "p"},
         {"vec": 16, "co_block": 1, "x_block": 8, "parallel": "co"})


def supports(task) -> bool:
    return isinstance(task, QConvTask) and task.groups == 1


def space(task: QConvTask, vector_registers: int = 32) -> KnobSpace:
    knobs = [Knob("vec", (8, 16)), Knob("co_block", (1, 2, 3, 4)),
             Knob("x_block", (1, 2, 3, 4, 6, 8)), Knob("parallel", ("p", "co"))]
    constraints = [
        Constraint("accumulators and one weight vector per tile row fit the registers",
                   lambda c: c["co_block"] * (c["x_block"] + 1) < vector_registers),
        Constraint("channel tiles no wider than the channels rounded up to a vector",
                   lambda c: c["vec"] * c["co_block"] <= -(-task.k // c["vec"]) * c["vec"]),
        Constraint("pixel tiles within the output pixels",
                   lambda c: c["x_block"] <= task.out_h * task.out_w),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


def _groups(task: QConvTask) -> int:
    return -(-task.c // GROUP)


def arguments(task: QConvTask, config: dict, inputs: list) -> list:
    """The node's inputs (the task's order) → the kernel's: x, the packed weights, β, μ and
    the zero points (`QConvTask.kernel_arguments`), computed once per kernel."""
    args = task.kernel_arguments(inputs)
    t = config["vec"] * config["co_block"]
    return [args[0], weights(task, config, args[1]), *padded_channels(args[2:4], task.k, t),
            *args[4:]]


def views(task: QConvTask) -> list:
    """The output, NHWC, seen as (N, OH·OW, K), and so are a fused program's other inputs; the
    input as the task sees it (`x_view`: a MatMul's rows as one line of pixels); the other
    arguments as they are."""
    pixels = (task.n, task.out_h * task.out_w, task.k)
    return [task.x_view] + [None] * 5 + [pixels] * len(task.extra) + \
        [None] * bool(task.consts) + [pixels]


def weights(task: QConvTask, config: dict, w: np.ndarray) -> np.ndarray:
    """HWIO int8 weights → (⌈K/T⌉, kh·kw·Q, T, 4), input channels zero-padded to 4·Q and
    output channels to whole tiles."""
    t, q = config["vec"] * config["co_block"], _groups(task)
    kh, kw, c, k = w.shape
    tiles = -(-k // t)
    padded = np.zeros((kh, kw, q * GROUP, tiles * t), np.int8)
    padded[:, :, :c, :k] = w
    packed = padded.reshape(kh * kw, q, GROUP, tiles, t).transpose(3, 0, 1, 4, 2)
    return np.ascontiguousarray(packed.reshape(tiles, kh * kw * q, t, GROUP))


def build(task: QConvTask, config: dict, threads: int = 2) -> AotKernel:
    hl = halide_module()
    vec, t, xb = config["vec"], config["vec"] * config["co_block"], config["x_block"]
    q = _groups(task)
    x = hl.ImageParam(halide_type(hl, task.x_dtype), 4, "x")
    w = hl.ImageParam(hl.Int(8), 4, "w")           # [r, lane, (ky·kw + kx)·Q + q, tile]
    beta = hl.ImageParam(hl.Int(32), 1, "beta")
    mu = hl.ImageParam(hl.Float(32), 1, "mu")
    x_zp = hl.ImageParam(hl.UInt(8), 1, "x_zp")
    y_zp = hl.ImageParam(hl.Int(32), 1, "y_zp")
    w.dim(0).set_stride(1).set_extent(GROUP).set_min(0)
    w.dim(1).set_stride(GROUP).set_extent(t).set_min(0)
    padded = uint8_padded(hl, task, x, x_zp)
    if task.c % GROUP:      # whole groups of 4 channels, copied once (see the docstring)
        copy = hl.Func("whole_groups")
        cv, xv, yv, nv = (hl.Var(v) for v in ("cv", "xv", "yv", "nv"))
        copy[cv, xv, yv, nv] = padded[cv, xv, yv, nv]
        copy.compute_root().bound(cv, 0, q * GROUP).vectorize(cv, min(16, q * GROUP)) \
            .parallel(yv)
        padded = copy
    n = hl.Var("n")
    lane, p, tile, co = hl.Var("lane"), hl.Var("p"), hl.Var("tile"), hl.Var("co")
    (sy, sx), (dy, dx), ow = task.stride, task.dilation, task.out_w
    r = hl.RDom([(0, GROUP), (0, q), (0, task.kw), (0, task.kh)], "r")
    tap = padded[GROUP * r[1] + r[0], (p % ow) * sx + r[2] * dx - task.pads[1],
                 (p / ow) * sy + r[3] * dy - task.pads[0], n]
    acc = hl.Func("acc")
    acc[lane, p, tile, n] = beta[tile * t + lane]
    acc[lane, p, tile, n] += hl.i32(hl.i16(tap) * hl.i16(
        w[r[0], lane, (r[3] * task.kw + r[2]) * q + r[1], tile]))
    out = hl.Func("out")
    extra = program_params(hl, task, 3)
    out[co, p, n] = program_output(hl, task, requantised(hl, task, acc[co % t, p, co // t, n],
                                                         mu[co], y_zp), (co, p, n), co, extra)

    oco, oci, po, pi = hl.Var("oco"), hl.Var("oci"), hl.Var("po"), hl.Var("pi")
    out.output_buffer().dim(0).set_min(0)
    whole = task.k % t == 0
    out.split(co, oco, oci, t, hl.TailStrategy.RoundUp if whole else hl.TailStrategy.GuardWithIf) \
        .split(p, po, pi, xb, hl.TailStrategy.ShiftInwards)
    out.vectorize(oci, vec).unroll(oci).unroll(pi)
    if config["parallel"] == "p":
        out.reorder(oci, pi, oco, po, n).parallel(po)
        acc.compute_at(out, oco)
    else:
        out.reorder(oci, pi, po, oco, n).parallel(oco)
        acc.compute_at(out, po)
    acc.bound(lane, 0, t).vectorize(lane, vec).unroll(lane).unroll(p)
    acc.update().reorder(r[0], lane, p, r[1], r[2], r[3]).atomic() \
        .vectorize(r[0]).vectorize(lane, vec).unroll(lane).unroll(p)
    return compiled(__name__, task, config, threads, out,
                    [x, w, beta, mu, x_zp, y_zp, *extra], views(task))
