"""Depthwise 2-d convolution (groups = channels), NHWC, with the fused epilogue, on a GPU
(MobileNets', EfficientNets').

Algorithm: conv_depthwise.py's (`conv_depthwise.define`, shared): out[c, x, y, n] =
epilogue(b[c] + Σ_{kx,ky} w[c, 0, kx, ky] · in[c, x·s + kx·d − p, y·s + ky·d − p, n]) for
numpy NHWC input and output and HW1C weights; schedule: window.py's (threads along the
channels, `reg_x` neighbouring outputs per thread in registers).
"""

from __future__ import annotations

from dataclasses import replace

from woodpecker.engines.halide import conv_depthwise
from woodpecker.engines.halide.conv_common import own_shapes
from woodpecker.engines.halide.gpu import window
from woodpecker.engines.halide.gpu.mapping import FLOATS
from woodpecker.engines.halide.template_parts import narrowed
from woodpecker.tasks.conv import ConvTask

KIND = "conv2d"
space = window.space
views = own_shapes


def supports(task: ConvTask) -> bool:
    return type(task) is ConvTask and task.dtype in FLOATS \
        and not task.reads_nchw and conv_depthwise.supports(replace(task, dtype="float32"))



def define(hl, task: ConvTask, config: dict, mapping):
    io, out, acc, r, axes = conv_depthwise.define(hl, task)
    out = narrowed(hl, out, task.dtype)
    window.schedule(hl, config, mapping, out, acc, r, axes)
    return out, io.params
