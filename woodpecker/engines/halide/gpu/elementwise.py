"""Fused element-wise groups (passes/fuse_elementwise.py) on a GPU, NHWC.

Algorithm (elementwise.py's): out[c, x, y, n] = the group's program at that element, its
run-time inputs read at the same element, its constants from one vector `k` (a scalar at
k[j], a per-channel value at k[j + c]). Nothing is reused, so the kernel is bound by memory
bandwidth: each row's channels × pixels are one flat run of memory, cut into blocks of
`threads` threads, each computing `vec` consecutive elements (one vector load and store per
input and the output where `vec` > 1), blocks over the runs and the rows × images.

Supported: float groups (fp32, or fp16 storage) of 4-d tensors, and of any other rank
(`ElementwiseRowsTask`, passes/fuse_elementwise.fuse_float_rows: a transformer's residual sums)
computed in the tensors' own layout as the (1, rows, 1, C) the same kernel reads, its constants
per last axis. 8-bit Q/DQ programs stay with the CPU engines.
"""

from __future__ import annotations

from woodpecker.engines.halide.conv_common import own_shapes, program_expr
from woodpecker.engines.halide.gpu.mapping import FLOATS, gpu_constraints
from woodpecker.engines.halide.template_parts import narrowed, stored
from woodpecker.gpu.devices import GpuDevice
from woodpecker.tasks.elementwise import ElementwiseRowsTask, ElementwiseTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "elementwise"
KINDS = (KIND, "elementwise_rows")

SEEDS = ({"threads": 256, "vec": 4}, {"threads": 128, "vec": 1})


def supports(task: ElementwiseTask) -> bool:
    return task.kind in KINDS and task.dtype in FLOATS and \
        all(task.input_dtype(i) == task.dtype for i in range(task.inputs))


def space(task: ElementwiseTask, device: GpuDevice) -> KnobSpace:
    knobs = [Knob("threads", (32, 64, 128, 256, 512, 1024)), Knob("vec", (1, 2, 4))]
    run = task.c * task.w
    constraints = [*gpu_constraints(device, lambda c: c["threads"],
                                    registers=lambda c: c["vec"] * (task.inputs + 1)),
                   Constraint("a block's elements within the row",
                              lambda c: c["threads"] * c["vec"] <= max(run, 32))]
    return KnobSpace(knobs, constraints, SEEDS)


def views(task: ElementwiseTask) -> list | None:
    """4-d groups read their arrays as they are; a group of another rank its inputs and
    output as (1, rows, 1, C) (the CPU template's views)."""
    if not isinstance(task, ElementwiseRowsTask):
        return own_shapes(task)
    return [task.view] * task.inputs + [None] * bool(task.consts) + [task.view]


def define(hl, task: ElementwiseTask, config: dict, mapping):
    xs_params = [stored(hl, task.dtype, 4, f"x{i}") for i in range(task.inputs)]
    xs = [read for _, read in xs_params]
    k_param, k = stored(hl, task.dtype, 1, "k") if task.consts else (None, None)
    c, x, y, n = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n")

    def value_of(ref):
        kind, i = ref
        return xs[i][c, x, y, n] if kind == "in" else k[i] if kind == "const" else k[i + c]

    out = hl.Func("out")
    out[c, x, y, n] = program_expr(hl, task.program, value_of)
    out = narrowed(hl, out, task.dtype)
    run, bo, ti, vi = hl.Var("run"), hl.Var("bo"), hl.Var("ti"), hl.Var("vi")
    guard = hl.TailStrategy.GuardWithIf
    out.fuse(c, x, run).fuse(y, n, y)
    out.split(run, bo, ti, config["threads"] * config["vec"], guard)
    out.split(ti, ti, vi, config["vec"], guard)
    mapping.blocks(out, bo, y)
    mapping.threads(out, ti)
    mapping.vectorize(out, vi, config["vec"])
    return out, [p for p, _ in xs_params] + ([k_param] if k_param is not None else [])
