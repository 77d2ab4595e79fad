"""Resize of a map's rows and columns (nearest or bilinear), NHWC.

Algorithm: out[c, x, y, n] = in[c, x0[x], y0[y], n] (nearest), or the four neighbours
in[c, x0|x1, y0|y1, n] weighted (1 − wx, wx) × (1 − wy, wy) (linear), where (y0, y1, wy) and
(x0, x1, wx) are the task's taps (tasks/resize.ResizeTask.taps, ops.resize.axis_taps: the
reference's own indices and weights), compiled into the kernel as constant tables and clamped
to the map so Halide's bounds stay the map's. Like an element-wise map it is bound by memory
traffic; what is tuned is how the loop is cut.

Knobs: `vec` lanes over the channels, `x_unroll` output pixels per iteration, `parallel` —
output rows in parallel, or the whole map on the calling thread.
"""

from __future__ import annotations

import numpy as np

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import own_shapes
from woodpecker.engines.halide.template_parts import compiled
from woodpecker.tasks.resize import ResizeTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "resize"

SEEDS = ({"vec": 8, "x_unroll": 1, "parallel": True},)


def supports(task: ResizeTask) -> bool:
    return task.dtype == "float32" and task.c >= 4


def space(task: ResizeTask, vector_registers: int = 16) -> KnobSpace:
    knobs = [Knob("vec", (4, 8, 16)), Knob("x_unroll", (1, 2, 4)),
             Knob("parallel", (False, True))]
    constraints = [Constraint("vector within the channels", lambda c: c["vec"] <= task.c),
                   Constraint("unrolled pixels within the row",
                              lambda c: c["x_unroll"] <= task.out_w)]
    return KnobSpace(knobs, constraints, SEEDS)


views = own_shapes


def arguments(task: ResizeTask, config: dict, inputs: list) -> list:
    """The map only: the scales or sizes are the task's, compiled into the kernel."""
    return inputs[:1]


def build(task: ResizeTask, config: dict, threads: int = 2) -> AotKernel:
    hl = halide_module()
    x = hl.ImageParam(hl.Float(32), 4, "x")
    c, ox, oy, n = hl.Var("c"), hl.Var("ox"), hl.Var("oy"), hl.Var("n")
    (y0, y1, wy), (x0, x1, wx) = task.taps()

    def table(values: np.ndarray, name: str, at, last: int | None = None):
        read = hl.Buffer(np.ascontiguousarray(values), name)[at]
        return read if last is None else hl.clamp(read, 0, last)

    rows, cols = (table(y0, "y0", oy, task.h - 1), table(y1, "y1", oy, task.h - 1)), \
        (table(x0, "x0", ox, task.w - 1), table(x1, "x1", ox, task.w - 1))
    # an axis the reference leaves as it is (same size, scale 1) is read, never blended: a
    # neighbour's inf times a zero weight would be NaN where the reference has the value
    same_rows = task.h == task.out_h and task.scale_h == 1.0
    same_cols = task.w == task.out_w and task.scale_w == 1.0
    out = hl.Func("out")
    if task.mode == "nearest":
        out[c, ox, oy, n] = x[c, cols[0], rows[0], n]
    else:
        a, b = table(wx, "wx", ox), table(wy, "wy", oy)

        def row(r):
            if same_cols:
                return x[c, ox, r, n]
            return x[c, cols[0], r, n] * (1 - a) + x[c, cols[1], r, n] * a

        out[c, ox, oy, n] = row(oy) if same_rows else row(rows[0]) * (1 - b) + \
            row(rows[1]) * b
    out.vectorize(c, config["vec"])
    if config["x_unroll"] > 1:
        out.unroll(ox, config["x_unroll"])
    if config["parallel"]:
        out.parallel(oy)
    return compiled(__name__, task, config, threads, out, [x])
