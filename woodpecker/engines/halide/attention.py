"""Attention, softmax(Q·Kᵀ · scale + masks)·V, as one kernel (AGO §III's intensive fusion of
MatMul→Softmax→MatMul; ops/attention.py): a block of query rows at a time, its scores, their
softmax and their product with V stay in cache; the (M × N) scores never go to memory.

Algorithm (Halide's innermost-first order, per (batch, head) slice b): s[j, i] = Σ_d Q[d, i] ·
Kᵀ[j, d] (the scale and masks applied as the task's steps), m[i] = max_j s, e[j, i] =
exp(s − m[i]), Σ[i] = Σ_j e, out[c, i] = (Σ_j e[j, i] · V[c, j]) / Σ[i], written (batch, M, Dv)
or (M, batch, Dv). Q, K and V are read through their strided views of the flat sources
(tasks/attention.py); K is first copied to Kᵀ (unless consecutive keys are adjacent already) so
that a vector of lanes reads consecutive keys.

Knobs: `vec` lanes; `rows` query rows per parallel task (tasks: row blocks × slices);
`s_block` vectors of keys by `s_rows` rows — the scores' register tile; `o_block` vectors of
output channels by `o_rows` rows — the output's register tile; `k_at` — where Kᵀ is made:
`task` (each parallel task copies its slice's), `root` (once per call, before the tasks) or
`inline` (K read where it lies: only when consecutive keys are adjacent, in whole tiles);
`rfactor` — the row max and sum kept as `vec` per-lane partial results; `fast_exp` — Halide's
polynomial exp (a few ulp; every candidate is still checked against the reference).
"""

from __future__ import annotations

from woodpecker.engines.halide import ieee
from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.template_parts import compiled
from woodpecker.tasks.attention import AttentionTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "attention"


def supports(task: AttentionTask) -> bool:
    return task.dtype == "float32" and task.dv % 4 == 0 and task.n >= 4 and \
        all(step[0] in ("Mul", "Add") for step in task.scores)


def _registers(vector_registers: int, block: str, rows: str) -> Constraint:
    lanes = 16 if vector_registers >= 32 else 8
    return Constraint(f"the {block} × {rows} accumulators fit the vector registers",
                      lambda c: c[block] * c[rows] * max(1, c["vec"] // lanes)
                      <= vector_registers - 2)


def space(task: AttentionTask, vector_registers: int = 16) -> KnobSpace:
    knobs = [Knob("vec", (4, 8, 16)), Knob("rows", (1, 2, 4, 8, 16, 32)),
             Knob("s_block", (1, 2, 4)), Knob("s_rows", (1, 2, 4)),
             Knob("o_block", (1, 2, 4, 8)), Knob("o_rows", (1, 2, 4)),
             Knob("k_at", ("task", "root", "inline")), Knob("rfactor", (False, True)),
             Knob("fast_exp", (False, True))]
    constraints = [
        Constraint("a vector within the keys", lambda c: c["vec"] <= task.n),
        Constraint("a row block within the queries", lambda c: c["rows"] <= task.m),
        Constraint("register tiles' rows divide the row block",
                   lambda c: c["rows"] % c["s_rows"] == 0 and c["rows"] % c["o_rows"] == 0),
        Constraint("the output tile divides the value width",
                   lambda c: task.dv % (c["vec"] * c["o_block"]) == 0),
        _registers(vector_registers, "s_block", "s_rows"),
        _registers(vector_registers, "o_block", "o_rows"),
        Constraint("K read in place only where consecutive keys are adjacent, in whole tiles",
                   lambda c: c["k_at"] != "inline" or
                   (task.views[1][2] == 1 and task.n % (c["vec"] * c["s_block"]) == 0)),
        Constraint("per-lane partial reductions need whole vectors",
                   lambda c: not c["rfactor"] or task.n % c["vec"] == 0),
    ]
    lanes = 16 if vector_registers >= 32 else 8
    seeds = _unique(_fitted(task, {"vec": lanes, "rows": rows, "s_block": sb, "s_rows": sr,
                                 "o_block": ob, "o_rows": orows, "k_at": "root",
                                 "rfactor": True, "fast_exp": False})
                  for rows, sb, sr, ob, orows in ((16, 2, 4, 2, 4), (8, 4, 2, 4, 2),
                                                  (32, 2, 4, 2, 4), (4, 2, 2, 2, 2),
                                                  (1, 4, 1, 4, 1)))
    return KnobSpace(knobs, constraints, seeds)


def _unique(configs) -> tuple[dict, ...]:
    return tuple({KnobSpace.key(c): c for c in configs}.values())


def _fitted(task: AttentionTask, seed: dict) -> dict:
    """A hand-picked schedule shrunk to a small task: blocks within its rows, vectors within
    its keys and value width, per-lane reductions only over whole vectors."""
    out = dict(seed)
    while out["vec"] > 4 and (out["vec"] > task.n or task.dv % out["vec"]):
        out["vec"] //= 2
    while out["rows"] > task.m:
        out["rows"] //= 2
    for knob in ("s_rows", "o_rows"):
        while out["rows"] % out[knob]:
            out[knob] //= 2
    while task.dv % (out["vec"] * out["o_block"]):
        out["o_block"] //= 2
    out["rfactor"] = task.n % out["vec"] == 0
    return out


def views(task: AttentionTask) -> list:
    """Every argument as the kernel indexes it (the leading dimensions as one)."""
    return task.arg_shapes()


def _scores(hl, task: AttentionTask, s, masks, j, i, b, exact: bool):
    """The scores' steps on s[j, i, b]: Mul by the scale, Add of each mask (`exact`: no rows
    past M are computed)."""
    e = s[j, i, b]
    pending = iter(zip(masks, task.masks))
    for step in task.scores:
        if step[0] == "Mul":
            e = e * hl.f32(step[1])
        else:
            p, axes = next(pending)
            row = (i if exact else hl.clamp(i, 0, task.m - 1)) if "m" in axes else 0
            e = e + p[j if "n" in axes else 0, row, b if "b" in axes else 0]
    return e


def _viewed(hl, source, view: tuple[int, int, int, int], name: str, rows: int | None):
    """Func f[col, row, b] reading the flat `source` through (offset, batch stride, row
    stride, column stride): constant strides, so a stride-1 axis vectorizes to dense loads.
    `rows`: rows past it read the last one."""
    offset, sb, sr, sc = view
    col, row, b = hl.Var("col"), hl.Var("row"), hl.Var("b")
    r = row if rows is None else hl.clamp(row, 0, rows - 1)
    f = hl.Func(name)
    f[col, row, b] = source[offset + b * sb + r * sr + col * sc]
    return f


def _row_reduction(hl, name: str, init, combine, value, rn, i, b):
    f = hl.Func(name)
    f[i, b] = init
    f[i, b] = combine(f[i, b], value[rn.x, i, b])
    return f


def build(task: AttentionTask, config: dict, threads: int = 2) -> AotKernel:
    """Compile `task` with `config`; run(q, k, v, *masks) in `AttentionTask.random_inputs`'
    order."""
    hl = halide_module()
    f32 = hl.Float(32)
    vec, rows = config["vec"], config["rows"]
    exact = task.m % rows == 0
    sources = [hl.ImageParam(f32, 1, name) for name in ("q", "k", "v")]
    # a last row block past M computes rows it does not store: they read row M − 1
    q, k, v = (_viewed(hl, src, view, name, None if exact or name != "q_at" else task.m)
               for src, view, name in zip(sources, task.views, ("q_at", "k_at", "v_at")))
    masks = [hl.ImageParam(f32, 3, f"mask{t}") for t in range(len(task.masks))]
    c, i, b, j, dd = (hl.Var(name) for name in ("c", "i", "b", "j", "dd"))
    s_tile = vec * config["s_block"]
    kt = hl.Func("kt")
    if config["k_at"] == "inline":
        kt[j, dd, b] = k[dd, j, b]
    else:
        # the scores' tiles may round the keys up past N: read the last key there
        kt[j, dd, b] = k[dd, hl.clamp(j, 0, task.n - 1) if task.n % s_tile else j, b]
    rd, rn = hl.RDom([(0, task.d)], "rd"), hl.RDom([(0, task.n)], "rn")
    acc = hl.Func("acc")       # a register tile of scores, summed over D
    acc[j, i, b] = hl.f32(0.0)
    acc[j, i, b] += q[rd.x, i, b] * kt[j, rd.x, b]
    s = hl.Func("s")           # the row block's scores, in cache
    s[j, i, b] = acc[j, i, b]
    sc = hl.Func("sc")
    sc[j, i, b] = _scores(hl, task, s, masks, j, i, b, exact)
    mx = _row_reduction(hl, "mx", f32.min(), hl.max, sc, rn, i, b)
    e = hl.Func("e")
    e[j, i, b] = ieee.exp(hl, sc[j, i, b] - mx[i, b], fast=config["fast_exp"])
    total = _row_reduction(hl, "total", hl.f32(0.0), lambda x, y: x + y, e, rn, i, b)
    o = hl.Func("o")
    o[c, i, b] = hl.f32(0.0)
    o[c, i, b] += e[rn.x, i, b] * v[c, rn.x, b]
    out = hl.Func("out")
    value = o[c, i, b] * (1.0 / total[i, b])
    if task.rows_first:
        out[c, b, i] = value
    else:
        out[c, i, b] = value

    tail = hl.TailStrategy.Auto if exact else hl.TailStrategy.GuardWithIf
    io, ii, co, ci, iio, iii, t = (hl.Var(name) for name in
                                   ("io", "ii", "co", "ci", "iio", "iii", "t"))
    out.split(i, io, ii, rows, tail).split(c, co, ci, vec * config["o_block"]) \
        .split(ii, iio, iii, config["o_rows"], tail) \
        .reorder(ci, iii, co, iio, io, b).fuse(io, b, t).parallel(t)
    out.vectorize(ci, vec).unroll(ci)
    o.compute_at(out, co).vectorize(c, vec).unroll(c)
    upd = o.update().reorder(c, i, rn.x).vectorize(c, vec).unroll(c)
    if exact:
        out.unroll(iii)
        o.unroll(i)
        upd.unroll(i)
    for f in (e, mx, total, s):
        f.compute_at(out, t)
    e.vectorize(j, vec)
    jo, ji, so, si = (hl.Var(name) for name in ("jo", "ji", "so", "si"))
    s.split(j, jo, ji, s_tile).split(i, so, si, config["s_rows"], tail) \
        .reorder(ji, si, jo, so).vectorize(ji, vec).unroll(ji)
    acc.compute_at(s, jo).vectorize(j, vec).unroll(j)
    au = acc.update().reorder(j, i, rd.x).vectorize(j, vec).unroll(j)
    if exact:
        for f in (s, acc, au):
            f.unroll(si if f is s else i)
    for f in (mx, total):
        if config["rfactor"]:
            ro, ri, u = hl.RVar("ro"), hl.RVar("ri"), hl.Var("u")
            partial = f.update().split(rn.x, ro, ri, vec).rfactor(ri, u)
            partial.compute_at(out, t).vectorize(u)
            partial.update().vectorize(u)
    if config["k_at"] == "task":
        kt.compute_at(out, t).vectorize(j, vec)
    elif config["k_at"] == "root":
        kt.compute_root().parallel(b).vectorize(j, vec)
    return compiled(__name__, task, config, threads, out, [*sources, *masks], views(task))
