"""GPU schedule templates without a GPU (issue 54, device-free CI): each builds to PTX for two
compute capabilities, its register tiles stay in registers, its constraints reject configs a
device cannot launch, and the same loop nest run on this CPU (HostMapping) equals the task's
reference for drawn shapes and configs."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.assembly.gpu_steps import GPU_TEMPLATES, kernel_arguments
from woodpecker.engines.halide.gpu.build import build_gpu, build_host, ptx_of
from woodpecker.errors import EngineError
from woodpecker.target import Target
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.dense import DenseTask
from woodpecker.tasks.elementwise import ElementwiseRowsTask, ElementwiseTask
from woodpecker.tasks.movement import ConcatTask, MoveTask
from woodpecker.tasks.pool import PoolTask
from woodpecker.tasks.rows import RowTask

T4, A100 = Target.parse("cuda:t4"), Target.parse("cuda:a100")
conv, dense, depthwise, elementwise, movement, pool, rows, winograd, concat = (
    GPU_TEMPLATES[name] for name in ("conv", "dense", "depthwise", "elementwise", "movement",
                                     "pool", "rows", "winograd", "concat"))


def _dense(m=64, k=96, n=128, batch=1, weights=True, bias="row", relu=True) -> DenseTask:
    return DenseTask(batch=batch, m=m, k=k, n=n, weights=weights, bias=bias, residuals=(),
                     epilogue=(("Relu",),) if relu else ())


def _conv(c=16, hw=12, k=64, kernel=3, stride=1, residual=False) -> ConvTask:
    pad = kernel // 2
    return ConvTask(n=1, c=c, h=hw, w=hw, k=k, kh=kernel, kw=kernel, stride=(stride, stride),
                    pads=(pad,) * 4, dilation=(1, 1), groups=1, has_bias=True,
                    epilogue=(("Add",), ("Relu",)) if residual else (("Relu",),))


def _elementwise(h=5, w=7, c=24) -> ElementwiseTask:
    return ElementwiseTask(1, h, w, c, 2, 1, (
        ("Add", (("in", 0), ("in", 1)), ()), ("Mul", (("step", 0), ("const", 0)), ()),
        ("Relu", (("step", 1),), ())))


def _depthwise(c=32, hw=14, kernel=3, stride=1) -> ConvTask:
    pad = kernel // 2
    return ConvTask(n=1, c=c, h=hw, w=hw, k=c, kh=kernel, kw=kernel, stride=(stride, stride),
                    pads=(pad,) * 4, dilation=(1, 1), groups=c, has_bias=True,
                    epilogue=(("Clip", 0.0, 6.0),))


def _pool(reduce="max", c=32, hw=14, kernel=3, stride=2, pad=1) -> PoolTask:
    return PoolTask(1, c, hw, hw, reduce, kernel, kernel, (stride, stride), (pad,) * 4, (1, 1),
                    False, reduce == "avg")


def _transpose(shape=(2, 5, 3, 7), perm=(0, 2, 1, 3)) -> MoveTask:
    out = tuple(shape[p] for p in perm)
    return MoveTask(tuple(shape), out, tuple((perm.index(a), 0, 1) for a in range(len(shape))))


CASES = [(dense, _dense()), (conv, _conv()), (winograd, _conv()),
         (elementwise, _elementwise()),
         (depthwise, _depthwise()), (pool, _pool()),
         (rows, RowTask(64, 128, "softmax", 0.0, False)), (movement, _transpose()),
         (concat, ConcatTask(((1, 5, 5, 8), (1, 5, 5, 24)), 3, 1, True))]


@pytest.mark.parametrize("module, task", CASES, ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize("target", [T4, A100], ids=["sm_75", "sm_80"])
def test_seeds_build_to_ptx_in_registers(module, task, target):
    space = module.space(task, target.device)
    assert space.seeds, "a template's seeds fit its example task"
    for config in space.seeds:
        built = build_gpu(module, task, config, target)
        assert built.sm == {75: 75, 80: 80}[target.device.capability]
        assert built.kernels and built.path.exists()
        assert "cuda_capability" in built.target
        assert "__local_depot" not in built.ptx, "a register tile spilled to local memory"
        assert "ld.global" in built.ptx and "st.global" in built.ptx
        again = build_gpu(module, task, config, target)      # cached: the same object
        assert again.path == built.path and again.ptx == built.ptx


def test_staged_operands_are_read_from_shared_memory():
    task = _dense(m=32, k=64, n=64)
    config = {"threads_n": 16, "threads_m": 4, "reg_n": 2, "reg_m": 2, "k_step": 4,
              "stage": "ab"}
    assert dense.space(task, A100.device).is_valid(config)
    ptx = build_gpu(dense, task, config, A100).ptx
    assert "ld.shared" in ptx and "st.shared" in ptx and "bar.sync" in ptx
    wconf = {"threads_c": 8, "threads_x": 4, "reg_c": 2, "reg_x": 1, "c_step": 4,
             "unroll_window": True, "stage": "w"}
    assert "ld.shared" in build_gpu(conv, _conv(), wconf, A100).ptx


def test_constraints_reject_what_a_device_cannot_launch():
    space = dense.space(_dense(m=256, k=4096, n=256), A100.device)
    base = {"threads_n": 16, "threads_m": 8, "reg_n": 4, "reg_m": 4, "k_step": 8, "stage": "none"}
    assert space.is_valid(base)
    assert not space.is_valid({**base, "threads_n": 64, "threads_m": 32})     # 2048 threads
    assert not space.is_valid({**base, "stage": "b"})        # 64 columns × 4096 rows: 1 MiB
    assert not space.is_valid({**base, "threads_m": 32, "reg_m": 8, "reg_n": 4,
                               "threads_n": 32})             # registers × threads
    small = conv.space(_conv(c=256, k=64), A100.device)
    wide = {"threads_c": 16, "threads_x": 4, "reg_c": 4, "reg_x": 1, "c_step": 4,
            "unroll_window": True}
    assert small.is_valid({**wide, "stage": "none"}) and not small.is_valid({**wide, "stage": "w"})


def test_an_object_without_gpu_code_is_refused():
    with pytest.raises(EngineError, match="no GPU code"):
        ptx_of(b"\x7fELF host code only\0")
    with pytest.raises(EngineError, match="cuda target"):
        build_gpu(dense, _dense(), dense.SEEDS[0], Target.parse("cpu"))


def _check_on_host(module, task, seed: int) -> None:
    space = module.space(task, A100.device)
    config = space.sample(random.Random(seed))
    inputs = task.random_inputs(seed)
    got = build_host(module, task, config)(*kernel_arguments(module, task, config, inputs))
    np.testing.assert_allclose(got, task.reference(inputs), rtol=1e-4, atol=1e-4,
                               err_msg=str(config))


@settings(max_examples=6, deadline=None)
@given(st.integers(1, 70), st.sampled_from([4, 8, 36, 64]), st.sampled_from([32, 64, 96]),
       st.integers(1, 2), st.booleans(), st.sampled_from(["", "row", "full"]),
       st.integers(0, 2**16))
def test_dense_on_the_host_mapping_equals_the_reference(m, k, n, batch, weights, bias, seed):
    _check_on_host(dense, _dense(m, k, n, batch, weights, bias), seed)


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([4, 8, 12]), st.integers(7, 15), st.sampled_from([32, 48, 64]),
       st.sampled_from([1, 3]), st.integers(1, 2), st.booleans(), st.integers(0, 2**16))
def test_conv_on_the_host_mapping_equals_the_reference(c, hw, k, kernel, stride, residual,
                                                       seed):
    _check_on_host(conv, _conv(c, hw, k, kernel, stride, residual), seed)


@settings(max_examples=4, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.sampled_from([2, 4]), st.integers(5, 11),
       st.sampled_from([1, 3]), st.integers(1, 2), st.integers(0, 2**16))
def test_grouped_conv_on_the_host_mapping_equals_the_reference(groups, per_group, hw, kernel,
                                                               stride, seed):
    """RegNet's and ResNeXt's grouped convs: each output channel reads its group's inputs."""
    c = groups * per_group
    task = replace(_conv(c, hw, 2 * c, kernel, stride), groups=groups)
    assert conv.supports(task) and not depthwise.supports(task)
    _check_on_host(conv, task, seed)


@settings(max_examples=5, deadline=None)
@given(st.sampled_from([3, 8, 16]), st.integers(2, 13), st.sampled_from([8, 24, 64]),
       st.integers(1, 2), st.booleans(), st.integers(0, 2**16))
def test_winograd_on_the_host_mapping_equals_the_reference(c, hw, k, n, residual, seed):
    """F(2, 3) and F(4, 3): the input and output transforms' tiles past the image's edge
    (odd sizes), batches (tiles numbered across images), the epilogue with a residual; the
    weights transformed by the template's `arguments` as the plan does."""
    task = replace(_conv(c, hw, k, 3, 1, residual), n=n)
    assert winograd.supports(task)
    _check_on_host(winograd, task, seed)


def test_winograd_takes_3x3_stride_1_convs_only():
    assert not winograd.supports(_conv(16, 12, 64, 1, 1))
    assert not winograd.supports(_conv(16, 12, 64, 3, 2))
    assert not winograd.supports(replace(_conv(3, 12, 64, 3, 1), x_layout="NCHW"))


@settings(max_examples=4, deadline=None)
@given(st.integers(1, 6), st.integers(1, 9), st.integers(1, 40), st.integers(0, 2**16))
def test_elementwise_on_the_host_mapping_equals_the_reference(h, w, c, seed):
    _check_on_host(elementwise, _elementwise(h, w, c), seed)


@settings(max_examples=4, deadline=None)
@given(st.integers(1, 300), st.integers(1, 200), st.integers(0, 2**16))
def test_a_group_of_another_rank_on_the_host_mapping_equals_the_reference(n_rows, c, seed):
    """A transformer's residual sum with a per-feature constant: rows of the last axis in the
    tensor's own layout, the constant along it."""
    task = ElementwiseRowsTask(1, n_rows, 1, c, 2, c, (
        ("Add", (("in", 0), ("in", 1)), ()), ("Add", (("step", 0), ("channel", 0)), ())))
    assert elementwise.supports(task)
    assert elementwise.views(task) == [(1, n_rows, 1, c)] * 2 + [None, (1, n_rows, 1, c)]
    _check_on_host(elementwise, task, seed)


@settings(max_examples=6, deadline=None)
@given(st.integers(1, 70), st.integers(5, 15), st.sampled_from([3, 5]), st.integers(1, 2),
       st.integers(0, 2**16))
def test_depthwise_on_the_host_mapping_equals_the_reference(c, hw, kernel, stride, seed):
    assert depthwise.supports(_depthwise(c, hw, kernel, stride)) == (c > 1)
    if c > 1:
        _check_on_host(depthwise, _depthwise(c, hw, kernel, stride), seed)


@settings(max_examples=6, deadline=None)
@given(st.sampled_from(["max", "avg"]), st.integers(1, 40), st.integers(4, 12),
       st.sampled_from([(2, 2, 0), (3, 2, 1), (3, 1, 1)]), st.integers(0, 2**16))
def test_pool_on_the_host_mapping_equals_the_reference(reduce, c, hw, window, seed):
    kernel, stride, pad = window
    _check_on_host(pool, _pool(reduce, c, hw, kernel, stride, pad), seed)


@settings(max_examples=6, deadline=None)
@given(st.sampled_from(["softmax", "layernorm", "rmsnorm"]), st.integers(1, 40),
       st.integers(1, 200), st.booleans(), st.integers(0, 2**16))
def test_rows_on_the_host_mapping_equal_the_reference(op, n_rows, width, bias, seed):
    task = RowTask(n_rows, width, op, 1e-5 if op != "softmax" else 0.0,
                   bias and op == "layernorm")
    _check_on_host(rows, task, seed)


@settings(max_examples=8, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=5), st.data())
def test_movement_on_the_host_mapping_equals_numpy(shape, data):
    """A transposition, then one axis gathered at one index or sliced with a step."""
    perm = data.draw(st.permutations(range(len(shape))))
    task = _transpose(tuple(shape), tuple(perm))
    x = task.random_inputs(1)[0]
    np.testing.assert_array_equal(task.reference([x]), x.transpose(perm))
    _check_on_host(movement, task, 0)
    axis = data.draw(st.integers(0, len(shape) - 1))
    start = data.draw(st.integers(0, shape[axis] - 1))
    if data.draw(st.booleans()) and len(shape) > 1:
        axes = tuple((-1, start, 0) if a == axis else (a - (a > axis), 0, 1)
                     for a in range(len(shape)))
        out = tuple(d for a, d in enumerate(shape) if a != axis)
        want = np.take(x, start, axis=axis)
    else:
        step = data.draw(st.integers(1, 3))
        n = len(range(start, shape[axis], step))
        axes = tuple((a, start if a == axis else 0, step if a == axis else 1)
                     for a in range(len(shape)))
        out = tuple(n if a == axis else d for a, d in enumerate(shape))
        want = x[tuple(slice(start, None, step) if a == axis else slice(None)
                       for a in range(len(shape)))]
    picked = MoveTask(tuple(shape), out, axes)
    np.testing.assert_array_equal(picked.reference([x]), want)
    _check_on_host(movement, picked, 1)


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 4), st.data())
def test_concat_on_the_host_mapping_equals_numpy(rank, data):
    """Any rank, any axis, two to four inputs of different extents along it."""
    base = data.draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    axis = data.draw(st.integers(0, rank - 1))
    extents = data.draw(st.lists(st.integers(1, 6), min_size=2, max_size=4))
    shapes = tuple(tuple(e if a == axis else d for a, d in enumerate(base)) for e in extents)
    task = ConcatTask(shapes, axis, axis)
    inputs = task.random_inputs(0)
    config = concat.space(task, A100.device).sample(random.Random(0))
    got = build_host(concat, task, config)(*inputs)
    np.testing.assert_array_equal(got, np.concatenate(inputs, axis))
