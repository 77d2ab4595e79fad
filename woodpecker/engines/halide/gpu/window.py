"""The GPU schedule of per-channel window reductions — pools and depthwise convs: no reduction
over channels, so both are bound by memory traffic and share one loop nest.

Threads along the channels read consecutive addresses (NHWC: channels innermost), so a warp's
loads coalesce; each thread reduces `reg_x` neighbouring windows of a row in registers (the
taps their windows share come through the cache), blocks over channel tiles, pixel tiles and
rows × images. Knobs: `threads_c` × `threads_x` threads per block, `reg_x` windows per thread,
`unroll_window` (the window's taps unrolled; windows of at most 25 taps).
"""

from __future__ import annotations

from woodpecker.engines.halide.gpu.mapping import gpu_constraints
from woodpecker.gpu.devices import GpuDevice
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

SEEDS = ({"threads_c": 32, "threads_x": 4, "reg_x": 2, "unroll_window": True},
         {"threads_c": 32, "threads_x": 1, "reg_x": 1, "unroll_window": False})
MAX_UNROLLED_TAPS = 25


def space(task, device: GpuDevice) -> KnobSpace:
    """`task`: a pool or depthwise conv task (c, kh, kw, out_w)."""
    knobs = [Knob("threads_c", (8, 16, 32, 64, 128)), Knob("threads_x", (1, 2, 4, 8)),
             Knob("reg_x", (1, 2, 4)), Knob("unroll_window", (False, True))]
    constraints = [
        *gpu_constraints(device, lambda c: c["threads_c"] * c["threads_x"],
                         registers=lambda c: 2 * c["reg_x"]),
        Constraint("the block's channels within the channels",
                   lambda c: c["threads_c"] <= max(task.c, 32)),
        Constraint("the block's pixels within the row",
                   lambda c: c["threads_x"] * c["reg_x"] <= task.out_w),
        Constraint("a small window to unroll",
                   lambda c: not c["unroll_window"] or task.kh * task.kw <= MAX_UNROLLED_TAPS),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


def schedule(hl, config: dict, mapping, out, acc, r, axes) -> None:
    """Map `out` (over `axes` c, ox, oy, n) and its window reduction `acc` over `r`."""
    c, ox, oy, n = axes
    cb, xb, ct, xt, xr = (hl.Var(v) for v in ("cb", "xb", "ct", "xt", "xr"))
    guard, shift = hl.TailStrategy.GuardWithIf, hl.TailStrategy.ShiftInwards
    out.split(c, cb, ct, config["threads_c"], guard)
    out.split(ox, xb, xt, config["threads_x"] * config["reg_x"], shift)
    out.split(xt, xt, xr, config["reg_x"], shift)
    out.reorder(xr, ct, xt, cb, xb, oy, n).fuse(oy, n, oy)
    mapping.blocks(out, cb, xb, oy)
    mapping.threads(out, ct, xt)
    out.unroll(xr)
    acc.compute_at(out, xt).unroll(ox)
    upd = acc.update().reorder(ox, r[0], r[1]).unroll(ox)
    if config["unroll_window"]:
        upd.unroll(r[0]).unroll(r[1])
