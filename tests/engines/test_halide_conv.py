"""Every valid configuration of the direct conv template computes the reference result
(any knob setting may be slow, none may be wrong)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.ops.conv import conv
from woodpecker.ops.fused import apply_epilogue
from woodpecker.tune.task import ConvTask

pytest.importorskip("halide")
from woodpecker.engines.halide import conv_direct  # noqa: E402

TASKS = [
    ConvTask(1, 8, 9, 11, 12, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True,
             (("Add",), ("Relu",))),
    ConvTask(1, 5, 10, 10, 7, 3, 2, (2, 2), (0, 1, 2, 0), (1, 2), 1, False,
             (("Clip", 0.0, 6.0),)),
    ConvTask(2, 16, 6, 6, 32, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True,
             (("HardSwish",),)),
]


def _reference(task, x, w, b, res):
    attrs = {"_pads": [task.pads[0], task.pads[1], task.pads[2], task.pads[3]],
             "strides": list(task.stride), "dilations": list(task.dilation), "group": 1}
    y = conv(attrs, x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), b)
    steps = [{"op": s[0], **({"min": s[1], "max": s[2]} if s[0] == "Clip" else {})}
             for s in task.epilogue]
    return apply_epilogue(y.transpose(0, 2, 3, 1), steps, res)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(range(len(TASKS))), st.integers(0, 2**16))
def test_random_valid_config_is_correct(which, seed):
    task = TASKS[which]
    space = conv_direct.space(task)
    config = space.sample(random.Random(seed))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((task.n, task.h, task.w, task.c)).astype(np.float32)
    w = rng.standard_normal((task.kh, task.kw, task.c, task.k)).astype(np.float32)
    b = rng.standard_normal(task.k).astype(np.float32) if task.has_bias else None
    res = [rng.standard_normal((task.n, task.out_h, task.out_w, task.k)).astype(np.float32)
           for s in task.epilogue if s[0] == "Add"]
    got = conv_direct.build(task, config)(x, w, b, *res)
    np.testing.assert_allclose(got, _reference(task, x, w, b, res), rtol=1e-4, atol=1e-4,
                               err_msg=str(config))


def test_register_constraint_prunes_the_space():
    space = conv_direct.space(TASKS[2], vector_registers=16)
    assert space.violations({"vec": 8, "co_block": 4, "x_block": 5, "parallel": "rows",
                             "pad": "root", "unroll_kw": False}) == \
        ["accumulators fit the vector registers"]
    assert all(c["co_block"] * c["x_block"] <= 15 for c in space.valid_configs())
