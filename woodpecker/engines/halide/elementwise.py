"""Fused element-wise groups (passes/fuse_elementwise.py), NHWC.

Algorithm: out[c, x, y, n] = the group's program evaluated at that element, its run-time
inputs read at the same element and its constants from one vector `k` — a scalar at k[j], a
per-channel value at k[j + c] (Halide order,
numpy NHWC arrays; strides are free, so a channel slice of a concat is read where it lies).
Nothing is reused between elements, so the kernel is bound by memory traffic and per-call
overhead; what is tuned is how the loop is cut.

Inputs and output may be 8-bit where the program holds per-tensor QuantizeLinear /
DequantizeLinear steps (a quantized model's residual additions): computed in float32 under
`strict_float`, equal to the references bit for bit.

A program of one 8-bit run-time input and per-tensor constants only (a quantized model's
SiLU, DequantizeLinear → Sigmoid → QuantizeLinear → DequantizeLinear → Mul → QuantizeLinear; a
HardSwish between Q/DQ) is a function of 256 values: with knob `lut` the kernel reads its
output from a 256-entry table that `arguments` computes once per kernel with the reference
program itself (so the kernel equals the reference bit for bit, transcendental steps
included), instead of evaluating the program per element (TFLite's and OpenVINO's int8
activations are lookups too).

Knobs: `vec` lanes over the channels (over the row where there are fewer than 4);
`parallel` — rows in parallel, or the whole map on the
calling thread (on small maps a parallel dispatch can cost more than the work); `lut` where
the program qualifies.
"""

from __future__ import annotations

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import own_shapes, program_expr
from woodpecker.engines.halide.template_parts import compiled, halide_type
from woodpecker.ops.fused import QDQ_STEPS
from woodpecker.tasks.elementwise import ElementwiseRowsTask, ElementwiseTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "elementwise"
KINDS = (KIND, "elementwise_rows")    # a group of another rank, as NHWC (1, rows, 1, C)

SEEDS = ({"vec": 8, "parallel": True},)


def supports(task: ElementwiseTask) -> bool:
    return task.dtype in ("float32", "uint8", "int8") and max(task.c, task.w) >= 4


def _lanes_on_x(task: ElementwiseTask) -> bool:
    """Under 4 channels (an image's 3: a quantized model's input QuantizeLinear) the vector
    runs along the row instead."""
    return task.c < 4


def space(task: ElementwiseTask, vector_registers: int = 16) -> KnobSpace:
    knobs = [Knob("vec", (4, 8, 16)), Knob("parallel", (False, True))]
    seeds = SEEDS
    if task.table_ready:
        knobs.append(Knob("lut", (True, False)))
        seeds = tuple({**s, "lut": lut} for s in SEEDS for lut in (True, False))
    extent = task.w if _lanes_on_x(task) else task.c
    constraints = [Constraint("vector within the channels (the row under 4 channels)",
                              lambda c: c["vec"] <= extent)]
    return KnobSpace(knobs, constraints, seeds)


def views(task: ElementwiseTask) -> list | None:
    """Each array in its own shape (4-d groups), or a group of another rank's inputs and
    output as the (1, rows, 1, C) the kernel computes (tasks/elementwise.ElementwiseRowsTask;
    the constants, or `lut`'s table in their place — a table's program has Q/DQ constants —,
    as they are)."""
    if not isinstance(task, ElementwiseRowsTask):
        return own_shapes(task)
    return [task.view] * task.inputs + [None] * bool(task.consts) + [task.view]


def arguments(task: ElementwiseTask, config: dict, inputs: list) -> list:
    """The task's arguments, or with `lut` the input and the program's table: its output at
    each of the 256 input values, in input order (int8 from −128)."""
    if not config.get("lut"):
        return list(inputs)
    return [inputs[0], task.table(inputs[1] if task.consts else None)]


def build(task: ElementwiseTask, config: dict, threads: int = 2) -> AotKernel:
    if config.get("lut"):
        return _build_lut(task, config, threads)
    hl = halide_module()
    f32 = hl.Float(32)
    xs = [hl.ImageParam(halide_type(hl, task.input_dtype(i)), 4, f"x{i}")
          for i in range(task.inputs)]
    k = hl.ImageParam(f32, 1, "k") if task.consts else None
    params = xs + ([k] if k is not None else [])
    c, x, y, n = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n")

    def value_of(ref):
        kind, i = ref
        return xs[i][c, x, y, n] if kind == "in" else k[i] if kind == "const" else k[i + c]

    out = hl.Func("out")
    value = program_expr(hl, task.program, value_of)
    if any(op in QDQ_STEPS for op, _, _ in task.program):
        # bit-exact with the references: no contraction of DequantizeLinear's product into
        # a following sum (an FMA rounds once where the reference rounds twice)
        value = hl.strict_float(value)
    out[c, x, y, n] = hl.cast(halide_type(hl, task.dtype), value)   # a no-op for float32
    _schedule(task, config, out, x, c, y)
    return compiled(__name__, task, config, threads, out, params)


def _build_lut(task: ElementwiseTask, config: dict, threads: int) -> AotKernel:
    hl = halide_module()
    x = hl.ImageParam(halide_type(hl, task.input_dtype(0)), 4, "x0")
    table = hl.ImageParam(halide_type(hl, task.dtype), 1, "table")
    table.dim(0).set_bounds(0, 256)
    c, px, y, n = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n")
    offset = 128 if task.input_dtype(0) == "int8" else 0
    out = hl.Func("out")
    out[c, px, y, n] = table[hl.i32(x[c, px, y, n]) + offset]
    _schedule(task, config, out, px, c, y)
    return compiled(__name__, task, config, threads, out, [x, table])


def _schedule(task: ElementwiseTask, config: dict, out, x, c, y) -> None:
    out.vectorize(x if _lanes_on_x(task) else c, config["vec"])
    if config["parallel"]:
        out.parallel(y)
