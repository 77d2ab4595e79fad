"""Every valid configuration of the dense, pool, rows (softmax, layernorm, rmsnorm), element-wise,
attention, resize and transposed-convolution templates computes the reference result (any knob
setting may be slow, none may be wrong)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.tasks.attention import AttentionTask
from woodpecker.tasks.dense import DenseTask
from woodpecker.tasks.elementwise import ElementwiseTask
from woodpecker.tasks.pool import PoolTask
from woodpecker.tasks.rows import RowTask

pytest.importorskip("halide")
from tests.engines import test_conv_transpose, test_resize  # noqa: E402
from woodpecker.engines.halide import (  # noqa: E402
    attention,
    conv_transpose,
    dense,
    elementwise,
    pool,
    resize,
    rows,
)
from woodpecker.engines.halide.templates import kernel_arguments, templates_for  # noqa: E402

DENSE = [
    DenseTask(1, 1, 64, 40, True, "row", (), ()),                     # a classifier (GEMV)
    DenseTask(1, 13, 24, 32, True, "full", ("row",), (("Relu",),)),   # Gemm C (M, N), + bias
    DenseTask(3, 10, 16, 24, False, "", ("full",), (("Sigmoid",),)),  # attention-like, batched
    DenseTask(2, 9, 8, 12, False, "", (), (("Mul", 0.125),)),          # scaled q·kᵀ
    DenseTask(1, 7, 12, 8, False, "row", (), (("Clip", 0.0, 6.0),)),  # run-time 2-d B
    DenseTask(1, 49, 24, 32, True, "row", (), (("Gelu", "none"),)),    # ConvNeXt's MLP, GELU
    DenseTask(1, 9, 16, 24, True, "row", ("full",), (("Gelu", "tanh"),)),
]
POOL = [
    PoolTask(1, 16, 11, 11, "max", 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), False, False),
    PoolTask(2, 8, 10, 10, "max", 3, 3, (2, 2), (0, 0, 0, 0), (1, 1), True, False),
    PoolTask(1, 12, 10, 10, "avg", 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), True, False),
    PoolTask(1, 12, 10, 10, "avg", 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), False, True),
    PoolTask(1, 20, 7, 7, "avg", 7, 7, (1, 1), (0, 0, 0, 0), (1, 1), False, False),  # global
    PoolTask(1, 8, 12, 12, "max", 2, 2, (1, 1), (0, 0, 1, 1), (2, 2), False, False),
    # a quantized model's max pools, on its 8-bit tensors (passes/fold_qdq.py)
    PoolTask(1, 16, 11, 11, "max", 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), False, False, "uint8"),
    PoolTask(1, 8, 10, 10, "max", 3, 3, (2, 2), (0, 1, 0, 1), (1, 1), True, False, "int8"),
]
ROWS = [
    RowTask(12, 32, "softmax", 0.0, False),
    RowTask(5, 13, "softmax", 0.0, False),        # a row that is no whole number of vectors
    RowTask(9, 48, "layernorm", 1e-5, True),
    RowTask(3, 20, "layernorm", 1e-3, False),
    RowTask(7, 40, "rmsnorm", 1e-6, False),
]
_IN0, _IN1, _IN2 = ("in", 0), ("in", 1), ("in", 2)
ELEMENTWISE = [
    # RandWire's weighted sum, then a Clip and a Div; 12 channels: a tail for 8-lane vectors
    ElementwiseTask(1, 5, 6, 12, 3, 6, (
        ("Mul", (_IN0, ("const", 0)), ()), ("Mul", (_IN1, ("const", 1)), ()),
        ("Mul", (("const", 2), _IN2), ()), ("Add", (("step", 0), ("step", 1)), ()),
        ("Add", (("step", 3), ("step", 2)), ()), ("Relu", (("step", 4),), ()),
        ("Clip", (("step", 5), ("const", 3), ("const", 4)), ()),
        ("Div", (("step", 6), ("const", 5)), ()))),
    # a BatchNormalization (scale and shift per channel) and a per-channel Mul
    ElementwiseTask(1, 4, 3, 8, 1, 24, (
        ("Mul", (_IN0, ("channel", 0)), ()), ("Add", (("step", 0), ("channel", 8)), ()),
        ("Mul", (("channel", 16), ("step", 1)), ()))),
    # every activation, a Clip without a minimum, and a Sub
    ElementwiseTask(2, 3, 4, 4, 2, 1, (
        ("HardSigmoid", (_IN0,), (("alpha", 0.3), ("beta", 0.4))),
        ("HardSwish", (_IN1,), ()), ("Sub", (("step", 0), ("step", 1)), ()),
        ("Sigmoid", (("step", 2),), ()), ("Tanh", (("step", 3),), ()),
        ("Clip", (("step", 4), None, ("const", 0)), ()),
        ("LeakyRelu", (("step", 5),), (("alpha", 0.2),)))),
]
ATTENTION = [
    # 2 heads of 8 split from a packed (11, 1, 3·16) projection; 11 rows: tails everywhere
    AttentionTask(2, 11, 11, 8, 8, (528,) * 3, ((0, 8, 48, 1), (16, 8, 48, 1), (32, 8, 48, 1)),
                  (("Mul", 0.35),), ("bmn",), True),
    # cross attention, 7 keys given as Kᵀ (consecutive keys adjacent), a mask over the keys
    AttentionTask(3, 5, 7, 4, 12, (60, 84, 252), ((0, 20, 4, 1), (0, 28, 1, 7), (0, 84, 12, 1)),
                  (("Mul", 0.5),), ("n",), False),
    # one slice, the mask added before the scale, one mask over rows and keys
    AttentionTask(1, 20, 16, 16, 8, (320, 256, 128), ((0, 0, 16, 1), (0, 0, 16, 1),
                                                      (0, 0, 8, 1)),
                  (("Add",), ("Mul", 0.25)), ("mn",), False),
]
CASES = [(dense, t) for t in DENSE] + [(pool, t) for t in POOL] + [(rows, t) for t in ROWS] \
    + [(elementwise, t) for t in ELEMENTWISE] + [(attention, t) for t in ATTENTION] \
    + [(resize, t) for t in test_resize.TASKS] \
    + [(conv_transpose, t) for t in test_conv_transpose.TASKS]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(range(len(CASES))), st.integers(0, 2**16))
def test_random_valid_config_is_correct(which, seed):
    template, task = CASES[which]
    assert templates_for(task) == (template.__name__.rsplit(".", 1)[1],)
    config = template.space(task).sample(random.Random(seed))
    inputs = task.random_inputs(seed)
    got = template.build(task, config)(*kernel_arguments(template, task, config, inputs))
    want = task.reference(inputs)
    assert got.shape == want.shape == task.out_shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.max(np.abs(want)))


@pytest.mark.parametrize("rfactor", [False, True])
def test_every_rmsnorm_vector_width_is_correct(rfactor):
    task = RowTask(6, 64, "rmsnorm", 1e-6, False)
    inputs = task.random_inputs(3)
    inputs[0] += 5.0     # a large mean: x² sums stay positive and large
    for vec in (4, 8, 16):
        config = {"vec": vec, "grain": 4, "rfactor": rfactor, "stash": False, "fast_exp": False}
        got = rows.build(task, config)(*kernel_arguments(rows, task, config, inputs))
        np.testing.assert_allclose(got, task.reference(inputs), rtol=2e-6, atol=2e-6)


def test_dense_space_constraints():
    gemv, attention = DENSE[0], DENSE[2]
    for config in dense.space(gemv).valid_configs():
        assert config["m_block"] == 1 and gemv.n % (config["vec"] * config["n_block"]) == 0
    assert not any(c["pack"] for c in dense.space(attention).valid_configs())
    assert dense.space(gemv).violations({"vec": 16, "n_block": 3, "m_block": 1,
                                         "parallel": "n", "k_unroll": 1, "pack": True}) == \
        ["the column tile divides the output columns"]


def test_pool_space_constraints():
    global_pool, small = POOL[4], POOL[1]
    configs = list(pool.space(global_pool).valid_configs())
    assert configs and all(not c["unroll_k"] and c["pad"] == "inline" and c["x_block"] == 1
                           for c in configs)
    assert any(c["pad"] == "root" for c in pool.space(small).valid_configs()), \
        "ceil_mode's last window leaves the image: materialising the padding is an option"


@pytest.mark.parametrize("task", [t for t in POOL if pool._padded(t)])
def test_pool_padding_per_channel_tile_is_correct(task):
    config = {"vec": 4, "c_block": 1, "x_block": 2, "parallel": "co", "pad": "tile",
              "unroll_k": True}
    assert pool.space(task).violations(config) == []
    inputs = task.random_inputs(2)
    got = pool.build(task, config)(*kernel_arguments(pool, task, config, inputs))
    np.testing.assert_allclose(got, task.reference(inputs), rtol=1e-5, atol=1e-5)


def test_layernorm_keeps_digits_on_rows_with_a_large_mean():
    task = ROWS[2]
    x, scale, bias = task.random_inputs(3)
    x = x + np.float32(1000.0)
    config = {"vec": 8, "grain": 2, "rfactor": True, "stash": False}
    got = rows.build(task, config)(x, scale, bias)
    np.testing.assert_allclose(got, task.reference([x, scale, bias]), rtol=1e-3, atol=1e-3)


def test_unsupported_shapes_have_no_template():
    assert templates_for(DenseTask(1, 4, 8, 10, True, "", (), ())) == ()    # N not a vector
    assert templates_for(PoolTask(1, 3, 8, 8, "max", 2, 2, (2, 2), (0, 0, 0, 0), (1, 1),
                                  False, False)) == ()
