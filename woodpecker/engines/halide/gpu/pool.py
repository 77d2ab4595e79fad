"""Max and average pooling (global average pooling included), NHWC, on a GPU.

Algorithm: pool.py's (`pool.define`, shared): the maximum (NaN-skipping, −∞ outside the
image) or the mean over the taps that count of each (kh × kw) window. Bound by memory
traffic: threads along the channels read consecutive addresses (NHWC: channels innermost), so
a warp's loads coalesce; each thread reduces `reg_x` neighbouring windows of a row in registers
(sharing the taps their windows overlap through the cache), blocks over channel tiles, pixel
tiles and rows × images. A global pool is one window per image: its threads along the
channels, `reg_x` = 1.
"""

from __future__ import annotations

from woodpecker.engines.halide.conv_common import own_shapes
from woodpecker.engines.halide.gpu.mapping import gpu_constraints
from woodpecker.engines.halide.pool import define as define_pool
from woodpecker.gpu.devices import GpuDevice
from woodpecker.tasks.pool import PoolTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "pool"

SEEDS = ({"threads_c": 32, "threads_x": 4, "reg_x": 2, "unroll_window": True},
         {"threads_c": 32, "threads_x": 1, "reg_x": 1, "unroll_window": False})
MAX_UNROLLED_TAPS = 16


def supports(task: PoolTask) -> bool:
    return task.dtype == "float32"


def space(task: PoolTask, device: GpuDevice) -> KnobSpace:
    knobs = [Knob("threads_c", (8, 16, 32, 64, 128)), Knob("threads_x", (1, 2, 4, 8)),
             Knob("reg_x", (1, 2, 4)), Knob("unroll_window", (False, True))]
    constraints = [
        *gpu_constraints(device, lambda c: c["threads_c"] * c["threads_x"],
                         registers=lambda c: 2 * c["reg_x"]),
        Constraint("the block's channels within the channels", lambda c: c["threads_c"] <= max(
            task.c, 32)),
        Constraint("the block's pixels within the row",
                   lambda c: c["threads_x"] * c["reg_x"] <= task.out_w),
        Constraint("a small window to unroll",
                   lambda c: not c["unroll_window"] or task.kh * task.kw <= MAX_UNROLLED_TAPS),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


views = own_shapes


def arguments(task: PoolTask, config: dict, inputs: list) -> list:
    return list(inputs)


def define(hl, task: PoolTask, config: dict, mapping):
    d = define_pool(hl, task)
    c, ox, oy, n = d.axes
    cb, xb, ct, xt, xr = (hl.Var(v) for v in ("cb", "xb", "ct", "xt", "xr"))
    guard, shift = hl.TailStrategy.GuardWithIf, hl.TailStrategy.ShiftInwards
    d.out.split(c, cb, ct, config["threads_c"], guard)
    d.out.split(ox, xb, xt, config["threads_x"] * config["reg_x"], shift)
    d.out.split(xt, xt, xr, config["reg_x"], shift)
    d.out.reorder(xr, ct, xt, cb, xb, oy, n).fuse(oy, n, oy)
    mapping.blocks(d.out, cb, xb, oy)
    mapping.threads(d.out, ct, xt)
    d.out.unroll(xr)
    d.acc.compute_at(d.out, xt).unroll(ox)
    upd = d.acc.update().reorder(ox, d.r[0], d.r[1]).unroll(ox)
    if config["unroll_window"]:
        upd.unroll(d.r[0])
    return d.out, [d.x]
