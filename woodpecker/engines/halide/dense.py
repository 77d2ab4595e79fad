"""Dense products (Gemm, MatMul, batched MatMul) with the fused epilogue: a register-blocked
matrix product, the structure of GotoBLAS/oneDNN's micro-kernels.

Algorithm (Halide's innermost-first order): out[j, i, b] = act(bias[j(, i)] + Σ_k B[j, k(, b)]
· A[k, i, b] + residuals), for the numpy arrays A (batch, M, K), B (K, N) or (batch, K, N),
out (batch, M, N). The accumulator is blocked by column tile T = vec · n_block,
acc[lane, i, tile, b], so a tile's lanes are one dense vector of B's row k.

Knobs: `vec` lanes and `n_block` vectors of output columns, `m_block` rows per register tile
(n_block · m_block accumulators, bounded by the vector registers); `parallel` — `m` (row tiles
in parallel, each sweeping every column tile: A's rows stay in L1) or `n` (column tiles in
parallel, each sweeping every row: a tile's weights stay in cache — the only parallelism when
M = 1); `k_unroll` (the reduction unrolled by 1, 2 or 4); `pack` — constant weights stored per
column tile, (N/T, K, T), so a tile's reduction streams one contiguous block instead of
reading T floats every N (run-time B, as in attention, is read as it arrives).
"""

from __future__ import annotations

import numpy as np

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import EPILOGUE_OPS, epilogue_expr, fits_registers
from woodpecker.engines.halide.template_parts import aligned_channel_tiles, compiled
from woodpecker.tasks.dense import DenseTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "dense"


def supports(task: DenseTask) -> bool:
    return task.dtype == "float32" and task.n % 4 == 0 and \
        all(step[0] in EPILOGUE_OPS for step in task.epilogue)


def space(task: DenseTask, vector_registers: int = 16) -> KnobSpace:
    knobs = [Knob("vec", (4, 8, 16)), Knob("n_block", (1, 2, 3, 4, 5, 6)),
             Knob("m_block", (1, 2, 3, 4, 5, 6, 7, 8)), Knob("parallel", ("m", "n")),
             Knob("k_unroll", (1, 2, 4)), Knob("pack", (False, True))]
    constraints = [
        fits_registers(vector_registers, "n_block", 1, "m_block"),
        Constraint("the column tile divides the output columns",
                   lambda c: task.n % (c["vec"] * c["n_block"]) == 0),
        Constraint("row tile within the rows", lambda c: c["m_block"] <= task.m),
        Constraint("the unroll factor divides the reduction",
                   lambda c: task.k % c["k_unroll"] == 0),
        Constraint("only constant weights are packed", lambda c: task.weights or not c["pack"]),
    ]
    return KnobSpace(knobs, constraints)


def weights(task: DenseTask, config: dict, w):
    """(K, N) weights as they are, or packed per column tile as (N/T, K, T)."""
    if not config["pack"]:
        return w
    tile = config["vec"] * config["n_block"]
    k, n = w.shape
    return np.ascontiguousarray(w.reshape(k, n // tile, tile).transpose(1, 0, 2))


def views(task: DenseTask) -> list:
    """Every argument as the kernel indexes it (A as (batch, M, K) whatever the node's rank);
    the weights keep their own (possibly packed) shape."""
    shapes = list(task.arg_shapes())
    if task.weights:
        shapes[1] = None
    return shapes


def build(task: DenseTask, config: dict, threads: int = 2) -> AotKernel:
    """Compile `task` with `config`; run(*arrays) takes `DenseTask.random_inputs`' order with
    the weights as `weights` returns them."""
    hl = halide_module()
    f32 = hl.Float(32)
    vec, tile, mb = config["vec"], config["vec"] * config["n_block"], config["m_block"]
    packed = config["pack"]
    a = hl.ImageParam(f32, 3, "a")
    b = hl.ImageParam(f32, 3 if packed or not task.weights else 2, "b")
    addends = ([task.bias] if task.bias else []) + list(task.residuals)
    params = [hl.ImageParam(f32, 1 if kind == "row" else 3, f"r{i}")
              for i, kind in enumerate(addends)]
    j, i, n = hl.Var("j"), hl.Var("i"), hl.Var("n")
    readers = []
    for p, kind in zip(params, addends):
        f = hl.Func(p.name() + "_at")
        f[j, i, n] = p[j] if kind == "row" else p[j, i, n]
        readers.append(f)
    jl, jt = hl.Var("jl"), hl.Var("jt")
    r = hl.RDom([(0, task.k)])
    if packed:
        weight = b[jl, r[0], jt]
    elif task.weights:
        weight = b[jt * tile + jl, r[0]]
    else:
        weight = b[jt * tile + jl, r[0], n]
    acc = hl.Func("acc")
    acc[jl, i, jt, n] = readers[0][jt * tile + jl, i, n] if task.bias else hl.f32(0.0)
    acc[jl, i, jt, n] += weight * a[r[0], i, n]
    acc.bound(jl, 0, tile)
    out = hl.Func("out")
    out[j, i, n] = epilogue_expr(hl, acc[j % tile, i, j // tile, n], task.epilogue,
                                 readers[1 if task.bias else 0:], (j, i, n))

    jo, ji, io, ii = hl.Var("jo"), hl.Var("ji"), hl.Var("io"), hl.Var("ii")
    aligned_channel_tiles(hl, out, j, jo, ji, tile)
    out.split(i, io, ii, mb, hl.TailStrategy.ShiftInwards)
    out.vectorize(ji, vec).unroll(ji).unroll(ii)
    if config["parallel"] == "m":
        out.reorder(ji, ii, jo, io, n).fuse(io, n, io).parallel(io)
        acc.compute_at(out, jo)
    else:
        out.reorder(ji, ii, io, jo, n).fuse(jo, n, jo).parallel(jo)
        acc.compute_at(out, io)
    acc.vectorize(jl, vec).unroll(jl).unroll(i)
    upd = acc.update().reorder(jl, i, r[0]).vectorize(jl, vec).unroll(jl).unroll(i)
    if config["k_unroll"] > 1:
        ro, ri = hl.RVar("ro"), hl.RVar("ri")
        upd.split(r[0], ro, ri, config["k_unroll"]).unroll(ri)
    return compiled(__name__, task, config, threads, out, [a, b, *params], views(task))
