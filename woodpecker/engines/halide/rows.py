"""Softmax and layer normalisation over rows, in the node's own row-major layout.

Algorithm (Halide order, x[j, i] for column j of row i): softmax — m[i] = max_j x, e[j, i] =
exp(x − m[i]), s[i] = Σ_j e, out = e / s; layernorm — μ[i] = Σ_j x / W, σ²[i] = Σ_j (x − μ)² / W
(two passes: the one-pass Σx² − μ² loses digits on rows with a large mean), out = (x − μ) ·
rsqrt(σ² + ε) · scale[j] + bias[j]; rmsnorm — q[i] = Σ_j x², out = x · rsqrt(q / W + ε) ·
scale[j] (T5's and Llama's norm, passes/rmsnorm.py). Each row's statistics are computed where
its row is.

Knobs: `vec` lanes; `grain` rows per parallel task; `rfactor` — each row reduction kept in
`vec` partial results (one per lane, Halide's rfactor) and combined at the end, so the
reduction runs on vectors instead of one value at a time; `stash` (softmax) — the row's
exponentials stored once and reread, instead of computed twice; `fast_exp` (softmax) — Halide's
polynomial exp (a few ulp; every candidate is still checked against the reference).
"""

from __future__ import annotations

from woodpecker.engines.halide import ieee
from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.template_parts import compiled, stored
from woodpecker.tasks.rows import RowTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "rows"


def supports(task: RowTask) -> bool:
    return task.dtype == "float32" and task.width >= 4


def space(task: RowTask, vector_registers: int = 16) -> KnobSpace:
    knobs = [Knob("vec", (4, 8, 16)), Knob("grain", (1, 4, 16, 64, 256)),
             Knob("rfactor", (False, True)), Knob("stash", (False, True)),
             Knob("fast_exp", (False, True))]
    constraints = [
        Constraint("vector within the row", lambda c: c["vec"] <= task.width),
        Constraint("per-lane partial sums need whole vectors",
                   lambda c: not c["rfactor"] or task.width % c["vec"] == 0),
        Constraint("a grain within the rows", lambda c: c["grain"] <= task.rows),
        Constraint("only softmax stashes or takes exponentials",
                   lambda c: task.op == "softmax" or not (c["stash"] or c["fast_exp"])),
    ]
    return KnobSpace(knobs, constraints)


def views(task: RowTask) -> list:
    """x and the output as (rows, width) whatever the node's rank; scale and bias as vectors."""
    return task.arg_shapes()


def _row_reduce(hl, name: str, value, r, init, combine):
    """Func f[i] = `combine` over the row's columns of `value(j, i)`, starting from `init`."""
    i = hl.Var("i")
    f = hl.Func(name)
    f[i] = init
    f[i] = combine(f[i], value(r[0], i))
    return f


def _add(a, b):
    return a + b


def define(hl, task: RowTask, fast_exp: bool = False):
    """The algorithm (module docstring) without a schedule (shared with gpu/rows.py): (out,
    params, the row reductions, the Funcs per row or element to place — softmax's
    exponentials first —, the reduction's RDom)."""
    f32 = hl.Float(32)
    dtype = "float16" if task.dtype == "float16" else "float32"   # a GPU plan's storage
    param, x = stored(hl, dtype, 2, "x")
    params = [param]
    j, i = hl.Var("j"), hl.Var("i")
    r = hl.RDom([(0, task.width)])
    reductions, rows = [], []
    if task.op == "softmax":
        mx = _row_reduce(hl, "mx", lambda c, row: x[c, row], r, f32.min(), hl.max)
        e = hl.Func("e")
        e[j, i] = ieee.exp(hl, x[j, i] - mx[i], fast=fast_exp)
        s = _row_reduce(hl, "s", lambda c, row: e[c, row], r, hl.f32(0.0), _add)
        out = hl.Func("out")
        out[j, i] = e[j, i] * (1.0 / s[i])
        reductions, rows = [mx, s], [e]
    elif task.op == "rmsnorm":
        param, scale = stored(hl, dtype, 1, "scale")
        params.append(param)
        sq = _row_reduce(hl, "sq", lambda c, row: x[c, row] * x[c, row], r, hl.f32(0.0), _add)
        inv = hl.Func("inv")
        inv[i] = 1.0 / hl.sqrt(sq[i] / float(task.width) + hl.f32(task.epsilon))
        out = hl.Func("out")
        out[j, i] = x[j, i] * inv[i] * scale[j]
        reductions, rows = [sq], [inv]
    else:
        param, scale = stored(hl, dtype, 1, "scale")
        params.append(param)
        width = float(task.width)
        mean = _row_reduce(hl, "mean", lambda c, row: x[c, row], r, hl.f32(0.0), _add)
        var = _row_reduce(hl, "var", lambda c, row: (x[c, row] - mean[row] / width) ** 2, r,
                          hl.f32(0.0), _add)
        inv = hl.Func("inv")
        inv[i] = 1.0 / hl.sqrt(var[i] / width + hl.f32(task.epsilon))
        value = (x[j, i] - mean[i] / width) * inv[i] * scale[j]
        if task.has_bias:
            param, bias = stored(hl, dtype, 1, "bias")
            params.append(param)
            value = value + bias[j]
        out = hl.Func("out")
        out[j, i] = value
        reductions, rows = [mean, var], [inv]

    return out, params, reductions, rows, r


def build(task: RowTask, config: dict, threads: int = 2) -> AotKernel:
    hl = halide_module()
    out, params, reductions, rows, r = define(hl, task, config.get("fast_exp", False))
    if task.op == "softmax" and not config.get("stash"):
        rows = []                        # the exponentials computed where they are read
    j, i = out.args()
    vec = config["vec"]
    io, ii = hl.Var("io"), hl.Var("ii")
    out.split(i, io, ii, config["grain"], hl.TailStrategy.GuardWithIf) \
        .reorder(j, ii, io).parallel(io).vectorize(j, vec)
    for f in rows:
        f.compute_at(out, ii)
        if f.dimensions() == 2:
            f.vectorize(f.args()[0], vec)
    for f in reductions:
        f.compute_at(out, ii)
        if config["rfactor"]:
            ro, ri, u = hl.RVar("ro"), hl.RVar("ri"), hl.Var("u")
            partial = f.update().split(r[0], ro, ri, vec).rfactor(ri, u)
            partial.compute_at(out, ii).vectorize(u)
            partial.update().vectorize(u)
    return compiled(__name__, task, config, threads, out, params, views(task))
