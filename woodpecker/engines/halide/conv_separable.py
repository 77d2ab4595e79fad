"""Separable conv (a depthwise conv, then the 1×1 conv reading it; ops/separable.py) as one
kernel, NHWC, with both convs' epilogues (and the depthwise prologue) fused.

Algorithm: d[c, x, y, n] = act_d(bd[c] + Σ_{kx,ky} wd[c, 0, kx, ky] · in[c, x·s+kx·dil−p,
y·s+ky·dil−p, n]); out[k, x, y, n] = act_p(bp[k] + Σ_c wp[k, c, 0, 0] · d[c, x, y, n] +
residual). The 1×1 conv reads d at the very pixel it writes, so d can be computed a strip of
output rows at a time, right before the strip's pointwise tiles read it from L1/L2, with no
overlap between strips to recompute (the depthwise window's overlap falls on its input, which
is a buffer). Each strip is a parallel task. The pointwise tiles are conv_direct's register
tiles; the depthwise rows are vectorised over channels with a few pixels unrolled, so the
loads of neighbouring windows are shared (conv_depthwise's tile).

Knobs: `vec`, `co_block`, `x_block` (the pointwise register tile, bounded by the vector
registers), `co_outer` (channel tiles outside the pixel tiles, so one tile's weights stay in L1
across the strip's pixels), `rows` (output rows per strip), `dw_vec` and `dw_x` (the
depthwise tile: lanes and unrolled pixels), `pad` (`inline`: bounds checks on the taps;
`strip`: the strip's zero-padded input rows materialised first), `dw_at` (`strip`, above, or
`root`: the whole depthwise result first, rows in parallel, then the 1×1 conv with its channel
tiles in parallel, so each core reads only its tiles' weights: for small images of many
channels, e.g. 7² × 960 → 320, whose 1.2 MiB of weights dominate; what separate kernels
would do, less a call).
"""

from __future__ import annotations

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import (
    EPILOGUE_OPS,
    ConvInputs,
    epilogue_expr,
    fits_registers,
    own_shapes,
)
from woodpecker.engines.halide.template_parts import compiled
from woodpecker.tasks.separable import SeparableTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "sepconv"


def supports(task: SeparableTask) -> bool:
    d, p = task.depthwise, task.pointwise
    return task.dtype == "float32" and d.groups == d.c == d.k \
        and all(s[0] in EPILOGUE_OPS and s[0] != "Add" for s in d.epilogue) \
        and all(s[0] in EPILOGUE_OPS for s in p.epilogue)


# The genetic search's first candidates: conv_direct's usual register tiles (16 or 24 output
# channels by 4-6 pixels), strips of 2 rows, 16-lane depthwise rows of 4 pixels; then 8 lanes
# for layers of fewer than 16 channels; then the depthwise result at the root, for small images.
SEEDS = tuple({"vec": vec, "co_block": cb, "x_block": xb, "co_outer": False,
               "rows": 1 if at == "root" else 2, "dw_vec": dw_vec, "dw_x": 4, "pad": "inline",
               "dw_at": at}
              for vec, cb, xb, dw_vec, at in ((16, 1, 6, 16, "strip"), (8, 2, 6, 16, "strip"),
                                              (8, 3, 4, 16, "strip"), (16, 2, 4, 16, "strip"),
                                              (8, 1, 6, 8, "strip"), (16, 1, 7, 16, "root")))


def space(task: SeparableTask, vector_registers: int = 16) -> KnobSpace:
    d, p = task.depthwise, task.pointwise
    knobs = [Knob("vec", (4, 8, 16)), Knob("co_block", (1, 2, 3, 4)),
             Knob("x_block", (1, 2, 3, 4, 5, 6, 7, 8)), Knob("co_outer", (False, True)),
             Knob("rows", (1, 2, 4, 8, 16)), Knob("dw_vec", (8, 16)),
             Knob("dw_x", (1, 2, 4, 8)), Knob("pad", ("inline", "strip")),
             Knob("dw_at", ("strip", "root"))]
    # Tiles shift inwards at the edges (see conv_direct), so none may exceed what it covers.
    constraints = [
        fits_registers(vector_registers, "co_block", 1),
        Constraint("channel tile within the output channels",
                   lambda c: c["vec"] * c["co_block"] <= p.k),
        Constraint("pixel tiles within the output row",
                   lambda c: c["x_block"] <= p.out_w and c["dw_x"] <= p.out_w),
        Constraint("strip within the output rows", lambda c: c["rows"] <= p.out_h),
        Constraint("depthwise lanes within the channels", lambda c: c["dw_vec"] <= d.c),
        Constraint("a depthwise result at the root has no strips",
                   lambda c: c["dw_at"] == "strip" or (c["rows"] == 1 and not c["co_outer"]
                                                       and c["pad"] == "inline")),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


views = own_shapes


def build(task: SeparableTask, config: dict, threads: int = 2) -> AotKernel:
    """Compile `task` with `config`; run(*arrays) takes `SeparableTask.random_inputs`' order."""
    hl = halide_module()
    d, p = task.depthwise, task.pointwise
    dio, pio = ConvInputs(hl, d), ConvInputs(hl, p, prefix="p")
    c, x, y, n = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n")
    (sy, sx), (dy, dx) = d.stride, d.dilation
    e = dio.bias(c)
    for ky in range(d.kh):
        for kx in range(d.kw):
            e = e + dio.w[c, 0, kx, ky] * dio.padded[
                c, x * sx + kx * dx - d.pads[1], y * sy + ky * dy - d.pads[0], n]
    dw = hl.Func("dw")
    dw[c, x, y, n] = epilogue_expr(hl, e, d.epilogue, [], (c, x, y, n))
    r = hl.RDom([(0, d.c)])
    acc = hl.Func("acc")
    acc[c, x, y, n] = pio.bias(c)
    acc[c, x, y, n] += pio.w[c, r.x, 0, 0] * dw[r.x, x, y, n]
    out = pio.output(acc[c, x, y, n], (c, x, y, n))
    _schedule(hl, out, acc, dw, dio.padded, (c, x, y, n), r.x, config)
    return compiled(__name__, task, config, threads, out, dio.params + pio.params[1:])


def _schedule(hl, out, acc, dw, padded, axes, rc, config: dict) -> None:
    c, x, y, n = axes
    vec, root = config["vec"], config["dw_at"] == "root"
    tail = hl.TailStrategy.ShiftInwards
    co, ci, xo, xi, yo, yi = (hl.Var(v) for v in ("co", "ci", "xo", "xi", "yo", "yi"))
    out.split(c, co, ci, vec * config["co_block"], tail).split(x, xo, xi, config["x_block"], tail)
    out.vectorize(ci, vec).unroll(ci).unroll(xi)
    if root:
        out.reorder(ci, xi, xo, y, co, n).fuse(co, n, co).parallel(co)
        acc.compute_at(out, xo)
    else:
        out.split(y, yo, yi, config["rows"], tail)
        if config["co_outer"]:
            out.reorder(ci, xi, xo, co, yi, yo, n)
            acc.compute_at(out, xo)
        else:
            out.reorder(ci, xi, co, xo, yi, yo, n)
            acc.compute_at(out, co)
        out.fuse(yo, n, yo).parallel(yo)
    acc.vectorize(c, vec).unroll(c).unroll(x)
    acc.update().reorder(c, x, rc).vectorize(c, vec).unroll(c).unroll(x)
    dc, dci, dxo, dxi = (hl.Var(v) for v in ("dc", "dci", "dxo", "dxi"))
    if root:
        dw.compute_root().parallel(y)
    else:
        dw.compute_at(out, yo)
    dw.split(c, dc, dci, config["dw_vec"], tail).split(x, dxo, dxi, config["dw_x"], tail)
    dw.reorder(dci, dxi, dc, dxo, y, n).vectorize(dci).unroll(dxi)
    if config["pad"] == "strip":
        padded.compute_at(out, yo).vectorize(padded.args()[0], config["dw_vec"])
