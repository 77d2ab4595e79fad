"""Depthwise 2-d convolution (groups = input channels = output channels), NHWC, with the fused
epilogue in the same kernel.

Algorithm: out[c, x, y, n] = act(b[c] + Σ_{kx,ky} w[c, 0, kx, ky] · in[c, x·s+kx·d−p,
y·s+ky·d−p, n] + residual), Halide dimension order (numpy NHWC input, HW1C weights). There is
no reduction over channels, so the kernel is bound by memory traffic: the schedule vectorises
channels, keeps a (c_block vectors × x_block pixels) tile of accumulators in registers, and
reuses each loaded input vector across the kernel window of neighbouring output pixels.

Knobs: `vec` lanes, `c_block` channel vectors and `x_block` pixels per register tile (bounded
by the vector registers), `parallel` and `pad` (see schedule.py: `tile` pads one channel tile
at a time in L1), `unroll_k` (unroll the kernel window).
"""

from __future__ import annotations

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import (
    EPILOGUE_OPS,
    ConvInputs,
    own_shapes,
    window_space,
)
from woodpecker.engines.halide.template_parts import compiled, pad_input, register_tile
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.space import KnobSpace

KIND = "conv2d"


def supports(task: ConvTask) -> bool:
    return task.groups == task.c == task.k and task.groups > 1 and task.dtype == "float32" \
        and all(step[0] in EPILOGUE_OPS for step in task.epilogue)


# The genetic search's first candidates. First, per-tile padding (see schedule.TILE_PAD),
# the fastest of a grid on MnasNet's 3×3 and 5×5 layers (Zen 4, 2 threads): 16-lane tiles of 4
# pixels at 7² to 14², 8-lane ones on 72 channels (16 does not divide them); then a whole 7-pixel
# row inline, fastest on 72 channels at 56² with stride 2. Then the fastest of a 48-config grid
# on mobilenet_v2's depthwise layers (112² to 7², 32 to 960 channels): channel tiles in
# parallel, bounds checked inline, the window unrolled; 3-4x faster than what 2 minutes of
# search had found there. Then the fastest of a 72-config grid on the stride-2 layers, timed
# after evicting the caches as in a plan: on 96 channels at 112² rows in parallel (each pixel's
# channels read together) took 0.19 ms against 0.30 for the first seed.
SEEDS = tuple({"vec": vec, "c_block": 1, "x_block": x_block, "parallel": parallel,
               "pad": pad, "unroll_k": True}
              for vec, x_block, parallel, pad in ((16, 4, "co", "tile"), (8, 4, "co", "tile"),
                                                  (8, 7, "co", "inline"), (16, 2, "co", "inline"),
                                                  (16, 2, "rows", "inline")))


def space(task: ConvTask, vector_registers: int = 16) -> KnobSpace:
    return window_space(task, vector_registers, seeds=SEEDS)


def weights(task: ConvTask, config: dict, w):
    """The kernel reads the HW1C weights as they are."""
    return w


views = own_shapes


def define(hl, task: ConvTask):
    """The algorithm (module docstring) without a schedule (shared with gpu/depthwise.py):
    (inputs, out, acc, the window's RDom, the output's axes)."""
    io = ConvInputs(hl, task)
    c, ox, oy, n = hl.Var("c"), hl.Var("ox"), hl.Var("oy"), hl.Var("n")
    r = hl.RDom([(0, task.kw), (0, task.kh)])
    (sy, sx), (dy, dx) = task.stride, task.dilation
    acc = hl.Func("acc")
    acc[c, ox, oy, n] = io.bias(c)
    acc[c, ox, oy, n] += io.w[c, 0, r.x, r.y] * io.padded[
        c, ox * sx + r.x * dx - task.pads[1], oy * sy + r.y * dy - task.pads[0], n]
    out = io.output(acc[c, ox, oy, n], (c, ox, oy, n))
    return io, out, acc, r, (c, ox, oy, n)


def build(task: ConvTask, config: dict, threads: int = 2) -> AotKernel:
    """Compile `task` with `config`; run(*arrays) takes `ConvTask.random_inputs`'s order."""
    hl = halide_module()
    io, out, acc, r, (c, ox, oy, n) = define(hl, task)
    upd = register_tile(hl, out, acc, (c, ox, oy, n), (r.x, r.y), config["vec"],
                        config["c_block"], config["x_block"], config["parallel"])
    if config["unroll_k"]:
        upd.unroll(r.x).unroll(r.y)
    pad_input(io.padded, config["pad"], tile=(out, hl.Var("co"), config["vec"]))
    return compiled(__name__, task, config, threads, out, io.params)
