"""Schedule pieces shared by the conv templates: the register-tiled, vectorised output with the
reduction computed into each tile, the padded-input strategy, and the compiled kernel."""

from __future__ import annotations

from woodpecker.engines.halide.aot import AotKernel, compile_kernel

PARALLEL = ("rows", "rows_co", "co")


def register_tile(hl, out, acc, axes, rvars, vec: int, c_block: int, x_block: int,
                  parallel: str):
    """Tile `out` (axes: channel, x, y, n) into (c_block vectors × x_block pixels) register
    tiles and compute `acc` (the reduction over `rvars`) into each tile; returns acc's update
    stage for template-specific unrolling.

    `parallel`: `rows` — channel tiles inside each pixel tile, rows in parallel; `rows_co` —
    channel tiles × rows in parallel; `co` — channel tiles outermost and parallel, so one tile's
    weights stay in cache across every pixel. Tiles shift inwards at the edges, so every tile
    has a constant size and its loops can be unrolled."""
    c, ox, oy, n = axes
    co, ci, xo, xi = hl.Var("co"), hl.Var("ci"), hl.Var("xo"), hl.Var("xi")
    tail = hl.TailStrategy.ShiftInwards
    out.split(c, co, ci, vec * c_block, tail).split(ox, xo, xi, x_block, tail)
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
    acc.vectorize(c, vec).unroll(c).unroll(ox)
    return acc.update().reorder(c, ox, *rvars).vectorize(c, vec).unroll(c).unroll(ox)


def pad_input(padded, mode: str, channels: int = 0, skew: int = 0) -> None:
    """`root`: materialise the zero-padded input once per call (rows in parallel); `inline`:
    bounds-check every access instead. `skew` extra (zero) channels make the materialised
    pixel stride other than a power of two: with 256+ channels the pixels a register tile reads
    are otherwise 1-2 KiB apart and all fall in the same few L1 sets."""
    if mode == "root":
        padded.compute_root().parallel(padded.args()[2])
        if skew:
            padded.bound(padded.args()[0], 0, channels + skew)


def compiled(template: str, task, config: dict, threads: int, out, params) -> AotKernel:
    """The ahead-of-time kernel of `out` (cached by template, config, task and target); it
    takes numpy arrays in `params` order and returns the NHWC output."""
    key = {"template": template, "config": config, "task": task.key}
    path = compile_kernel(out, params, key)
    return AotKernel(path, len(params), (task.n, task.out_h, task.out_w, task.k), threads)
