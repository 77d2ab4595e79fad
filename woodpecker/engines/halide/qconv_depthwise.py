"""Depthwise int8 convolution (tasks/qconv.py with groups = channels), NHWC, requantised in the
same kernel.

Algorithm: acc[c, x, y, n] = β[c] + Σ_{kx,ky} u(x)[c, x·s + kx·d − p, y·s + ky·d − p, n] ·
w[c, kx, ky] — each product a u8 × s8 in 16 bits (|255 · −128| < 2^15), summed in int32 —;
out = saturate(round(float32(acc) · μ[c]) + y_zp). There is no reduction over channels, so,
as the fp32 depthwise template (conv_depthwise.py), the kernel is bound by memory traffic and
its schedule is `conv_common.window_space`'s: channel vectors × pixels register tiles, the
padded input (its zero point) inline, per tile or materialised, the window unrolled.

Weights: the node's HWIO (kh, kw, 1, C) seen as (kh, kw, C), read as they are.
"""

from __future__ import annotations

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import program_output, requantised, window_space
from woodpecker.engines.halide.template_parts import (
    compiled,
    halide_type,
    pad_input,
    register_tile,
    uint8_padded,
)
from woodpecker.tasks.qconv import QConvTask
from woodpecker.tasks.space import KnobSpace

KIND = "qconv2d"

# conv_depthwise's first seeds (its measurements on mobilenet_v2's and MnasNet's layers), the
# int8 data being a quarter of fp32's bytes per pixel.
SEEDS = tuple({"vec": vec, "c_block": c_block, "x_block": x_block, "parallel": parallel,
               "pad": pad, "unroll_k": True}
              for vec, c_block, x_block, parallel, pad in (
                  (16, 1, 4, "co", "tile"), (16, 2, 4, "co", "inline"),
                  (8, 1, 7, "co", "inline"), (16, 1, 2, "rows", "inline")))


def supports(task) -> bool:
    return isinstance(task, QConvTask) and task.groups == task.c == task.k and task.groups > 1 \
        and not task.program


def space(task: QConvTask, vector_registers: int = 16) -> KnobSpace:
    return window_space(task, vector_registers, seeds=SEEDS)


def arguments(task: QConvTask, config: dict, inputs: list) -> list:
    """The node's inputs → x, the weights (kh, kw, C), β, μ and the zero points
    (`QConvTask.kernel_arguments`)."""
    args = task.kernel_arguments(inputs)
    w = args[1]
    return [args[0], None if w is None else w.reshape(task.kh, task.kw, task.k), *args[2:]]


def views(task: QConvTask) -> list:
    return [None] * 7


def build(task: QConvTask, config: dict, threads: int = 2) -> AotKernel:
    hl = halide_module()
    x = hl.ImageParam(halide_type(hl, task.x_dtype), 4, "x")
    w = hl.ImageParam(hl.Int(8), 3, "w")           # [c, kx, ky]
    beta = hl.ImageParam(hl.Int(32), 1, "beta")
    mu = hl.ImageParam(hl.Float(32), 1, "mu")
    x_zp = hl.ImageParam(hl.UInt(8), 1, "x_zp")
    y_zp = hl.ImageParam(hl.Int(32), 1, "y_zp")
    c, ox, oy, n = hl.Var("c"), hl.Var("ox"), hl.Var("oy"), hl.Var("n")
    padded = uint8_padded(hl, task, x, x_zp)
    r = hl.RDom([(0, task.kw), (0, task.kh)], "r")
    (sy, sx), (dy, dx) = task.stride, task.dilation
    tap = padded[c, ox * sx + r.x * dx - task.pads[1], oy * sy + r.y * dy - task.pads[0], n]
    acc = hl.Func("acc")
    acc[c, ox, oy, n] = beta[c]
    acc[c, ox, oy, n] += hl.i32(hl.i16(tap) * hl.i16(w[c, r.x, r.y]))
    out = hl.Func("out")
    out[c, ox, oy, n] = program_output(hl, task, requantised(hl, task, acc[c, ox, oy, n], mu[c],
                                                             y_zp), (c, ox, oy, n), c, [])
    upd = register_tile(hl, out, acc, (c, ox, oy, n), (r.x, r.y), config["vec"],
                        config["c_block"], config["x_block"], config["parallel"])
    if config["unroll_k"]:
        upd.unroll(r.x).unroll(r.y)
    pad_input(padded, config["pad"], tile=(out, hl.Var("co"), config["vec"]))
    return compiled(__name__, task, config, threads, out, [x, w, beta, mu, x_zp, y_zp],
                    views(task))
