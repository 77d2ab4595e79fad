"""GEMM-style 2-d convolution, NHWC: output pixels flattened to one axis and the input gathered
into im2col panels, then a register-blocked matrix product with the fused epilogue.

Algorithm (Halide's innermost-first order): out[co, p, n] = act(b[co] + Σ_{ci,kx,ky}
W[co, (ky·kw + kx)·C + ci] · col[ci, kx, ky, p, n] + residual), where p = oy·OW + ox runs over
all output pixels and col[ci, kx, ky, p, n] = in[ci, ox·s + kx·d − pad, oy·s + ky·d − pad, n]
is the im2col matrix. The output and residuals are the NHWC arrays viewed as (N, H·W, K).

Why a second conv template (Woodpecker-DL §2.2 tunes several per op): the direct template tiles
pixels within a row, so a 7- or 14-pixel row leaves part tiles, and a strided layer reads its
input pixels `stride` apart. Here register tiles run across row ends, and the `col` panel
gathers a strided or padded window once into contiguous memory that every channel tile then
reuses — the GotoBLAS/oneDNN gemm-conv structure (pack the activation panel, stream packed
weight panels through a register-blocked micro-kernel).

Knobs: `vec` lanes, `co_block` vectors of output channels and `x_block` pixels per register
tile; `panel` register tiles of pixels per im2col panel (channel tiles loop inside a panel, so a
panel is gathered once and a weight panel is reused across its pixel tiles); `col` — `panel`
(gather per panel), `root` (the whole im2col matrix first) or `inline` (read the padded input
directly); `parallel` — `p` (panels in parallel) or `co` (channel tiles outermost, parallel);
`pad` (materialise the zero-padded input, or bounds-check inline); `unroll_kw`. Weights are
always packed per channel tile, (⌈K/T⌉, kh·kw·C, T) in numpy for tile T. When T does not divide K
the weights are zero-padded to whole tiles and the last tile's stores are masked: ShuffleNet's 58,
116 and 232 channels and SqueezeNet's 1000-class conv otherwise allowed only 4- or 8-lane tiles
(one vector of accumulators per pixel, load-bound: a broadcast and a weight load per FMA).
"""

from __future__ import annotations

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import (
    ConvInputs,
    dense_conv,
    fits_registers,
    flat_views,
    packable,
    packed_weights,
    scale_knob,
)
from woodpecker.engines.halide.template_parts import aligned_channel_tiles, compiled, pad_input
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "conv2d"


supports = dense_conv


# The genetic search's first candidates. The first: the best record of most of resnet18's 3×3
# layers in earlier tuning (2 vectors × 5 pixels of accumulators, im2col inlined, kw unrolled).
# The others: the fastest of a 24-config grid on mobilenet_v2's pointwise (1×1) layers — many
# pixels (112², 56²: panels of 4 tiles in parallel) and many channels (7², 320→1280 and
# 960→160: channel tiles in parallel), at 80-138 GFLOP/s where 2 minutes of search had found
# 30-60 (the space holds ~10^4 configs; a short budget compiles a few dozen). The last three:
# the fastest of a 36-config grid timed after evicting the caches, as in a plan, on the
# projection layers (144->24 at 56², 960->160 and 320->1280 at 7²): 4-5 pixel tiles of 2-3
# channel vectors, one tile per panel, at 100-127 GFLOP/s where the seeds above ran 50-80.
_SEED_KNOBS = ("vec", "co_block", "x_block", "panel", "parallel", "pad", "unroll_kw")
SEEDS = tuple({**dict(zip(_SEED_KNOBS, values)), "col": "inline"} for values in (
    (16, 1, 5, 1, "co", "root", True),
    (8, 2, 6, 4, "p", "inline", False),
    (16, 1, 6, 1, "co", "inline", False),
    (8, 1, 6, 4, "p", "inline", False),
    (8, 3, 4, 1, "p", "inline", False),
    (8, 2, 5, 1, "p", "inline", False),
    (8, 2, 4, 1, "co", "inline", False)))


def space(task: ConvTask, vector_registers: int = 16) -> KnobSpace:
    pixels = task.out_h * task.out_w
    knobs = [Knob("vec", (4, 8, 16)), Knob("co_block", (1, 2, 3, 4)),
             Knob("x_block", (1, 2, 3, 4, 5, 6, 7, 8)), Knob("panel", (1, 2, 4, 8, 16)),
             Knob("col", ("panel", "root", "inline")), Knob("parallel", ("p", "co")),
             Knob("pad", ("root", "inline")), Knob("unroll_kw", (False, True))]
    constraints = [
        fits_registers(vector_registers, "co_block", 1),
        Constraint("channel tiles padded by less than a vector or a third of the channels",
                   lambda c: packable(task.k, c["vec"] * c["co_block"], c["vec"])),
        Constraint("panel within the output pixels",
                   lambda c: c["x_block"] * c["panel"] <= pixels),
        Constraint("per-panel gathering needs panels in parallel",
                   lambda c: c["col"] != "panel" or c["parallel"] == "p"),
    ]
    knobs, seeds = scale_knob(task, knobs, SEEDS)
    return KnobSpace(knobs, constraints, seeds)


def weights(task: ConvTask, config: dict, w):
    """HWIO weights packed per channel tile (`conv_common.packed_weights`)."""
    return packed_weights(w, config["vec"] * config["co_block"])


views = flat_views   # NHWC residuals and output read as (N, H·W, K) (see aot.AotKernel)


def build(task: ConvTask, config: dict, threads: int = 2) -> AotKernel:
    """Compile `task` with `config`; run(*arrays) takes `kernel_arguments`' order."""
    hl = halide_module()
    tile, vec, xb = config["vec"] * config["co_block"], config["vec"], config["x_block"]
    io = ConvInputs(hl, task, weight_dims=3, out_dims=3,
                    scale_weights=config.get("scale") == "weights")
    # [lane, (ky · kw + kx) · C + ci, tile]
    w = io.weights(lambda args: args[1] % task.c, vec)
    co, p, n = hl.Var("co"), hl.Var("p"), hl.Var("n")
    ci, kx, ky = hl.Var("ci"), hl.Var("kx"), hl.Var("ky")
    (sy, sx), (dy, dx), ow = task.stride, task.dilation, task.out_w
    col = hl.Func("col")
    col[ci, kx, ky, p, n] = io.padded[ci, (p % ow) * sx + kx * dx - task.pads[1],
                                      (p / ow) * sy + ky * dy - task.pads[0], n]
    r = hl.RDom([(0, task.c), (0, task.kw), (0, task.kh)])
    cl, cot = hl.Var("cl"), hl.Var("cot")
    acc = hl.Func("acc")
    whole = task.k % tile == 0
    # A padded last tile would read the bias past its end: add it at the output instead.
    acc[cl, p, cot, n] = io.bias(cot * tile + cl) if whole else hl.f32(0.0)
    acc[cl, p, cot, n] += w[cl, (r[2] * task.kw + r[1]) * task.c + r[0], cot] * \
        col[r[0], r[1], r[2], p, n]
    acc.bound(cl, 0, tile)
    value = acc[co % tile, p, co // tile, n]
    out = io.output(value if whole else value + io.bias(co), (co, p, n))

    pp, pi, pt, px = hl.Var("pp"), hl.Var("pi"), hl.Var("pt"), hl.Var("px")
    oco, oci = hl.Var("oco"), hl.Var("oci")
    tail = hl.TailStrategy.ShiftInwards
    aligned_channel_tiles(hl, out, co, oco, oci, tile, whole)
    out.split(p, pp, pi, xb * config["panel"], tail) \
        .split(pi, pt, px, xb, tail)
    out.vectorize(oci, vec).unroll(oci).unroll(px)
    if config["parallel"] == "p":
        out.reorder(oci, px, pt, oco, pp, n).parallel(pp)
    else:
        out.reorder(oci, px, pt, pp, oco, n).parallel(oco)
    acc.compute_at(out, pt).vectorize(cl, vec).unroll(cl).unroll(p)
    upd = acc.update().reorder(cl, p, r[0], r[1], r[2]).vectorize(cl, vec).unroll(cl).unroll(p)
    if config["unroll_kw"]:
        upd.unroll(r[1])
    if config["col"] == "panel":
        col.compute_at(out, pp).vectorize(ci, vec, hl.TailStrategy.GuardWithIf)
    elif config["col"] == "root":
        col.compute_root().parallel(p, max(1, xb * config["panel"])) \
            .vectorize(ci, vec, hl.TailStrategy.GuardWithIf)
    pad_input(io.padded, config["pad"])
    return compiled(__name__, task, config, threads, out, io.params, views(task))
