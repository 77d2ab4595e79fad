"""Dense product in bfloat16 on AMX tiles (tasks/dense.py with `compute` "bfloat16": a layer of
a `--precision bf16` compile): each step one `tdpbf16ps` — a 16 × 16 float32 tile of (rows ×
output columns) += a 16 × 32 tile of bf16 activations times a 32 × 16 tile of bf16 weights —,
then the bias and the fused epilogue in float32.

Contract: out = epilogue(bf16(A) · bf16(B) + bias), products of bf16 values summed in float32
(the task's reference rounds A and B to bf16, round to nearest even, as the kernel's
conversion does, and sums in float64: what is left is float32 summation order). A is rounded
once per call into a row-padded copy (K rounded up to whole 32-value steps, zeros past K);
B is packed once, when the plan is built (`weights`).

The tile form is `qdense_amx`'s (see `qconv_amx` for what Halide 21's tile-matmul matcher
accepts) with 2 bf16 values to a 4-byte lane instead of 4 bytes: weights indexed
(k mod 2, lane + 16·group, k / 2), the copy's rows a 4-byte skew longer than one step where
K is a single step, the accumulator's copy not dense.

Knob `channels`: as `qdense_amx` — the column tiles inside each 16-row tile (`inner`) or
outside (`outer`). Needs 16 rows, N a whole number of 16-column tiles, constant weights and
a host with AMX-BF16.
"""

from __future__ import annotations

import numpy as np

from woodpecker.engines.halide import qconv_amx
from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import EPILOGUE_OPS, epilogue_expr
from woodpecker.engines.halide.host import host_has_amx_bf16
from woodpecker.engines.halide.template_parts import compiled
from woodpecker.tasks.dense import DenseTask
from woodpecker.tasks.space import Knob, KnobSpace

KIND = "dense"
COMPUTE = ("bfloat16",)
TILE = qconv_amx.TILE
PAIR = 2            # bf16 values one float32 lane sums
MAX_STEPS = 16      # rows of a weight tile: 16 × 2 = 32 values of K per tdpbf16ps

SEEDS = ({"channels": "outer"}, {"channels": "inner"})


def supports(task) -> bool:
    return (isinstance(task, DenseTask) and task.compute == "bfloat16" and task.weights
            and task.batch == 1 and task.m >= TILE and task.n % TILE == 0
            and task.bias in ("", "row") and task.k > PAIR
            and all(step[0] in EPILOGUE_OPS for step in task.epilogue) and host_has_amx_bf16())


def geometry(task: DenseTask) -> tuple[int, int, int, int]:
    """(values of K per step, steps, K padded to whole steps, the copy's row length)."""
    q = -(-task.k // PAIR)
    kq = min(MAX_STEPS, q)
    chunks = -(-q // kq)
    kp = chunks * kq * PAIR
    return PAIR * kq, chunks, kp, kp + (PAIR if chunks == 1 else 0)


def space(task: DenseTask, vector_registers: int = 32) -> KnobSpace:
    return KnobSpace([Knob("channels", ("inner", "outer"))], [], SEEDS)


def views(task: DenseTask) -> list:
    """A as (M, K), the bias as it is, full residuals and the output as (M, N)."""
    full = (task.m, task.n)
    addends = ([task.bias] if task.bias else []) + list(task.residuals)
    return [(task.m, task.k), None] + [None if a == "row" else full for a in addends] + [full]


def weights(task: DenseTask, config: dict, w: np.ndarray) -> np.ndarray:
    """(K, N) float32 → (steps, groups · 16, 2) bf16 (ml_dtypes), K zero-padded to whole steps:
    for group g = tile · chunks + chunk, element [k / 2, 16·g + lane, k mod 2] is the weight of
    row chunk·kk + k to column tile·16 + lane."""
    import ml_dtypes

    kk, chunks, kp, _ = geometry(task)
    padded = np.zeros((kp, task.n), np.float32)
    padded[:task.k] = w
    blocks = padded.reshape(chunks, kk // PAIR, PAIR, task.n // TILE, TILE)
    packed = blocks.transpose(1, 3, 0, 4, 2).reshape(kk // PAIR, -1, PAIR)
    return np.ascontiguousarray(packed).astype(ml_dtypes.bfloat16)


def bf16_bits(hl, value):
    """The bits of float32 `value` rounded to bf16, to nearest with ties to even (ml_dtypes'
    and `vcvtneps2bf16`'s rounding; NaN stays a quiet NaN). Integer arithmetic: Halide 21
    emulates its own float32 → bf16 cast the same way, printing a warning per kernel."""
    bits = hl.reinterpret(hl.UInt(32), value)
    rounded = (bits + hl.u32(0x7FFF) + ((bits >> 16) & hl.u32(1))) >> 16
    return hl.select(hl.is_nan(value), hl.u16(0x7FC0), hl.u16(rounded))


def build(task: DenseTask, config: dict, threads: int = 2) -> AotKernel:
    hl = halide_module()
    f32, bf16 = hl.Float(32), hl.BFloat(16)
    kk, chunks, _, stride = geometry(task)
    x = hl.ImageParam(f32, 2, "x")
    w = hl.ImageParam(bf16, 3, "w")            # [k mod 2, lane + 16·group, k / 2]
    w.dim(0).set_min(0).set_stride(1).set_extent(PAIR)
    w.dim(1).set_min(0).set_stride(PAIR)
    w.dim(2).set_min(0).set_extent(kk // PAIR)
    addends = ([task.bias] if task.bias else []) + list(task.residuals)
    params = [hl.ImageParam(f32, 1 if kind == "row" else 2, f"r{i}")
              for i, kind in enumerate(addends)]
    c, p = hl.Var("c"), hl.Var("p")
    xb = hl.Func("xb")                         # A in bf16, rows padded with zeros
    xb[c, p] = hl.reinterpret(bf16, hl.select(c < task.k, bf16_bits(hl, x[hl.min(c, task.k - 1),
                                                                          p]), hl.u16(0)))
    readers = []
    j, i = hl.Var("j"), hl.Var("i")
    for prm, kind in zip(params, addends):
        f = hl.Func(prm.name() + "_at")
        f[j, i] = prm[j] if kind == "row" else prm[j, i]
        readers.append(f)
    lane, tile, co = hl.Var("lane"), hl.Var("tile"), hl.Var("co")
    r = hl.RDom([(0, kk), (0, chunks)], "r")
    weight = w[r[0] % PAIR, lane + TILE * (tile * chunks + r[1]), r[0] / PAIR]
    acc = hl.Func("acc")
    acc[lane, p, tile] = hl.f32(0)
    acc[lane, p, tile] += hl.f32(xb[r[1] * kk + r[0], p]) * hl.f32(weight)
    accm = acc.in_()
    total = accm[co % TILE, p, co // TILE]
    if task.bias:
        total = total + readers[0][co, p]
    out = hl.Func("out")
    out[co, p] = epilogue_expr(hl, total, task.epilogue, readers[1 if task.bias else 0:],
                               (co, p))

    xb.bound(c, 0, stride).compute_root().vectorize(c, min(16, stride)).parallel(p)
    qconv_amx.schedule_rows(hl, out, acc, accm, co, p, lane, r, config["channels"], PAIR * 2)
    return compiled(__name__, task, config, threads, out, [x, w, *params], views(task))
