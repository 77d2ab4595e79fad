"""Depthwise 2-d convolution (groups = input channels = output channels), NHWC, with the fused
epilogue in the same kernel.

Algorithm: out[c, x, y, n] = act(b[c] + Σ_{kx,ky} w[c, 0, kx, ky] · in[c, x·s+kx·d−p,
y·s+ky·d−p, n] + residual), Halide dimension order (numpy NHWC input, HW1C weights). There is
no reduction over channels, so the kernel is bound by memory traffic: the schedule vectorises
channels, keeps a (c_block vectors × x_block pixels) tile of accumulators in registers, and
reuses each loaded input vector across the kernel window of neighbouring output pixels.

Knobs: `vec` lanes, `c_block` channel vectors and `x_block` pixels per register tile (bounded
by the vector registers), `parallel` (rows, or channel tiles × rows), `pad` (materialise the
zero-padded input once, or bounds-check inline), `unroll_k` (unroll the kernel window).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from woodpecker.engines.halide.conv_direct import EPILOGUE_OPS, epilogue_expr
from woodpecker.engines.halide.runtime import halide
from woodpecker.tune.space import Constraint, Knob, KnobSpace
from woodpecker.tune.task import ConvTask


def supports(task: ConvTask) -> bool:
    return task.groups == task.c == task.k and task.groups > 1 and task.dtype == "float32" \
        and all(step[0] in EPILOGUE_OPS for step in task.epilogue)


def space(task: ConvTask, vector_registers: int = 16) -> KnobSpace:
    knobs = [Knob("vec", (4, 8, 16)), Knob("c_block", (1, 2, 4)),
             Knob("x_block", (1, 2, 4, 7, 8)), Knob("parallel", ("rows", "rows_c")),
             Knob("pad", ("root", "inline")), Knob("unroll_k", (False, True))]
    constraints = [
        Constraint("accumulators fit the vector registers",
                   lambda c: c["c_block"] * c["x_block"] * max(1, c["vec"] // 8)
                   <= vector_registers - 2),
        Constraint("channel tile within the channels", lambda c: c["vec"] * c["c_block"] <= task.c),
        Constraint("pixel tile within the output row", lambda c: c["x_block"] <= task.out_w),
    ]
    return KnobSpace(knobs, constraints)


def build(task: ConvTask, config: dict, threads: int = 2) -> Callable[..., np.ndarray]:
    """Compile `task` with `config`; run(*arrays) takes `ConvTask.random_inputs`'s order."""
    hl = halide(threads)
    f32 = hl.Float(32)
    x, w = hl.ImageParam(f32, 4, "x"), hl.ImageParam(f32, 4, "w")
    b = hl.ImageParam(f32, 1, "b") if task.has_bias else None
    residuals = [hl.ImageParam(f32, 4, f"r{i}") for i, s in enumerate(task.epilogue)
                 if s[0] == "Add"]
    params = [x, w] + ([b] if b is not None else []) + residuals

    c, ox, oy, n = hl.Var("c"), hl.Var("ox"), hl.Var("oy"), hl.Var("n")
    r = hl.RDom([(0, task.kw), (0, task.kh)])
    bounds = [(0, task.c), (0, task.w), (0, task.h), (0, task.n)]
    padded = hl.BoundaryConditions.constant_exterior(x, 0.0, bounds)
    sy, sx = task.stride
    dy, dx = task.dilation
    acc = hl.Func("acc")
    acc[c, ox, oy, n] = b[c] if b is not None else hl.f32(0.0)
    acc[c, ox, oy, n] += w[c, 0, r.x, r.y] * padded[
        c, ox * sx + r.x * dx - task.pads[1], oy * sy + r.y * dy - task.pads[0], n]
    out = hl.Func("out")
    out[c, ox, oy, n] = epilogue_expr(hl, acc[c, ox, oy, n], task.epilogue, residuals,
                                      (c, ox, oy, n))

    vec, cb, xb = config["vec"], config["c_block"], config["x_block"]
    co, ci, xo, xi = hl.Var("co"), hl.Var("ci"), hl.Var("xo"), hl.Var("xi")
    tail = hl.TailStrategy.ShiftInwards
    out.split(c, co, ci, vec * cb, tail).split(ox, xo, xi, xb, tail)
    out.vectorize(ci, vec).unroll(ci).unroll(xi)
    if config["parallel"] == "rows_c":
        out.reorder(ci, xi, xo, co, oy, n).fuse(co, oy, oy).parallel(oy)
        acc.compute_at(out, xo)
    else:
        out.reorder(ci, xi, co, xo, oy, n).parallel(oy)
        acc.compute_at(out, co)
    acc.vectorize(c, vec).unroll(c).unroll(ox)
    upd = acc.update().reorder(c, ox, r.x, r.y).vectorize(c, vec).unroll(c).unroll(ox)
    if config["unroll_k"]:
        upd.unroll(r.x).unroll(r.y)
    if config["pad"] == "root":
        padded.compute_root().parallel(padded.args()[2])
    kernel = out.compile_to_callable(params, hl.get_jit_target_from_environment())
    shape = (task.n, task.out_h, task.out_w, task.k)

    def run(*arrays):
        y = np.empty(shape, np.float32)
        kernel(*(hl.Buffer(a) for a in arrays), hl.Buffer(y))
        return y

    return run
