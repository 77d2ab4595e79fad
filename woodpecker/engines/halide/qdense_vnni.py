"""Dynamically quantized dense product (tasks/qdense.py) with u8 × s8 dot products summed in
int32 four at a time — `vpdpbusd` where the target has AVX512-VNNI or AVX-VNNI, `vpmaddwd`
pairs elsewhere (the products are widened to 16 bits first, so AVX2's saturating
`vpmaddubsw` is never used) —, as `qconv_gemm` computes a 1×1 int8 conv.

Algorithm (innermost first): acc[lane, p, tile] = Σ_{q, r<4} q[4q + r, p] · w[r, lane, q, tile]
over K padded to 4·Q columns (dynamic_quant.quantized: x quantized once per call, columns past
K zero), then dynamic_quant.output. Weights packed per column tile as (⌈N/T⌉, Q, T, 4)
int8 (`weights`): one vector of weights is 64 contiguous bytes.

Columns that are not a whole number of tiles (a classifier's 2, a vocabulary's 50257) are
computed in whole tiles over zero-padded weights and the last tile's stores masked.

Knobs: `vec` (8 or 16 int32 lanes), `co_block` vectors and `x_block` rows per register tile,
`parallel` (`p`: row tiles in parallel, `co`: column tiles).
"""

from __future__ import annotations

import numpy as np

from woodpecker.engines.halide import dynamic_quant
from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.template_parts import compiled
from woodpecker.tasks.qdense import QDenseTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "qdense"
GROUP = 4

SEEDS = ({"vec": 16, "co_block": 2, "x_block": 8, "parallel": "p"},
         {"vec": 16, "co_block": 4, "x_block": 4, "parallel": "co"},
         {"vec": 16, "co_block": 1, "x_block": 8, "parallel": "co"})


def supports(task) -> bool:
    return isinstance(task, QDenseTask) and dynamic_quant.supported(task)


def space(task: QDenseTask, vector_registers: int = 32) -> KnobSpace:
    knobs = [Knob("vec", (8, 16)), Knob("co_block", (1, 2, 3, 4)),
             Knob("x_block", (1, 2, 3, 4, 6, 8)), Knob("parallel", ("p", "co"))]
    constraints = [
        Constraint("accumulators and one weight vector per tile row fit the registers",
                   lambda c: c["co_block"] * (c["x_block"] + 1) < vector_registers),
        Constraint("column tiles no wider than the columns rounded up to a vector",
                   lambda c: c["vec"] * c["co_block"] <= -(-task.n // c["vec"]) * c["vec"]),
        Constraint("row tiles within the rows", lambda c: c["x_block"] <= task.m),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


def _groups(task: QDenseTask) -> int:
    return -(-task.k // GROUP)


def arguments(task: QDenseTask, config: dict, inputs: list) -> list:
    return dynamic_quant.arguments(task, config, inputs, weights)


views = dynamic_quant.views


def weights(task: QDenseTask, config: dict, w: np.ndarray) -> np.ndarray:
    """(K, N) int8 → (⌈N/T⌉, Q, T, 4), rows zero-padded to 4·Q and columns to whole tiles."""
    t, q = config["vec"] * config["co_block"], _groups(task)
    tiles = -(-task.n // t)
    padded = np.zeros((q * GROUP, tiles * t), np.int8)
    padded[:task.k, :task.n] = w
    packed = padded.reshape(q, GROUP, tiles, t).transpose(2, 0, 3, 1)
    return np.ascontiguousarray(packed)


def build(task: QDenseTask, config: dict, threads: int = 2) -> AotKernel:
    hl = halide_module()
    vec, t, xb = config["vec"], config["vec"] * config["co_block"], config["x_block"]
    q = _groups(task)
    prm = dynamic_quant.params(hl, task, 4)           # w: [r, lane, q, tile]
    prm.w.dim(0).set_stride(1).set_extent(GROUP).set_min(0)
    prm.w.dim(1).set_stride(GROUP).set_extent(t).set_min(0)
    quant = dynamic_quant.quantized(hl, task, prm.x, q * GROUP)
    lane, p, tile, co = hl.Var("lane"), hl.Var("p"), hl.Var("tile"), hl.Var("co")
    r = hl.RDom([(0, GROUP), (0, q)], "r")
    acc = hl.Func("acc")
    acc[lane, p, tile] = hl.i32(0)
    acc[lane, p, tile] += hl.i32(hl.i16(quant.q[GROUP * r[1] + r[0], p])
                                 * hl.i16(prm.w[r[0], lane, r[1], tile]))
    out = hl.Func("out")
    out[co, p] = dynamic_quant.output(hl, task, acc[co % t, p, co // t], co, p, prm, quant)

    oco, oci, po, pi = hl.Var("oco"), hl.Var("oci"), hl.Var("po"), hl.Var("pi")
    out.output_buffer().dim(0).set_min(0)
    out.split(co, oco, oci, t, hl.TailStrategy.RoundUp if task.n % t == 0 else
              hl.TailStrategy.GuardWithIf) \
        .split(p, po, pi, xb, hl.TailStrategy.ShiftInwards)
    out.vectorize(oci, vec).unroll(oci).unroll(pi)
    if config["parallel"] == "p":
        out.reorder(oci, pi, oco, po).parallel(po)
        acc.compute_at(out, oco)
    else:
        out.reorder(oci, pi, po, oco).parallel(oco)
        acc.compute_at(out, po)
    acc.bound(lane, 0, t).vectorize(lane, vec).unroll(lane).unroll(p)
    acc.update().reorder(r[0], lane, p, r[1]).atomic() \
        .vectorize(r[0]).vectorize(lane, vec).unroll(lane).unroll(p)
    return compiled(__name__, task, config, threads, out, prm.all(), views(task))
