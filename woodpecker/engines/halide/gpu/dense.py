"""Dense products (Gemm, MatMul, batched MatMul) with the fused epilogue on a GPU: each block
computes a (reg_m·threads_m) × (reg_n·threads_n) tile of the output, each thread a reg_m ×
reg_n register tile of it (the structure of CUTLASS's thread-block / thread tiles without
its warp level), the reduction stepped `k_step` at a time, unrolled.

Algorithm (Halide's innermost-first order, as the CPU template dense.py): out[j, i, b] =
epilogue(bias + Σ_k B[j, k(, b)] · A[k, i, b]) for numpy A (batch, M, K), B (K, N) or
(batch, K, N), out (batch, M, N).

Knobs: `threads_n` × `threads_m` threads per block; `reg_n` (vectorized: B's row read as one
vector load of reg_n floats) × `reg_m` accumulators per thread; `k_step` reduction steps
unrolled; `stage` — `none` (each thread reads A and B through the caches), `b` (the block's
columns of B, all K rows, staged in shared memory once per block and read from there by every
row of threads), `ab` (A's rows too). Staging a whole K slab is what Halide 21 expresses with
per-thread accumulators (a slab per reduction step would need the accumulators at block
level, which Halide 21 keeps in local memory, 8 KiB per thread measured in the PTX of a 64 ×
32 tile), so `stage` is valid where the slab fits the block's shared memory.
Tiles must lie within the output (ShiftInwards: an edge tile shifts inwards and recomputes a
few elements, never reading beyond the operands).
"""

from __future__ import annotations

from woodpecker.engines.halide.conv_common import EPILOGUE_OPS, epilogue_expr
from woodpecker.engines.halide.gpu.mapping import (
    FLOATS,
    gpu_constraints,
    register_tiles,
    stage_shared,
)
from woodpecker.engines.halide.template_parts import narrowed, stored
from woodpecker.gpu.devices import GpuDevice
from woodpecker.tasks.dense import DenseTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "dense"

SEEDS = ({"threads_n": 16, "threads_m": 8, "reg_n": 4, "reg_m": 4, "k_step": 8, "stage": "none"},
         {"threads_n": 32, "threads_m": 1, "reg_n": 4, "reg_m": 1, "k_step": 8, "stage": "none"})


def supports(task: DenseTask) -> bool:
    return task.dtype in FLOATS and task.compute == "float32" and \
        all(step[0] in EPILOGUE_OPS for step in task.epilogue)


def _tile(c: dict) -> tuple[int, int]:
    return c["threads_n"] * c["reg_n"], c["threads_m"] * c["reg_m"]


def _shared_bytes(task: DenseTask, c: dict) -> int:
    bn, bm = _tile(c)
    return 4 * task.k * ((bn if c["stage"] in ("b", "ab") else 0) + (bm if c["stage"] == "ab"
                                                                      else 0))


def space(task: DenseTask, device: GpuDevice) -> KnobSpace:
    # threads_n down to 1: a classifier of 2 classes (SwiftNet's) has a tile within it only so
    knobs = [Knob("threads_n", (1, 2, 4, 8, 16, 32, 64)), Knob("threads_m", (1, 2, 4, 8, 16, 32)),
             Knob("reg_n", (1, 2, 4)), Knob("reg_m", (1, 2, 4, 8)), Knob("k_step", (1, 4, 8, 16)),
             Knob("stage", ("none", "b", "ab"))]
    constraints = [
        *gpu_constraints(device, lambda c: c["threads_n"] * c["threads_m"],
                         shared=lambda c: _shared_bytes(task, c),
                         registers=lambda c: c["reg_n"] * c["reg_m"] + c["reg_n"] + c["reg_m"]),
        Constraint("the block's tile within the output",
                   lambda c: _tile(c)[0] <= task.n and _tile(c)[1] <= task.m),
        Constraint("the reduction step divides the reduction", lambda c: task.k % c["k_step"] == 0),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


def views(task: DenseTask) -> list:
    """A as (batch, M, K) whatever the node's rank; the rest as they are."""
    return list(task.arg_shapes())



def define(hl, task: DenseTask, config: dict, mapping):
    """The output Func and its parameters under `mapping` (mapping.py)."""
    a_param, a = stored(hl, task.dtype, 3, "a")
    b_param, b = stored(hl, task.dtype, 2 if task.weights else 3, "b")
    addends = ([task.bias] if task.bias else []) + list(task.residuals)
    params = [stored(hl, task.dtype, 1 if kind == "row" else 3, f"r{i}")
              for i, kind in enumerate(addends)]
    j, i, n = hl.Var("j"), hl.Var("i"), hl.Var("n")
    readers = []
    for (p, read), kind in zip(params, addends):
        f = hl.Func(p.name() + "_at")
        f[j, i, n] = read[j] if kind == "row" else read[j, i, n]
        readers.append(f)
    b_in, a_in = b.in_(), a.in_()
    r = hl.RDom([(0, task.k)], "r")
    acc = hl.Func("acc")
    acc[j, i, n] = readers[0][j, i, n] if task.bias else hl.f32(0.0)
    acc[j, i, n] += (b_in[j, r[0]] if task.weights else b_in[j, r[0], n]) * a_in[r[0], i, n]
    out = hl.Func("out")
    out[j, i, n] = epilogue_expr(hl, acc[j, i, n], task.epilogue,
                                 readers[1 if task.bias else 0:], (j, i, n))
    out = narrowed(hl, out, task.dtype)
    _schedule(hl, task, config, mapping, out, acc, r, (j, i, n), b_in, a_in)
    return out, [a_param, b_param, *(p for p, _ in params)]


def _schedule(hl, task, config, mapping, out, acc, r, axes, b_in, a_in) -> None:
    j, i, n = axes
    rn = config["reg_n"]
    ro, ri = hl.RVar("ro"), hl.RVar("ri")

    def reduce(upd) -> None:          # k_step products a step, unrolled
        upd.split(r[0], ro, ri, config["k_step"]).reorder(j, i, ri, ro).unroll(ri)

    jo = register_tiles(hl, mapping, out, acc, (j, i, n), _tile(config), (rn, config["reg_m"]),
                        reduce)
    staged = {"none": (), "b": (b_in,), "ab": (b_in, a_in)}[config["stage"]]
    for f in (b_in, a_in):
        if f in staged:
            stage_shared(hl, mapping, f, out, jo, (config["threads_n"], config["threads_m"]))
        else:      # read into registers per reduction step (B's row: one vector load)
            f.compute_at(acc, ri).store_in(hl.MemoryType.Register)
            for axis in f.args()[:2]:
                f.unroll(axis)
    if b_in not in staged:
        mapping.vectorize(b_in, b_in.args()[0], rn)
