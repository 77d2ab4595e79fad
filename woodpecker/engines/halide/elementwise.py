"""Fused element-wise groups (passes/fuse_elementwise.py), NHWC.

Algorithm: out[c, x, y, n] = the group's program evaluated at that element, its run-time
inputs read at the same element and its constants from one vector `k` — a scalar at k[j], a
per-channel value at k[j + c] (Halide order,
numpy NHWC arrays; strides are free, so a channel slice of a concat is read where it lies).
Nothing is reused between elements, so the kernel is bound by memory traffic and per-call
overhead; what is tuned is how the loop is cut.

Knobs: `vec` lanes over the channels; `parallel` — rows in parallel, or the whole map on the
calling thread (on small maps a parallel dispatch can cost more than the work).
"""

from __future__ import annotations

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import activation, own_shapes
from woodpecker.engines.halide.schedule import compiled
from woodpecker.tune.space import Constraint, Knob, KnobSpace
from woodpecker.tune.tasks.elementwise import ElementwiseTask

KIND = "elementwise"

SEEDS = ({"vec": 8, "parallel": True},)


def supports(task: ElementwiseTask) -> bool:
    return task.dtype == "float32" and task.c >= 4


def space(task: ElementwiseTask, vector_registers: int = 16) -> KnobSpace:
    knobs = [Knob("vec", (4, 8, 16)), Knob("parallel", (False, True))]
    constraints = [Constraint("vector within the channels", lambda c: c["vec"] <= task.c)]
    return KnobSpace(knobs, constraints, SEEDS)


views = own_shapes


def _step(hl, op: str, args: list, attrs: dict):
    """One program step as a Halide expression of its argument expressions."""
    if op in ("Add", "Sub", "Mul", "Div"):
        a, b = args
        return a + b if op == "Add" else a - b if op == "Sub" else a * b if op == "Mul" \
            else a / b
    if op == "Clip":
        x, lo, hi = (args + [None, None])[:3]
        x = x if lo is None else hl.max(x, lo)
        return x if hi is None else hl.min(x, hi)
    if op == "HardSigmoid":
        alpha, beta = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
        return hl.clamp(args[0] * hl.f32(alpha) + hl.f32(beta), 0.0, 1.0)
    return activation(hl, args[0], (op,))


def build(task: ElementwiseTask, config: dict, threads: int = 2) -> AotKernel:
    hl = halide_module()
    f32 = hl.Float(32)
    xs = [hl.ImageParam(f32, 4, f"x{i}") for i in range(task.inputs)]
    k = hl.ImageParam(f32, 1, "k") if task.consts else None
    params = xs + ([k] if k is not None else [])
    c, x, y, n = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n")
    values: list = []

    def arg(ref):
        if ref is None:
            return None
        kind, i = ref
        if kind == "channel":
            return k[i + c]
        return xs[i][c, x, y, n] if kind == "in" else k[i] if kind == "const" else values[i]

    for op, args, attrs in task.program:
        values.append(_step(hl, op, [arg(a) for a in args], dict(attrs)))
    out = hl.Func("out")
    out[c, x, y, n] = values[-1]
    out.vectorize(c, config["vec"])
    if config["parallel"]:
        out.parallel(y)
    return compiled(__name__, task, config, threads, out, params)
