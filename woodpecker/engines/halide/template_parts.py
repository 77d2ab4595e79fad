"""Schedule pieces shared by the templates: the register-tiled, vectorised output with the
reduction computed into each tile, the padded-input strategy, and the compiled kernel."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np

from woodpecker.engines.halide.aot import AotKernel, compile_kernel

PARALLEL = ("rows", "rows_co", "co")


def register_tile(hl, out, acc, axes, rvars, vec: int, c_block: int, x_block: int,
                  parallel: str, acc_c=None, aligned: bool = False):
    """Tile `out` (axes: channel, x, y, n) into (c_block vectors × x_block pixels) register
    tiles and compute `acc` (the reduction over `rvars`) into each tile; returns acc's update
    stage for template-specific unrolling.

    `parallel`: `rows` — channel tiles inside each pixel tile, rows in parallel; `rows_co` —
    channel tiles × rows in parallel; `co` — channel tiles outermost and parallel, so one tile's
    weights stay in cache across every pixel. Tiles shift inwards at the edges, so every tile
    has a constant size and its loops can be unrolled. `acc_c`: acc's channel variable when it
    is not out's (a channel-blocked accumulator); `aligned`: the tile divides the channels, so
    channel tiles start at its multiples (see `aligned_channel_tiles`)."""
    c, ox, oy, n = axes
    ac = c if acc_c is None else acc_c
    co, ci, xo, xi = hl.Var("co"), hl.Var("ci"), hl.Var("xo"), hl.Var("xi")
    tail = hl.TailStrategy.ShiftInwards
    if aligned:
        aligned_channel_tiles(hl, out, c, co, ci, vec * c_block)
    else:
        out.split(c, co, ci, vec * c_block, tail)
    out.split(ox, xo, xi, x_block, tail)
    out.vectorize(ci, vec).unroll(ci).unroll(xi)
    if parallel == "rows_co":
        out.reorder(ci, xi, xo, co, oy, n).fuse(co, oy, oy).parallel(oy)
        acc.compute_at(out, xo)
    elif parallel == "co":
        out.reorder(ci, xi, xo, oy, co, n).parallel(co)
        acc.compute_at(out, xo)
    else:
        out.reorder(ci, xi, co, xo, oy, n).parallel(oy)
        acc.compute_at(out, co)
    acc.vectorize(ac, vec).unroll(ac).unroll(ox)
    return acc.update().reorder(ac, ox, *rvars).vectorize(ac, vec).unroll(ac).unroll(ox)


def aligned_channel_tiles(hl, out, c, co, ci, tile: int, whole: bool = True) -> None:
    """Split `out`'s channels `c` into tiles that start at multiples of `tile`: a
    channel-blocked accumulator (lane, …, tile) is then read with dense vectors. Shifted tiles
    (ShiftInwards) made Halide compute two blocks per tile and gather the output through
    `% tile`. `whole`: the tile divides the channel count; else the last tile's stores are
    masked (its blocks zero-padded)."""
    out.output_buffer().dim(0).set_min(0)
    out.split(c, co, ci, tile, hl.TailStrategy.RoundUp if whole else hl.TailStrategy.GuardWithIf)


# Why `tile` padding (for per-channel window kernels: depthwise convs, pools): inline bounds
# checks cost a select on every tap, and with 5×5 windows on 7² to 28² images nearly every
# output pixel is a border pixel, so Halide's loop partitioning finds no inner region to free
# of them; `root` instead copies the whole padded image in a pass of its own. A channel tile's
# padded image (e.g. 16 channels of 11×11 pixels, 7.7 KiB) is written and read again in L1.
# Measured (2 threads, Zen 4): MnasNet's 5×5 depthwise conv on 1152 channels at 7² ran
# 0.034 ms against 0.056 inline and 0.067 root; 480 channels at 14², 0.042 against 0.072.
TILE_PAD = "tile"


def pad_input(padded, mode: str, channels: int = 0, skew: int = 0, tile=None) -> None:
    """`root`: materialise the zero-padded input once per call (rows in parallel); `inline`:
    bounds-check every access instead; `tile`: materialise, per parallel channel tile, just
    that tile's channels of the padded image (`tile` = (out Func, its channel-tile Var, lanes),
    see `TILE_PAD`). `skew` extra (zero) channels make the materialised pixel stride other
    than a power of two: with 256+ channels the pixels a register tile reads are otherwise
    1-2 KiB apart and all fall in the same few L1 sets."""
    if mode == "root":
        padded.compute_root().parallel(padded.args()[2])
        if skew:
            padded.bound(padded.args()[0], 0, channels + skew)
    elif mode == TILE_PAD:
        out, var, lanes = tile
        padded.compute_at(out, var).vectorize(padded.args()[0], lanes)


@functools.cache
def source_digest() -> str:
    """A digest of the Halide engine's source: a changed algorithm or schedule must not reuse
    kernels compiled from the old code."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def compiled(template: str, task, config: dict, threads: int, out, params,
             views=None) -> AotKernel:
    """The ahead-of-time kernel of `out` (cached by template, config, task, engine source and
    target); it takes numpy arrays in `params` order and returns the task's output (its
    `out_shape`: NHWC for convs and pools, (batch, M, N) for dense products). `views`: the
    shapes Halide sees the arguments as (see AotKernel)."""
    key = {"template": template, "config": config, "task": task.key, "source": source_digest()}
    path = compile_kernel(out, params, key)
    return AotKernel(path, len(params), task.out_shape, threads, views=views,
                     out_dtype=getattr(task, "out_dtype", "float32"))


def uint8_padded(hl, task, x, x_zp):
    """An int8 conv's input (tasks/qconv.py) as uint8 (int8 offset by 128, as the weights'
    sums are corrected for) outside which the input's zero point extends: (c, x, y, n)."""
    c, px, py, n = hl.Var("c"), hl.Var("px"), hl.Var("py"), hl.Var("n")
    u = hl.Func("u")
    u[c, px, py, n] = x[c, px, py, n] if task.x_dtype == "uint8" else \
        hl.u8(hl.i16(x[c, px, py, n]) + 128)
    return hl.BoundaryConditions.constant_exterior(
        u, x_zp[0], [(0, task.c), (0, task.w), (0, task.h), (0, task.n)])


def halide_type(hl, dtype: str):
    """The Halide type of a task's element type name (float32, float16, uint8, int8)."""
    return {"float32": hl.Float(32), "float16": hl.Float(16), "uint8": hl.UInt(8),
            "int8": hl.Int(8)}[dtype]


def stored(hl, dtype: str, dims: int, name: str):
    """A float kernel argument stored in `dtype`: (its ImageParam, what the algorithm reads) —
    the parameter itself for float32, its values widened to float32 for float16 (a GPU
    plan's half-precision storage, computed in float32)."""
    param = hl.ImageParam(halide_type(hl, dtype), dims, name)
    if dtype != "float16":
        return param, param
    at = [hl.Var(f"{name}_{i}") for i in range(dims)]
    read = hl.Func(f"{name}_f32")
    read[at] = hl.f32(param[at])
    return param, read


def narrowed(hl, out, dtype: str):
    """The output Func `out` stored in `dtype`: itself for float32, else a Func casting it
    (the one a schedule then maps; `out` is inlined into it)."""
    if dtype != "float16":
        return out
    final = hl.Func(out.name() + "_f16")
    final[out.args()] = hl.cast(hl.Float(16), out[out.args()])
    return final


def padded_channels(vectors: list, k: int, t: int) -> list:
    """Per-channel kernel arguments (an int8 conv's β and μ) zero-padded to whole tiles of `t`
    channels: a kernel computes its last, partial tile whole and masks its stores."""
    kp = -(-k // t) * t
    return [np.pad(v, (0, kp - k)) for v in vectors]
