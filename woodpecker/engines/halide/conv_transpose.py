"""Transposed 2-d convolution, NHWC, register-blocked like the direct convolution.

Algorithm: split by output phase. Output pixel y (and likewise x) sits at a = y + pad_top
in the uncropped output; the input rows that reach it are q − j for q = a ÷ s, with kernel row
t = (a mod s) + s·j, j = 0 … ⌈kh / s⌉ − 1. So
out[k, x, y, n] = b[k] + Σ_{c, jx, jy} in[c, qx − jx, qy − jy, n] · W[k, c, rx, ry, jx, jy]
with the weights packed once per plan into phases (W: numpy (JY, JX, s_y, s_x, C, K), zero
where a phase's tap is past the kernel, and such taps skipped) and the input zero outside the
map — no tap that cannot reach a pixel is multiplied, unlike a direct convolution over a
zero-upsampled input. The
output channels are innermost, so a tile of them is one vector load of weights and each input
value a broadcast; the (co_block vectors × x_block pixels) accumulator tile stays in registers
(schedule.register_tile), as in the direct convolution.

Knobs: `vec` lanes, `co_block` vectors of output channels, `x_block` output pixels per tile,
`parallel` (schedule.register_tile's loop orders).
"""

from __future__ import annotations

import math

import numpy as np

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import fits_registers, own_shapes
from woodpecker.engines.halide.template_parts import PARALLEL, compiled, register_tile
from woodpecker.tasks.conv_transpose import ConvTransposeTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "conv_transpose"

SEEDS = ({"vec": 8, "co_block": 2, "x_block": 4, "parallel": "rows"},
         {"vec": 16, "co_block": 1, "x_block": 4, "parallel": "rows"})


def supports(task: ConvTransposeTask) -> bool:
    return task.dtype == "float32" and task.k >= 4


def space(task: ConvTransposeTask, vector_registers: int = 16) -> KnobSpace:
    knobs = [Knob("vec", (4, 8, 16)), Knob("co_block", (1, 2, 4)),
             Knob("x_block", (1, 2, 4, 8)), Knob("parallel", PARALLEL)]
    constraints = [
        Constraint("channel tile within the output channels",
                   lambda c: c["vec"] * c["co_block"] <= task.k),
        Constraint("pixel tile within the output row", lambda c: c["x_block"] <= task.out_w),
        fits_registers(vector_registers, "co_block", 2),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


views = own_shapes


def _taps(task: ConvTransposeTask) -> tuple[int, int]:
    """Input rows and columns that reach one output pixel at most: ⌈kh / s⌉, ⌈kw / s⌉."""
    return math.ceil(task.kh / task.stride[0]), math.ceil(task.kw / task.stride[1])


def weights(task: ConvTransposeTask, config: dict, w: np.ndarray) -> np.ndarray:
    """(C, K, kh, kw) → phases (JY, JX, s_y, s_x, C, K): tap (ry + s_y·jy, rx + s_x·jx), zero
    past the kernel."""
    (sy, sx), (jy, jx) = task.stride, _taps(task)
    padded = np.zeros((task.c, task.k, jy * sy, jx * sx), np.float32)
    padded[:, :, :task.kh, :task.kw] = w
    phases = padded.reshape(task.c, task.k, jy, sy, jx, sx)    # c, k, jy, ry, jx, rx
    return np.ascontiguousarray(phases.transpose(2, 4, 3, 5, 0, 1))


def build(task: ConvTransposeTask, config: dict, threads: int = 2) -> AotKernel:
    hl = halide_module()
    f32 = hl.Float(32)
    x = hl.ImageParam(f32, 4, "x")
    w = hl.ImageParam(f32, 6, "w")
    params = [x, w]
    b = None
    if task.has_bias:
        b = hl.ImageParam(f32, 1, "b")
        params.append(b)
    (sy, sx), (jy, jx) = task.stride, _taps(task)
    zero = hl.BoundaryConditions.constant_exterior(x, hl.f32(0.0), [(0, task.c), (0, task.w),
                                                                   (0, task.h)])
    k, ox, oy, n = hl.Var("k"), hl.Var("ox"), hl.Var("oy"), hl.Var("n")
    ax, ay = ox + task.pads[1], oy + task.pads[0]
    r = hl.RDom([(0, task.c), (0, jx), (0, jy)])
    # taps past the kernel (the phases' zero padding) are never multiplied: an inf input
    # times their zero would be NaN where the reference has no such term
    r.where((ax % sx + sx * r[1] < task.kw) & (ay % sy + sy * r[2] < task.kh))
    acc = hl.Func("acc")
    acc[k, ox, oy, n] = b[k] if b is not None else hl.f32(0.0)
    acc[k, ox, oy, n] += zero[r[0], ax / sx - r[1], ay / sy - r[2], n] * \
        w[k, r[0], ax % sx, ay % sy, r[1], r[2]]
    out = hl.Func("out")
    out[k, ox, oy, n] = acc[k, ox, oy, n]
    register_tile(hl, out, acc, (k, ox, oy, n), (r[0], r[1], r[2]), config["vec"],
                  config["co_block"], config["x_block"], config["parallel"])
    return compiled(__name__, task, config, threads, out, params)
