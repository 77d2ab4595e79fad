"""2-d convolution, NHWC, on a GPU: direct, register-tiled in implicit-GEMM order (output
channels × output pixels as the product's columns × rows, the reduction over input channels
and the window), with the fused epilogue in the same kernel.

Algorithm (conv_direct.py's, Halide's innermost-first order): out[co, x, y, n] = epilogue(b[co]
+ Σ_{ci,kx,ky} w[co, ci, kx, ky] · in[ci, x·s + kx·d − p, y·s + ky·d − p, n]) for numpy NHWC
input and output and HWIO weights; the input's zero padding is a bounds check on the read.

Each block computes (threads_c · reg_c) output channels × (threads_x · reg_x) pixels of one
output row of one image (blocks over channel tiles, pixel tiles and rows × images); each
thread a reg_c × reg_x register tile. Threads along the channels read consecutive weights
(HWIO: output channels innermost), so a warp's weight loads coalesce; reg_c channels per
thread are one vector load. `c_step` input channels per reduction step are unrolled with the
whole window (`unroll_window`) or its rows only. `stage`: `w` stages the block's weights (its
channels × every input channel and tap) in shared memory, valid where they fit the block's
shared memory (dense.py says why Halide 21 stages whole slabs).

Supported: float convs, ungrouped or grouped with several input channels per group (RegNet's,
ResNeXt's: an output channel reads its group's C/groups input channels; one channel per group
is depthwise.py's), with a prologue (squeeze-and-excitation's x · s[c], an activation first)
applied as the input is read (ConvInputs), of NHWC input or of a model input read where it
lies in NCHW (a stem conv's few channels: `ConvTask.x_layout`).
"""

from __future__ import annotations

from woodpecker.engines.halide.conv_common import EPILOGUE_OPS, ConvInputs, own_shapes
from woodpecker.engines.halide.gpu.mapping import (
    FLOATS,
    gpu_constraints,
    register_tiles,
    stage_shared,
)
from woodpecker.engines.halide.template_parts import narrowed
from woodpecker.gpu.devices import GpuDevice
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "conv2d"

SEEDS = ({"threads_c": 16, "threads_x": 8, "reg_c": 4, "reg_x": 2, "c_step": 4,
          "unroll_window": True, "stage": "none"},
         {"threads_c": 32, "threads_x": 4, "reg_c": 2, "reg_x": 1, "c_step": 4,
          "unroll_window": True, "stage": "none"})


def conv_depthwise_like(task: ConvTask) -> bool:
    """One input channel per group (depthwise.py's, and a channel multiplier's)."""
    return task.groups == task.c


def supports(task: ConvTask) -> bool:
    return type(task) is ConvTask and task.dtype in FLOATS and \
        (task.groups == 1 or not conv_depthwise_like(task)) and \
        all(step[0] in EPILOGUE_OPS for step in task.epilogue)


def _tile(c: dict) -> tuple[int, int]:
    return c["threads_c"] * c["reg_c"], c["threads_x"] * c["reg_x"]


def space(task: ConvTask, device: GpuDevice) -> KnobSpace:
    # threads_c down to 1: a layer of a few output channels (an inception branch's 6) has a
    # tile within them only so
    knobs = [Knob("threads_c", (1, 2, 4, 8, 16, 32, 64)), Knob("threads_x", (1, 2, 4, 8, 16)),
             Knob("reg_c", (1, 2, 4)), Knob("reg_x", (1, 2, 4, 7)), Knob("c_step", (1, 2, 4, 8)),
             Knob("unroll_window", (False, True)), Knob("stage", ("none", "w"))]
    window = task.kh * task.kw

    per_group = task.c // task.groups

    def shared(c: dict) -> int:
        return 4 * _tile(c)[0] * per_group * window if c["stage"] == "w" else 0

    constraints = [
        *gpu_constraints(device, lambda c: c["threads_c"] * c["threads_x"], shared=shared,
                         registers=lambda c: c["reg_c"] * c["reg_x"] + c["reg_c"] + c["reg_x"]),
        Constraint("the block's tile within the output channels and the row",
                   lambda c: _tile(c)[0] <= task.k and _tile(c)[1] <= task.out_w),
        Constraint("the reduction step divides a group's input channels",
                   lambda c: per_group % c["c_step"] == 0),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


def views(task: ConvTask) -> list:
    return own_shapes(task)



def define(hl, task: ConvTask, config: dict, mapping):
    io = ConvInputs(hl, task)
    w_in = io.w.in_()
    co, ox, oy, n = hl.Var("co"), hl.Var("ox"), hl.Var("oy"), hl.Var("n")
    per_group = task.c // task.groups
    r = hl.RDom([(0, per_group), (0, task.kw), (0, task.kh)], "r")
    (sy, sx), (dy, dx) = task.stride, task.dilation
    channel = r[0] if task.groups == 1 else co / (task.k // task.groups) * per_group + r[0]
    x_at = io.padded[channel, ox * sx + r[1] * dx - task.pads[1],
                     oy * sy + r[2] * dy - task.pads[0], n]
    acc = hl.Func("acc")
    acc[co, ox, oy, n] = io.bias(co)
    acc[co, ox, oy, n] += w_in[co, r[0], r[1], r[2]] * x_at
    out = narrowed(hl, io.output(acc[co, ox, oy, n], (co, ox, oy, n)), task.dtype)
    _schedule(hl, config, mapping, out, acc, r, (co, ox, oy, n), w_in)
    return out, io.params


def _schedule(hl, config, mapping, out, acc, r, axes, w_in) -> None:
    co, ox, oy, n = axes
    ro, ri = hl.RVar("ro"), hl.RVar("ri")

    def reduce(upd) -> None:          # c_step input channels a step, the window's row inside
        upd.split(r[0], ro, ri, config["c_step"]).reorder(co, ox, ri, r[1], ro, r[2])
        upd.unroll(ri)
        if config["unroll_window"]:
            upd.unroll(r[1])

    cb = register_tiles(hl, mapping, out, acc, (co, ox, oy, n), _tile(config),
                        (config["reg_c"], config["reg_x"]), reduce)
    if config["stage"] == "w":
        stage_shared(hl, mapping, w_in, out, cb, (config["threads_c"], config["threads_x"]))
    else:            # each step's weights in registers: one vector load of reg_c channels
        w_in.compute_at(acc, ri).store_in(hl.MemoryType.Register)
        w_in.unroll(w_in.args()[0])
        mapping.vectorize(w_in, w_in.args()[0], config["reg_c"])
