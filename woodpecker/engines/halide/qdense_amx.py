"""Dynamically quantized dense product (tasks/qdense.py) on AMX tiles: each step one `tdpbusd` —
a 16 × 16 int32 tile of (rows × output columns) += a 16 × 64 tile of u8 activations times a
64 × 16 tile of s8 weights —, the activations quantized once per call and the tile sums
dequantized to float32 (engines/halide/dynamic_quant.py).

The product is `qconv_amx`'s 1×1 convolution over one row of M pixels with K channels, and
takes its form from there — Halide 21's tile-matmul matcher accepts only that form (see that
module's docstring): 16 × 16 tiles, weights packed step-major by `qconv_amx.weights`, the
quantized rows `q` stored with a stride other than one step's 64 bytes, the accumulator's copy
not dense.

Knob `channels`: the column tiles inside each 16-row tile (`inner`: the row tile's 16 × K
activations stay in L1 across every column tile) or outside (`outer`: a column tile's weights
stay across every row tile); the outer loop runs in parallel. Needs 16 rows, N a whole
number of 16-column tiles, K > 4 and a host with AMX.

Linux grants a process the AMX tile state only on request (`host.request_amx`).
"""

from __future__ import annotations

import numpy as np

from woodpecker.engines.halide import dynamic_quant, qconv_amx
from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.host import host_has_amx
from woodpecker.engines.halide.template_parts import compiled
from woodpecker.tasks.qconv import QConvTask
from woodpecker.tasks.qdense import QDenseTask
from woodpecker.tasks.space import Knob, KnobSpace

KIND = "qdense"
TILE, GROUP = qconv_amx.TILE, qconv_amx.GROUP

SEEDS = ({"channels": "outer"}, {"channels": "inner"})


def supports(task) -> bool:
    return (isinstance(task, QDenseTask) and task.m >= TILE and task.n % TILE == 0
            and task.k > GROUP and dynamic_quant.supported(task) and host_has_amx())


def conv_view(task: QDenseTask) -> QConvTask:
    """The 1×1 conv the tiles compute: one row of M pixels, K channels in, N out."""
    return QConvTask(1, task.k, 1, task.m, task.n, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1))


def space(task: QDenseTask, vector_registers: int = 32) -> KnobSpace:
    return KnobSpace([Knob("channels", ("inner", "outer"))], [], SEEDS)


def arguments(task: QDenseTask, config: dict, inputs: list) -> list:
    return dynamic_quant.arguments(task, config, inputs, weights)


views = dynamic_quant.views


def weights(task: QDenseTask, config: dict, w: np.ndarray) -> np.ndarray:
    """(K, N) int8 → `qconv_amx.weights`' (steps, groups · 16, 4) of the 1×1 conv."""
    return qconv_amx.weights(conv_view(task), {}, w.reshape(1, 1, task.k, task.n))


def build(task: QDenseTask, config: dict, threads: int = 2) -> AotKernel:
    hl = halide_module()
    kk, chunks, _, _, stride = qconv_amx.geometry(conv_view(task))
    prm = dynamic_quant.params(hl, task, 3)           # w: [k mod 4, lane + 16·group, k / 4]
    prm.w.dim(0).set_min(0).set_stride(1).set_extent(GROUP)
    prm.w.dim(1).set_min(0).set_stride(GROUP)
    prm.w.dim(2).set_min(0).set_extent(kk // GROUP)
    quant = dynamic_quant.quantized(hl, task, prm.x, stride)
    lane, p, tile, co = (hl.Var(v) for v in ("lane", "p", "tile", "co"))
    r = hl.RDom([(0, kk), (0, chunks)], "r")
    weight = prm.w[r[0] % GROUP, lane + TILE * (tile * chunks + r[1]), r[0] / GROUP]
    acc = hl.Func("acc")
    acc[lane, p, tile] = hl.i32(0)
    acc[lane, p, tile] += hl.i32(quant.q[r[1] * kk + r[0], p]) * weight
    accm = acc.in_()
    out = hl.Func("out")
    out[co, p] = dynamic_quant.output(hl, task, accm[co % TILE, p, co // TILE], co, p, prm,
                                       quant)

    qconv_amx.schedule_rows(hl, out, acc, accm, co, p, lane, r, config["channels"], GROUP)
    return compiled(__name__, task, config, threads, out, prm.all(), views(task))
