"""Every valid configuration of the conv templates (direct, GEMM-style, Winograd, depthwise)
computes the reference result (any knob setting may be slow, none may be wrong)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.tasks.chain import ChainTask
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.separable import SeparableTask

pytest.importorskip("halide")
from woodpecker.engines.halide import (  # noqa: E402
    conv_chain,
    conv_depthwise,
    conv_direct,
    conv_gemm,
    conv_separable,
    conv_winograd,
)
from woodpecker.engines.halide.templates import kernel_arguments  # noqa: E402
from woodpecker.tune.worker import TOLERANCE, relative_error  # noqa: E402

DEPTHWISE = [
    ConvTask(1, 16, 10, 10, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 16, True,
             (("Clip", 0.0, 6.0),)),
    ConvTask(1, 24, 9, 9, 24, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 24, False,
             (("Add",), ("Relu",))),
    ConvTask(1, 8, 12, 12, 8, 5, 5, (1, 1), (4, 4, 4, 4), (2, 2), 8, True, ()),
    # DARTS' ReLU before the conv, applied inside it (a prologue)
    ConvTask(1, 16, 8, 8, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 16, False, (),
             prologue=(("Relu", (("in", 0),), ()),)),
    # a squeeze-and-excitation channel scale read as a run-time vector, stride 2, HardSigmoid
    ConvTask(2, 16, 9, 9, 16, 5, 5, (2, 2), (2, 2, 2, 2), (1, 1), 16, True,
             (("HardSigmoid", 0.3, 0.1),), prologue=(("Mul", (("in", 0), ("in", 1)), ()),)),
]
# Squeeze-and-excitation: the gate's run-time per-channel vector scales the input as it is read
SE_SCALE = (("Mul", (("in", 0), ("in", 1)), ()),)
# Sigmoid(0) is 0.5: the zero padding must come after the prologue, as the conv pads its input
SIGMOID_FIRST = (("Sigmoid", (("in", 0),), ()), ("HardSigmoid", (("step", 0),),
                                                 (("alpha", 0.3), ("beta", 0.1))))
TASKS = [
    ConvTask(1, 8, 9, 11, 12, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True,
             (("Add",), ("Relu",))),
    ConvTask(1, 5, 10, 10, 7, 3, 2, (2, 2), (0, 1, 2, 0), (1, 2), 1, False,
             (("Clip", 0.0, 6.0),)),
    ConvTask(2, 16, 6, 6, 32, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True,
             (("HardSwish",),)),
    ConvTask(1, 64, 5, 7, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True,
             (("Add",), ("Relu",))),   # room for reduction blocks (rc_block)
    ConvTask(2, 12, 7, 9, 8, 3, 3, (1, 1), (0, 1, 2, 0), (1, 1), 1, False,
             (("Clip", 0.0, 6.0),)),   # Winograd: a batch, uneven pads, part tiles
    # A model input read where it lies, NCHW: strided, 3x3 stride 1 (Winograd), unpadded 1x1
    ConvTask(1, 3, 11, 9, 16, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1, True,
             (("Clip", 0.0, 6.0),), x_layout="NCHW"),
    ConvTask(2, 3, 8, 10, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, False, (),
             x_layout="NCHW"),
    ConvTask(1, 4, 6, 7, 8, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True, (("Relu",),),
             x_layout="NCHW"),
    # element-wise steps on the input first (a prologue), padded (Winograd too), and on an
    # NCHW model input
    ConvTask(1, 8, 7, 8, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True, (("Relu",),),
             prologue=SIGMOID_FIRST),
    ConvTask(1, 3, 9, 9, 8, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1, False, (),
             x_layout="NCHW", prologue=SIGMOID_FIRST),
    # the squeeze-and-excitation scale before EfficientNet's 1x1 projection (with its
    # residual, a batch of two), and before a padded 3x3 (Winograd) with a HardSigmoid epilogue
    ConvTask(2, 24, 5, 6, 16, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True, (("Add",),),
             prologue=SE_SCALE),
    ConvTask(1, 16, 6, 6, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, False,
             (("HardSigmoid", 0.2, 0.5),), prologue=SE_SCALE),
    # batch 1: the scale may be folded into the weights instead (the `scale` knob)
    ConvTask(1, 24, 5, 6, 20, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True, (("Add",),),
             prologue=SE_SCALE),
]



def _separable(depthwise: ConvTask, k: int, bias: bool, epilogue: tuple) -> SeparableTask:
    """`depthwise`, then a 1x1 conv to `k` channels reading its output."""
    d = depthwise
    return SeparableTask(d, ConvTask(d.n, d.c, d.out_h, d.out_w, k, 1, 1, (1, 1), (0, 0, 0, 0),
                                     (1, 1), 1, bias, epilogue))


# Depthwise then pointwise as one kernel: MobileNet's block (residual), DARTS' (a ReLU
# prologue, no biases), a 5x5 dilated one, a batch of two.
SEPARABLE = [_separable(DEPTHWISE[0], 24, True, (("Add",),)),
             _separable(DEPTHWISE[3], 16, False, ()),
             _separable(DEPTHWISE[2], 8, True, (("Relu",),)),
             _separable(ConvTask(2, 32, 9, 14, 32, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 32, True,
                                 (("Relu",),)), 20, False, (("Add",), ("Relu",)))]

# Grouped convs (RegNet's group width 16, ResNeXt-like 4 channels a group, strided, a residual)
GROUPED = [
    ConvTask(1, 32, 7, 9, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 2, True, (("Relu",),)),
    ConvTask(2, 16, 8, 8, 32, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 4, False,
             (("Add",), ("Relu",))),
    ConvTask(1, 48, 6, 6, 48, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 3, True, (),
             prologue=SE_SCALE),
]


def _after(t: ConvTask, k: int, kh: int = 1, stride: int = 1, groups: int = 1,
           bias: bool = True, epilogue: tuple = (("Relu",),), pad: int = 0) -> ConvTask:
    """A conv reading `t`'s output (k output channels; depthwise when groups = k)."""
    return ConvTask(t.n, t.k, t.out_h, t.out_w, k, kh, kh, (stride, stride), (pad,) * 4,
                    (1, 1), groups, bias, epilogue)


_EXPAND = ConvTask(1, 8, 9, 10, 24, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True,
                   (("Clip", 0.0, 6.0),))
# AGO's intensive fusion (conv_chain): MobileNet's whole inverted residual block (residual),
# its strided expansion half, a 3x3 conv then a 1x1 (a batch of two, no biases), a 5x5 window
CHAINS = [
    ChainTask((_EXPAND, _after(_EXPAND, 24, 3, groups=24, pad=1),
               _after(_after(_EXPAND, 24, 3, groups=24, pad=1), 8, epilogue=(("Add",),)))),
    ChainTask((_EXPAND, _after(_EXPAND, 24, 3, stride=2, groups=24, pad=1))),
    ChainTask((ConvTask(2, 8, 7, 6, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, False,
                        (("Relu",),)),
               _after(ConvTask(2, 8, 7, 6, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, False,
                               ()), 12, bias=False, epilogue=()))),
    ChainTask((_EXPAND, _after(_EXPAND, 24, 5, groups=24, pad=2, bias=False),
               _after(_after(_EXPAND, 24, 5, groups=24, pad=2), 16, epilogue=()))),
]
CASES = [(conv_direct, t) for t in TASKS + GROUPED] + \
    [(conv_depthwise, t) for t in DEPTHWISE] + \
    [(conv_gemm, t) for t in TASKS if conv_gemm.supports(t)] + \
    [(conv_winograd, t) for t in TASKS if conv_winograd.supports(t)] + \
    [(conv_separable, t) for t in SEPARABLE] + \
    [(conv_chain, t) for t in CHAINS]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(range(len(CASES))), st.integers(0, 2**16))
def test_random_valid_config_is_correct(which, seed):
    template, task = CASES[which]
    assert template.supports(task)
    space = template.space(task)
    config = space.sample(random.Random(seed))
    inputs = task.random_inputs(seed)
    got = template.build(task, config)(*kernel_arguments(template, task, config, inputs))
    ref = task.reference(inputs)
    if template is conv_winograd:
        # Winograd's transforms round at the scale of the whole tile, not of each output, so
        # a small output may be off by more than 1e-4 of itself; the tuner's bound is on the
        # output's scale (F(4x4, 3x3) measures 2e-6 to 3e-5 of it).
        assert relative_error(got, ref) <= TOLERANCE, config
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=str(config))
    assert task.from_json(task.to_json()) == task


@pytest.mark.parametrize("task", CHAINS, ids=lambda t: t.describe())
def test_chain_seeds_and_random_configs_are_correct(task):
    space = conv_chain.space(task)
    assert conv_chain.supports(task) and space.seeds
    rng = random.Random(1)
    inputs = task.random_inputs(3)
    ref = task.reference(inputs)
    configs = list(space.seeds[:3]) + [space.sample(rng) for _ in range(2)]
    for config in configs + _packed_variants(space, rng):
        args = kernel_arguments(conv_chain, task, config, inputs)
        got = conv_chain.build(task, config)(*args)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=str(config))
    assert task.from_json(task.to_json()) == task


def _packed_variants(space, rng, n: int = 2) -> list[dict]:
    """Up to `n` sampled configs with weights packed per channel tile (`s{i}_pack`, `pack`),
    one in channel tiles when the space has them."""
    out = []
    for _ in range(400):
        c = space.sample(rng)
        packs = [k for k in c if k == "pack" or k.endswith("_pack")]
        wanted = "channels" if not out and "tile" in c else c.get("tile")
        if any(c[k] for k in packs) and c.get("tile") == wanted:
            out.append(c)
        if len(out) == n:
            break
    return out


def test_chain_packs_the_weights_of_its_tiled_stages():
    """Each packed stage's HWIO weights become (K/T, C, T) for its tile T; others stay."""
    task = CHAINS[0]
    config = {**conv_chain.space(task).seeds[0], "s0_pack": True, "s0_vec": 8, "s0_cb": 3,
              "pack": True, "vec": 8, "co_block": 1}
    inputs = task.random_inputs(0)
    args = kernel_arguments(conv_chain, task, config, inputs)
    w0, w2 = inputs[1], inputs[5]                       # x, w0, b0, w1, b1, w2, b2, residual
    assert args[1].shape == (1, 8, 24) and np.array_equal(args[1][0, :, 5], w0[0, 0, :, 5])
    assert args[5].shape == (1, 24, 8) and np.array_equal(args[5][0, :, 3], w2[0, 0, :, 3])
    assert args[3] is inputs[3] and args[7] is inputs[7]


def test_chain_packs_channels_no_tile_divides_in_padded_tiles():
    """ShuffleNet-like channel counts (12 here; 58, 116, 232 there): weights zero-padded to
    whole tiles of 8, the last tile's stores masked, the bias added past the padding."""
    pw = ConvTask(1, 12, 7, 6, 12, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True, (("Relu",),))
    task = ChainTask((pw, _after(pw, 12, 3, groups=12, pad=1, epilogue=()),
                      _after(pw, 12, epilogue=(("Relu",),))))
    space = conv_chain.space(task)
    inputs = task.random_inputs(4)
    for rows, at in ((2, "strip"), (1, "root")):
        config = {"vec": 8, "co_block": 1, "x_block": 4, "co_outer": False, "rows": rows,
                  "pack": True, "s0_at": at, "s0_vec": 8, "s0_cb": 1, "s0_x": 4,
                  "s0_flat": True, "s0_pack": True, "s1_at": at, "s1_vec": 4, "s1_x": 2}
        assert space.is_valid(config), space.violations(config)
        args = kernel_arguments(conv_chain, task, config, inputs)
        assert args[1].shape == (2, 12, 8) and not args[1][1, :, 4:].any()   # zero padding
        got = conv_chain.build(task, config)(*args)
        np.testing.assert_allclose(got, task.reference(inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("task", SEPARABLE)
@pytest.mark.parametrize("pad", ["inline", "strip"])
def test_separable_seeds_are_correct(task, pad):
    space = conv_separable.space(task)
    assert space.seeds
    for config in space.seeds:
        config = {**config, "pad": pad}
        if not space.is_valid(config):
            continue
        inputs = task.random_inputs(2)
        got = conv_separable.build(task, config)(*inputs)
        np.testing.assert_allclose(got, task.reference(inputs), rtol=1e-4, atol=1e-4,
                                   err_msg=str(config))


def test_register_constraint_prunes_the_space():
    space = conv_direct.space(TASKS[2], vector_registers=16)
    assert space.violations({"vec": 8, "co_block": 4, "x_block": 5, "parallel": "rows",
                             "pad": "root", "unroll_kw": False, "skew": 0, "rc_block": 0,
                             "pack": False}) == \
        ["accumulators fit the vector registers"]
    assert all(c["co_block"] * c["x_block"] <= 15 for c in space.valid_configs())


def test_sixteen_lanes_take_one_register_with_avx512():
    """32 vector registers are AVX-512's 16-lane zmm registers: a 16-lane accumulator is one of
    them, where AVX2 needs two 8-lane ones."""
    config = {"vec": 16, "co_block": 2, "x_block": 7, "panel": 1, "col": "inline",
              "parallel": "co", "pad": "inline", "unroll_kw": False}
    assert conv_gemm.space(TASKS[2], vector_registers=32).violations(config) == []
    assert conv_gemm.space(TASKS[2], vector_registers=16).violations(config) == \
        ["accumulators fit the vector registers"]


@pytest.mark.parametrize("task", DEPTHWISE)
@pytest.mark.parametrize("x_block", [1, 4])
def test_depthwise_padding_per_channel_tile_is_correct(task, x_block):
    config = {"vec": 8, "c_block": 1, "x_block": x_block, "parallel": "co", "pad": "tile",
              "unroll_k": True}
    assert conv_depthwise.space(task).violations(config) == []
    inputs = task.random_inputs(1)
    got = conv_depthwise.build(task, config)(*kernel_arguments(conv_depthwise, task, config,
                                                                inputs))
    np.testing.assert_allclose(got, task.reference(inputs), rtol=1e-4, atol=1e-4)
    assert conv_depthwise.space(task).violations({**config, "parallel": "rows"}) == \
        ["per-tile padding needs channel tiles in parallel"]


def test_compiled_kernel_is_cached_and_rejects_bad_buffers():
    from woodpecker.errors import EngineError

    task, config = TASKS[2], {"vec": 8, "co_block": 2, "x_block": 2, "parallel": "rows",
                              "pad": "inline", "unroll_kw": False, "skew": 0, "rc_block": 0}
    kernel = conv_direct.build(task, config)
    assert conv_direct.build(task, config).path == kernel.path
    inputs = task.random_inputs(0)
    with pytest.raises(EngineError, match="Halide kernel"):
        kernel(inputs[0].astype(np.float64), *inputs[1:])


@pytest.mark.parametrize("rc_block,skew,x_block,pack,parallel", [
    (16, 16, 3, False, "co"), (32, 0, 7, False, "co"), (16, 16, 3, True, "co"),
    (0, 0, 4, True, "rows"), (0, 16, 5, True, "rows_co")])
def test_reduction_split_skew_and_packing_are_correct(rc_block, skew, x_block, pack, parallel):
    task = TASKS[3]
    config = {"vec": 8, "co_block": 2, "x_block": x_block, "parallel": parallel, "pad": "root",
              "unroll_kw": True, "skew": skew, "rc_block": rc_block, "pack": pack}
    assert not conv_direct.space(task).violations(config)
    inputs = task.random_inputs(1)
    got = conv_direct.build(task, config)(*kernel_arguments(conv_direct, task, config, inputs))
    np.testing.assert_allclose(got, task.reference(inputs), rtol=1e-4, atol=1e-4)


def test_unpadded_layer_with_rounded_up_pixel_tiles_is_correct():
    """A reduction split rounds pixel tiles up past the row: an unpadded layer must then
    still bounds-check its reads."""
    task = ConvTask(1, 32, 5, 7, 16, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True, ())
    config = {"vec": 8, "co_block": 2, "x_block": 3, "parallel": "co", "pad": "inline",
              "unroll_kw": False, "skew": 0, "rc_block": 16, "pack": True}
    assert not conv_direct.space(task).violations(config)
    inputs = task.random_inputs(2)
    got = conv_direct.build(task, config)(*kernel_arguments(conv_direct, task, config, inputs))
    np.testing.assert_allclose(got, task.reference(inputs), rtol=1e-4, atol=1e-4)


def test_packing_needs_whole_channel_tiles():
    config = {"vec": 8, "co_block": 1, "x_block": 2, "parallel": "co", "pad": "root",
              "unroll_kw": False, "skew": 0, "rc_block": 0, "pack": True}
    assert conv_direct.space(TASKS[0]).violations(config) == \
        ["packed weights: the channel tile divides the output channels"]
    assert conv_direct.weights(TASKS[3], config, np.zeros((3, 3, 64, 16))).shape == \
        (2, 3, 3, 64, 8)


@pytest.mark.parametrize("col,parallel,panel", [("panel", "p", 4), ("root", "co", 1),
                                                ("inline", "p", 2)])
def test_gemm_panels_across_row_ends_are_correct(col, parallel, panel):
    """Pixel tiles of the GEMM template run across row ends (5 pixels, 7-wide rows) and the
    im2col panel gathers a strided, dilated, padded window."""
    task = ConvTask(1, 6, 13, 15, 16, 3, 3, (2, 2), (1, 2, 1, 0), (2, 1), 1, True,
                    (("Add",), ("Relu",)))
    config = {"vec": 8, "co_block": 2, "x_block": 5, "panel": panel, "col": col,
              "parallel": parallel, "pad": "root", "unroll_kw": True}
    assert not conv_gemm.space(task).violations(config)
    inputs = task.random_inputs(4)
    got = conv_gemm.build(task, config)(*kernel_arguments(conv_gemm, task, config, inputs))
    np.testing.assert_allclose(got, task.reference(inputs), rtol=1e-4, atol=1e-4)


def test_gemm_pads_channel_tiles():
    """58 output channels (ShuffleNet's) in 16-channel tiles: the weights are zero-padded to
    64 channels, the bias moves to the output and the last tile's stores are masked."""
    task = ConvTask(1, 24, 5, 6, 58, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True,
                    (("Add",), ("Relu",)))
    config = {"vec": 8, "co_block": 2, "x_block": 6, "panel": 1, "col": "inline",
              "parallel": "co", "pad": "inline", "unroll_kw": False}
    assert not conv_gemm.space(task).violations(config)
    assert conv_gemm.weights(task, config, np.zeros((1, 1, 24, 58))).shape == (4, 24, 16)
    inputs = task.random_inputs(5)
    got = conv_gemm.build(task, config)(*kernel_arguments(conv_gemm, task, config, inputs))
    np.testing.assert_allclose(got, task.reference(inputs), rtol=1e-4, atol=1e-4)
    wide = {**config, "vec": 16, "co_block": 3, "x_block": 1}   # 96 lanes for 58 channels
    assert conv_gemm.space(task).violations(wide) == [
        "channel tiles padded by less than a vector or a third of the channels"]


@pytest.mark.parametrize("m", sorted(conv_winograd.MATRICES))
def test_winograd_matrices_compute_a_correlation(m):
    """Aᵀ[(G g) ⊙ (Bᵀ d)] is the valid 1-d correlation of an (m+2)-long input with a 3-tap
    filter (Lavin & Gray 2016, Eq. 1-2): the 2-d transforms are this applied per axis."""
    bt, g, at = conv_winograd.MATRICES[m]
    rng = np.random.default_rng(m)
    d, f = rng.standard_normal(m + 2), rng.standard_normal(3)
    np.testing.assert_allclose(at @ ((g @ f) * (bt @ d)), np.correlate(d, f, "valid"),
                               rtol=1e-12, atol=1e-12)


def test_winograd_covers_only_unit_stride_3x3():
    assert conv_winograd.supports(TASKS[0]) and conv_winograd.supports(TASKS[4])
    assert not conv_winograd.supports(TASKS[1])     # 3x2, strided, dilated
    assert not conv_winograd.supports(TASKS[2])     # 1x1
    config = {"m": 4, "vec": 8, "co_block": 1, "t_block": 4, "parallel": "e"}
    space = conv_winograd.space(TASKS[3])          # 5 x 7 pixels: 2 x 2 tiles of 4 x 4
    assert space.violations(config) == []
    assert space.violations(dict(config, t_block=5)) == ["tile block within the tiles"]
    assert space.violations(dict(config, t_block=5, m=2)) == []      # 3 x 4 tiles of 2 x 2
    w = np.random.default_rng(0).standard_normal((3, 3, 64, 16))
    packed = conv_winograd.weights(TASKS[3], config, w)
    assert packed.shape == (2, 6, 6 + 3, 64, 8)        # U, then the raw 3x3 weights
    np.testing.assert_array_equal(packed[1, :3, 6:, 5, 2], w[:, :, 5, 8 + 2].astype(np.float32))


def test_a_model_input_is_read_where_it_lies():
    """A conv reading a model input of ≤ 4 channels reads it in NCHW (no layout conversion
    before it); a conv reading another value, or one of more channels, reads NHWC, and its key
    is the one earlier tuning logs recorded (no x_layout). Each supporting template's first
    valid config computes the reference on the NCHW input."""
    from woodpecker.ir.graph import Graph

    g = Graph("stem")
    x = g.value("x", (1, 3, 9, 9), np.float32)
    g.inputs.append(x)
    attrs = {"_pads": [1, 1, 1, 1], "strides": [1, 1], "dilations": [1, 1]}
    mid = g.value("mid", (1, 4, 9, 9), np.float32)
    first = g.add_node("Conv", [x, g.const(np.ones((4, 3, 3, 3), np.float32), "w0")], [mid],
                       dict(attrs), name="first")
    second = g.add_node("Conv", [mid, g.const(np.ones((4, 4, 3, 3), np.float32), "w1")],
                        [g.value("y", (1, 4, 9, 9), np.float32)], dict(attrs), name="second")
    stem, inner = ConvTask.from_node(first), ConvTask.from_node(second)
    assert (stem.x_layout, inner.x_layout) == ("NCHW", "NHWC")
    assert "x_layout" not in inner.key and '"x_layout":"NCHW"' in stem.key
    assert ConvTask.from_json(stem.to_json()) == stem
    assert (stem.input_layout(0), inner.input_layout(0)) == ("", "NHWC")
    inputs = stem.random_inputs(3)
    assert inputs[0].shape == (1, 3, 9, 9)
    for template in (conv_direct, conv_gemm, conv_winograd):
        config = next(iter(template.space(stem).valid_configs()))
        got = template.build(stem, config)(*kernel_arguments(template, stem, config, inputs))
        ref = stem.reference(inputs)
        assert relative_error(got, ref) <= TOLERANCE, (template.__name__, config)


@pytest.mark.parametrize("registers", [16, 32])
def test_a_stem_conv_tries_the_stem_seeds_first_and_they_are_correct(registers):
    """A conv reading the model's NCHW input starts from conv_direct.STEM_SEEDS (those that fit
    the registers), each computing the reference; a conv reading NHWC does not."""
    stem = ConvTask(1, 3, 17, 19, 32, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1, True,
                    (("Relu",),), x_layout="NCHW")
    space = conv_direct.space(stem, registers)
    fitting = [s for s in conv_direct.STEM_SEEDS if space.is_valid(s)]
    assert fitting and space.seeds[:len(fitting)] == fitting
    inner = conv_direct.space(dataclasses.replace(stem, x_layout="NHWC"), registers)
    assert not any(s in inner.seeds for s in conv_direct.STEM_SEEDS)
    inputs = stem.random_inputs(1)
    for config in fitting:
        got = conv_direct.build(stem, config)(
            *kernel_arguments(conv_direct, stem, config, inputs))
        assert relative_error(got, stem.reference(inputs)) <= TOLERANCE, config


@pytest.mark.parametrize("task", [t for t in TASKS + DEPTHWISE if t.prologue])
def test_a_prologue_is_applied_before_the_padding(task):
    """Every template's first and a sampled config compute the reference of a conv with a
    prologue (passes/fuse_prologue.py), Sigmoid's included: the padding is zero after it."""
    inputs = task.random_inputs(5)
    ref = task.reference(inputs)
    templates = [t for t in (conv_direct, conv_gemm, conv_winograd, conv_depthwise)
                 if t.supports(task)]
    assert templates
    for template in templates:
        space = template.space(task)
        for config in (next(iter(space.valid_configs())), space.sample(random.Random(1))):
            got = template.build(task, config)(*kernel_arguments(template, task, config,
                                                                 inputs))
            assert relative_error(got, ref) <= TOLERANCE, (template.__name__, config)
    assert task.from_json(task.to_json()) == task and "prologue" in task.key


@pytest.mark.parametrize("template", [conv_direct, conv_gemm])
@pytest.mark.parametrize("task", [t for t in TASKS if t.prologue == SE_SCALE and t.n == 1])
def test_a_channel_scale_folded_into_the_weights_is_exact(template, task):
    """The `scale` knob: the squeeze-and-excitation scale applied to the input as it is read,
    or folded into the weights once per call (padded 3x3 and 1x1 with a residual; every seed
    of each template, both ways) — the same result as the reference."""
    space = template.space(task)
    assert space.knobs[-1].name == "scale"
    assert {c["scale"] for c in space.seeds} == {"input", "weights"}
    inputs = task.random_inputs(3)
    ref = task.reference(inputs)
    for seed in space.seeds:
        for scale in ("input", "weights"):
            config = dict(seed, scale=scale)
            args = kernel_arguments(template, task, config, inputs)
            np.testing.assert_allclose(template.build(task, config)(*args), ref, rtol=1e-4,
                                       atol=1e-4, err_msg=str(config))


def test_no_scale_knob_where_the_scale_cannot_be_folded():
    """A batch of two (a vector per image), a grouped conv, a prologue that is not only a
    scale: the input is scaled as it is read, no knob."""
    for task in [TASKS[10], GROUPED[2], TASKS[8]]:
        assert task.prologue
        assert "scale" not in [k.name for k in conv_direct.space(task).knobs]
