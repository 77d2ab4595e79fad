"""Max and average pooling (global average pooling included), NHWC, on a GPU.

Algorithm: pool.py's (`pool.define`, shared): the maximum (NaN-skipping, −∞ outside the
image) or the mean over the taps that count of each (kh × kw) window; schedule: window.py's.
A global pool is one window per image: threads along its channels only.
"""

from __future__ import annotations

from woodpecker.engines.halide.conv_common import own_shapes
from woodpecker.engines.halide.gpu import window
from woodpecker.engines.halide.gpu.mapping import FLOATS
from woodpecker.engines.halide.pool import define as define_pool
from woodpecker.engines.halide.template_parts import narrowed
from woodpecker.tasks.pool import PoolTask

KIND = "pool"
space = window.space
views = own_shapes


def supports(task: PoolTask) -> bool:
    return task.dtype in FLOATS



def define(hl, task: PoolTask, config: dict, mapping):
    d = define_pool(hl, task)
    out = narrowed(hl, d.out, task.dtype)
    window.schedule(hl, config, mapping, out, d.acc, d.r, d.axes)
    return out, [d.x]
