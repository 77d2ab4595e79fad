"""Direct 2-d convolution, NHWC, register-blocked, with the fused epilogue in the same kernel.

Algorithm: out[co, x, y, n] = act(b[co] + Σ_{ci,kx,ky} w[co,ci,kx,ky] · in[ci, x·s+kx·d−p,
y·s+ky·d−p, n] + residual) in Halide's innermost-first dimension order, i.e. numpy NHWC input,
HWIO weights, NHWC output. Channels innermost let the output-channel loop vectorise; the schedule
keeps a (co_block vectors × x_block pixels) tile of accumulators in registers and computes the
whole reduction into it (`compute_at` the tile) — the shape the issue measured at ~290 GFLOP/s
on AVX-512 and that Woodpecker-DL's templates tune.

Knobs (all checked before compiling): `vec` lanes, `co_block` vectors of output channels and
`x_block` output pixels per register tile (their product bounded by the vector registers),
`parallel` — loop order and parallel axis: `rows` (channel tiles inside each pixel tile, rows in
parallel), `rows_co` (channel tiles × rows in parallel), `co` (channel tiles outermost and in
parallel, so one tile's weights stay in cache across every pixel: wide layers whose weights
exceed the cache need it), `pad` (materialise the zero-padded input once, or bounds-check inline),
`unroll_kw` (unroll the kernel-width reduction).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from woodpecker.engines.halide.runtime import halide
from woodpecker.tune.space import Constraint, Knob, KnobSpace
from woodpecker.tune.task import ConvTask

EPILOGUE_OPS = {"Add", "Relu", "Clip", "Sigmoid", "Tanh", "HardSwish"}


def supports(task: ConvTask) -> bool:
    return task.groups == 1 and task.dtype == "float32" and \
        all(step[0] in EPILOGUE_OPS for step in task.epilogue)


def space(task: ConvTask, vector_registers: int = 16) -> KnobSpace:
    knobs = [Knob("vec", (4, 8, 16)), Knob("co_block", (1, 2, 3, 4)),
             Knob("x_block", (1, 2, 3, 4, 5, 6, 7, 8)), Knob("parallel", ("rows", "rows_co", "co")),
             Knob("pad", ("root", "inline")), Knob("unroll_kw", (False, True))]
    # Tiles shift inwards at the edges (constant-size tiles keep the accumulator loops
    # unrollable), so a tile may not exceed the output it covers.
    constraints = [
        Constraint("accumulators fit the vector registers",
                   lambda c: c["co_block"] * c["x_block"] * max(1, c["vec"] // 8)
                   <= vector_registers - 1),
        Constraint("channel tile within the output channels",
                   lambda c: c["vec"] * c["co_block"] <= task.k),
        Constraint("pixel tile within the output row", lambda c: c["x_block"] <= task.out_w),
    ]
    return KnobSpace(knobs, constraints)


def epilogue_expr(hl, e, epilogue, residuals, args):
    """The fused epilogue on expression `e` at `args`; Add steps read `residuals` in order."""
    res = iter(residuals)
    for step in epilogue:
        e = e + next(res)[args] if step[0] == "Add" else _activation(hl, e, step)
    return e


def _activation(hl, e, step):
    kind = step[0]
    if kind == "Relu":
        return hl.max(e, 0.0)
    if kind == "Clip":
        lo, hi = step[1], step[2]
        e = e if lo is None else hl.max(e, float(lo))
        return e if hi is None else hl.min(e, float(hi))
    if kind == "Sigmoid":
        return 1.0 / (1.0 + hl.exp(-e))
    if kind == "Tanh":
        return hl.tanh(e)
    if kind == "HardSwish":
        return e * hl.clamp(e / 6.0 + 0.5, 0.0, 1.0)
    raise ValueError(f"unsupported epilogue step {kind}")


def build(task: ConvTask, config: dict, threads: int = 2) -> Callable[..., np.ndarray]:
    """Compile `task` with `config`; returns run(*arrays) taking `ConvTask.random_inputs`'s
    order: x (NHWC), w (HWIO), bias when the task has one, then one residual per Add step."""
    hl = halide(threads)
    f32 = hl.Float(32)
    x = hl.ImageParam(f32, 4, "x")
    w = hl.ImageParam(f32, 4, "w")
    params = [x, w]
    b = hl.ImageParam(f32, 1, "b") if task.has_bias else None
    if b is not None:
        params.append(b)
    residuals = [hl.ImageParam(f32, 4, f"r{i}") for i, s in enumerate(task.epilogue)
                 if s[0] == "Add"]
    params += residuals

    co, ox, oy, n = hl.Var("co"), hl.Var("ox"), hl.Var("oy"), hl.Var("n")
    r = hl.RDom([(0, task.c), (0, task.kw), (0, task.kh)])
    bounds = [(0, task.c), (0, task.w), (0, task.h), (0, task.n)]
    padded = hl.BoundaryConditions.constant_exterior(x, 0.0, bounds)
    sy, sx = task.stride
    dy, dx = task.dilation
    acc = hl.Func("acc")
    acc[co, ox, oy, n] = b[co] if b is not None else hl.f32(0.0)
    acc[co, ox, oy, n] += w[co, r.x, r.y, r.z] * padded[
        r.x, ox * sx + r.y * dx - task.pads[1], oy * sy + r.z * dy - task.pads[0], n]
    out = hl.Func("out")
    out[co, ox, oy, n] = epilogue_expr(hl, acc[co, ox, oy, n], task.epilogue, residuals,
                                       (co, ox, oy, n))

    vec, cb, xb = config["vec"], config["co_block"], config["x_block"]
    coo, coi, xo, xi = hl.Var("coo"), hl.Var("coi"), hl.Var("xo"), hl.Var("xi")
    tail = hl.TailStrategy.ShiftInwards
    out.split(co, coo, coi, vec * cb, tail).split(ox, xo, xi, xb, tail)
    out.vectorize(coi, vec).unroll(coi).unroll(xi)
    if config["parallel"] == "rows_co":
        # channel tiles × rows form the parallel loop; one register tile per pixel tile
        out.reorder(coi, xi, xo, coo, oy, n).fuse(coo, oy, oy).parallel(oy)
        acc.compute_at(out, xo)
    elif config["parallel"] == "co":
        out.reorder(coi, xi, xo, oy, coo, n).parallel(coo)
        acc.compute_at(out, xo)
    else:
        out.reorder(coi, xi, coo, xo, oy, n).parallel(oy)
        acc.compute_at(out, coo)
    acc.vectorize(co, vec).unroll(co).unroll(ox)
    upd = acc.update().reorder(co, ox, r.x, r.y, r.z).vectorize(co, vec).unroll(co).unroll(ox)
    if config["unroll_kw"]:
        upd.unroll(r.y)
    if config["pad"] == "root":
        padded.compute_root().parallel(padded.args()[2])
    target = hl.get_jit_target_from_environment()
    kernel = out.compile_to_callable(params, target)
    shape = (task.n, task.out_h, task.out_w, task.k)

    def run(*arrays):
        y = np.empty(shape, np.float32)
        kernel(*(hl.Buffer(a) for a in arrays), hl.Buffer(y))
        return y

    return run
