"""Softmax and layer (RMS) normalisation over rows on a GPU, in the node's own row-major
layout (transformers' attention scores and hidden states).

Algorithm: rows.py's (`rows.define`, shared): softmax's max, exponentials and sum;
layernorm's two-pass mean and variance; RMSNorm's mean square. Each block takes
`rows_per_block` rows; `threads_row` threads share each row: each computes a strided part of
every row reduction (Halide's rfactor over the thread index), the parts are combined per row,
then the threads write the row's outputs, consecutive threads consecutive columns. The row
statistics live in shared memory between those steps; softmax recomputes its exponentials
where they are read (`fast_exp`: Halide's polynomial exp, checked like every kernel).
"""

from __future__ import annotations

from woodpecker.engines.halide import rows as cpu_rows
from woodpecker.engines.halide.gpu.mapping import FLOATS, gpu_constraints
from woodpecker.engines.halide.template_parts import narrowed
from woodpecker.gpu.devices import GpuDevice
from woodpecker.tasks.rows import RowTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "rows"
SEEDS = ({"threads_row": 32, "rows_per_block": 4, "fast_exp": False},
         {"threads_row": 128, "rows_per_block": 1, "fast_exp": False})


def supports(task: RowTask) -> bool:
    return task.dtype in FLOATS


def space(task: RowTask, device: GpuDevice) -> KnobSpace:
    knobs = [Knob("threads_row", (1, 32, 64, 128, 256)),
             Knob("rows_per_block", (1, 2, 4, 8, 16)), Knob("fast_exp", (False, True))]
    constraints = [
        *gpu_constraints(device, lambda c: c["threads_row"] * c["rows_per_block"],
                         shared=lambda c: 4 * c["rows_per_block"] * (2 + c["threads_row"])),
        Constraint("threads within the row", lambda c: c["threads_row"] <= max(task.width, 1)),
        Constraint("rows within the rows", lambda c: c["rows_per_block"] <= task.rows),
        Constraint("only softmax takes exponentials", lambda c: task.op == "softmax"
                   or not c["fast_exp"]),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


def views(task: RowTask) -> list:
    return cpu_rows.views(task)



def define(hl, task: RowTask, config: dict, mapping):
    out, params, reductions, per_row, r = cpu_rows.define(hl, task, config["fast_exp"])
    out = narrowed(hl, out, task.dtype)
    j, i = out.args()
    t, rb = config["threads_row"], config["rows_per_block"]
    io, ii, jo, ji = hl.Var("io"), hl.Var("ii"), hl.Var("jo"), hl.Var("ji")
    guard = hl.TailStrategy.GuardWithIf
    out.split(i, io, ii, rb, guard).split(j, jo, ji, t, guard).reorder(ji, jo, ii, io)
    mapping.blocks(out, io)
    mapping.threads(out, ji, ii)
    for f in reductions:
        f.compute_at(out, io)
        mapping.shared(f)
        row = f.args()[0]
        if t > 1:
            ro, ri, u = hl.RVar("ro"), hl.RVar("ri"), hl.Var("u")
            partial = f.update().split(r[0], ro, ri, t, guard).rfactor(ri, u)
            partial.compute_at(out, io)
            mapping.shared(partial)
            mapping.threads(partial, u, partial.args()[1])
            mapping.threads(partial.update(), u, partial.args()[1])
        mapping.threads(f, row)
        mapping.threads(f.update(), row)
    for f in per_row:
        if f.dimensions() == 1:        # a row's scale (layernorm, RMSNorm): once per row
            f.compute_at(out, io)
            mapping.shared(f)
            mapping.threads(f, f.args()[0])
    return out, params
