"""Max and average pooling over 2-d windows, NHWC (global average pooling is the window that
covers the image).

Algorithm: out[c, x, y, n] = reduce_{kx,ky} in[c, x·s+kx·d−p, y·s+ky·d−p, n] — the maximum,
with −∞ outside the image (the type's minimum over 8-bit integers), or the sum, with 0 outside,
divided by the taps that count (inside the image, or inside the explicit pads with
`count_include_pad`; taps added by `ceil_mode` never count). Like depthwise convolution it is
bound by memory traffic, so it takes the same schedule: channel vectors × a row of pixels
accumulated in registers, the window reduced into each tile (schedule.register_tile).

Knobs: `vec` lanes, `c_block` channel vectors, `x_block` pixels per tile, `parallel` (see
schedule.py), `pad` (materialise the padded input, or bounds-check inline), `unroll_k` (unroll
the window's rows; only for windows of at most 16 taps).
"""

from __future__ import annotations

from dataclasses import dataclass

from woodpecker.engines.halide import ieee
from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import own_shapes, window_space
from woodpecker.engines.halide.template_parts import (
    compiled,
    halide_type,
    pad_input,
    register_tile,
    stored,
)
from woodpecker.tasks.pool import PoolTask
from woodpecker.tasks.space import Constraint, KnobSpace

KIND = "pool"
MAX_UNROLLED_TAPS = 16


_INTEGER = ("uint8", "int8")


def supports(task: PoolTask) -> bool:
    """float32 pools, and max pools over 8-bit integers (a quantized model's, see
    passes/fold_qdq.py), over whole 4-channel groups."""
    return (task.dtype == "float32" or (task.reduce == "max" and task.dtype in _INTEGER)) \
        and task.c % 4 == 0


def space(task: PoolTask, vector_registers: int = 16) -> KnobSpace:
    return window_space(task, vector_registers, (
        Constraint("a small window to unroll",
                   lambda c: not c["unroll_k"] or task.kh * task.kw <= MAX_UNROLLED_TAPS),
        Constraint("padding to materialise", lambda c: c["pad"] == "inline" or _padded(task)),
    ))


views = own_shapes


def _padded(task: PoolTask) -> bool:
    """Whether some window reads outside the image (explicit pads, or ceil_mode's last one)."""
    (sy, sx), (dy, dx) = task.stride, task.dilation
    last_y = (task.out_h - 1) * sy + (task.kh - 1) * dy - task.pads[0]
    last_x = (task.out_w - 1) * sx + (task.kw - 1) * dx - task.pads[1]
    return any(task.pads[:2]) or last_y >= task.h or last_x >= task.w


def _count(hl, task: PoolTask, ox, oy, padded: bool):
    """The number of taps that count in window (ox, oy): a constant when no window leaves the
    image (`padded` false), else the taps inside the counted region."""
    if not padded:
        return hl.f32(task.kh * task.kw)
    (sy, sx), (dy, dx) = task.stride, task.dilation
    top, left, bottom, right = task.pads if task.count_include_pad else (0, 0, 0, 0)
    r = hl.RDom([(0, task.kw), (0, task.kh)])
    ix = ox * sx + r[0] * dx - task.pads[1]
    iy = oy * sy + r[1] * dy - task.pads[0]
    inside = (ix >= -left) & (ix < task.w + right) & (iy >= -top) & (iy < task.h + bottom)
    count = hl.Func("count")
    count[ox, oy] = hl.f32(0.0)
    count[ox, oy] += hl.select(inside, hl.f32(1.0), hl.f32(0.0))
    count.compute_root()
    return count[ox, oy]


@dataclass
class PoolDefinition:
    """The pool's algorithm, for a schedule to map: `out` over (c, ox, oy, n), the window
    reduction `acc` over `r`, the input parameter `x` and its bounded form `padded` (x itself
    when no window leaves the image: `leaves` false)."""

    out: object
    acc: object
    r: object
    axes: tuple
    x: object
    padded: object
    leaves: bool


def define(hl, task: PoolTask) -> PoolDefinition:
    """The algorithm (module docstring), without a schedule (shared with gpu/pool.py)."""
    integer = task.dtype in _INTEGER
    if integer:
        x = read = hl.ImageParam(halide_type(hl, task.dtype), 4, "x")
    else:                   # float32, or a GPU plan's float16 read as float32
        x, read = stored(hl, task.dtype, 4, "x")
    is_max = task.reduce == "max"
    # max: NaN fill and a NaN-skipping max (the reference's np.fmax, see ops/pool.py); over
    # integers the type's minimum and a plain max
    fill = x.type().min() if integer else hl.f32(float("nan")) if is_max else hl.f32(0.0)
    # No window leaves the image (global pools, valid windows): read x without bounds checks.
    leaves = _padded(task)
    bounds = [(0, task.c), (0, task.w), (0, task.h)]
    padded = hl.BoundaryConditions.constant_exterior(read, fill, bounds) if leaves else read
    c, ox, oy, n = hl.Var("c"), hl.Var("ox"), hl.Var("oy"), hl.Var("n")
    r = hl.RDom([(0, task.kw), (0, task.kh)])
    (sy, sx), (dy, dx) = task.stride, task.dilation
    tap = padded[c, ox * sx + r[0] * dx - task.pads[1], oy * sy + r[1] * dy - task.pads[0], n]
    acc = hl.Func("acc")
    acc[c, ox, oy, n] = fill
    acc[c, ox, oy, n] = hl.max(acc[c, ox, oy, n], tap) if integer else \
        ieee.fmax(hl, acc[c, ox, oy, n], tap) if is_max else acc[c, ox, oy, n] + tap
    out = hl.Func("out")
    out[c, ox, oy, n] = acc[c, ox, oy, n] if is_max else \
        acc[c, ox, oy, n] / _count(hl, task, ox, oy, leaves)
    return PoolDefinition(out, acc, r, (c, ox, oy, n), x, padded, leaves)


def build(task: PoolTask, config: dict, threads: int = 2) -> AotKernel:
    hl = halide_module()
    d = define(hl, task)
    upd = register_tile(hl, d.out, d.acc, d.axes, (d.r[0], d.r[1]), config["vec"],
                        config["c_block"], config["x_block"], config["parallel"])
    if config["unroll_k"]:
        upd.unroll(d.r[0])
    if d.leaves:
        pad_input(d.padded, config["pad"], tile=(d.out, hl.Var("co"), config["vec"]))
    return compiled(__name__, task, config, threads, d.out, [d.x])
