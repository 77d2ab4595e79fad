"""The ahead-of-time kernel call: its reused `halide_buffer_t`s follow each call's arrays."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from woodpecker.errors import EngineError
from woodpecker.tasks.rows import RowTask

pytest.importorskip("halide")
from woodpecker.engines.halide import rows  # noqa: E402

TASK = RowTask(6, 16, "softmax", 0.0, False)
CONFIG = rows.space(TASK).sample(random.Random(0))


def _check(kernel, x):
    np.testing.assert_allclose(kernel(x), TASK.reference([x]), rtol=1e-5, atol=1e-6)


def test_each_call_reads_its_own_arrays():
    kernel = rows.build(TASK, CONFIG)
    rng = np.random.default_rng(0)
    for _ in range(3):   # new input and output arrays every call
        _check(kernel, rng.standard_normal(TASK.out_shape).astype(np.float32))
    out = np.empty(TASK.out_shape, np.float32)
    x = rng.standard_normal(TASK.out_shape).astype(np.float32)
    assert kernel(x, out=out) is out
    np.testing.assert_allclose(out, TASK.reference([x]), rtol=1e-5, atol=1e-6)


def test_a_bound_call_reads_its_arrays_anew_each_time():
    """`bind` fixes the arrays, not their contents: the executor refills its arena views."""
    kernel = rows.build(TASK, CONFIG)
    rng = np.random.default_rng(2)
    x, out = np.empty(TASK.out_shape, np.float32), np.empty(TASK.out_shape, np.float32)
    call = kernel.bind(x, out=out)
    for _ in range(2):
        x[...] = rng.standard_normal(TASK.out_shape)
        call()
        np.testing.assert_allclose(out, TASK.reference([x]), rtol=1e-5, atol=1e-6)
    with pytest.raises(EngineError, match="takes 1 arrays"):
        kernel.bind(x, x, out=out)


def test_chained_calls_run_in_order_and_name_a_failing_kernel():
    """`BoundCall.chain` runs bound kernels in one foreign call (chain.c), in order: the second
    reads what the first wrote. A kernel failing inside is named in the error, and a chain
    stops there."""
    from woodpecker.engines.halide.aot import BoundCall

    kernel = rows.build(TASK, CONFIG)
    x, y, z = (np.empty(TASK.out_shape, np.float32) for _ in range(3))
    chain = BoundCall.chain([kernel.bind(x, out=y), kernel.bind(y, out=z)])
    x[...] = np.random.default_rng(3).standard_normal(TASK.out_shape)
    chain()
    want = TASK.reference([x])
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z, TASK.reference([want]), rtol=1e-5, atol=1e-6)

    first = kernel.bind(x, out=y)
    first._held[0][1][1].extent -= 1   # an input row short: Halide's bounds check fails
    z[...] = 7.0
    broken = BoundCall.chain([first, kernel.bind(y, out=z)])
    with pytest.raises(EngineError, match=kernel.path.name):
        broken()
    assert (z == 7.0).all()


def test_a_kernel_of_many_buffers_runs_outside_chains():
    """chain.c calls kernels of up to CHAIN_MAX_BUFFERS buffers: a bound call of more (a conv
    summing many inputs, as RandWire's nodes do, failed inside a chain) splits the run of
    bound steps around it, and `chain` refuses it rather than fail at run time."""
    from woodpecker.engines.base import Bound
    from woodpecker.engines.halide.aot import CHAIN_MAX_BUFFERS, BoundCall, _buffer
    from woodpecker.engines.halide.engine import _join
    from woodpecker.runtime.executor import Step, _chains

    kernel = rows.build(TASK, CONFIG)
    x, y = (np.zeros(TASK.out_shape, np.float32) for _ in range(2))
    small = kernel.bind(x, out=y)
    wide = BoundCall(kernel, [_buffer(x)] * (CHAIN_MAX_BUFFERS + 1), ([x], y))
    assert small.chainable and not wide.chainable
    steps = [Step(None, (), (), (), None, None,
                  Bound(call, _join if call.chainable else None, call))
             for call in (small, small, wide, small, small)]
    chains = _chains(steps)
    assert sorted(chains) == [0, 3] and chains[0][1] == 2 and chains[3][1] == 5
    with pytest.raises(ValueError, match="at most"):
        BoundCall.chain([small, wide])


def test_a_strided_array_is_refused_and_the_next_call_works():
    """Kernels need unit inner strides: a strided view of the same shape gets a one-line error
    (its strides differ, so its buffer is rebuilt rather than reusing the dense one), and the
    buffer is rebuilt again for the next dense array."""
    kernel = rows.build(TASK, CONFIG)
    rng = np.random.default_rng(1)
    _check(kernel, rng.standard_normal(TASK.out_shape).astype(np.float32))
    wide = rng.standard_normal((TASK.out_shape[0], 2 * TASK.out_shape[1])).astype(np.float32)
    with pytest.raises(EngineError, match="stride"):
        kernel(wide[:, ::2])
    _check(kernel, rng.standard_normal(TASK.out_shape).astype(np.float32))


def test_calls_from_several_threads():
    kernel = rows.build(TASK, CONFIG)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(50):
                _check(kernel, rng.standard_normal(TASK.out_shape).astype(np.float32))
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("threads,n_rows", [(3, 257), (1, 257), (2, 257), (3, 2), (2, 3)])
def test_the_thread_pool_grows_and_shrinks(threads, n_rows):
    """Woodpecker's pool (spin_pool.c) serves any thread count, also fewer than it has
    started (Halide's own pool cannot shrink); every count gives the same result. A large row
    count makes the rows template's parallel loop span many tasks; a loop shorter than the
    threads, or not a multiple of them, leaves shares empty or uneven (each row still runs
    exactly once)."""
    from woodpecker.engines.halide.aot import set_threads

    task = RowTask(n_rows, 64, "softmax", 0.0, False)
    config = rows.space(task).sample(random.Random(1))
    kernel = rows.build(task, config, threads)
    set_threads(threads)
    x = np.random.default_rng(threads).standard_normal(task.out_shape).astype(np.float32)
    try:
        np.testing.assert_allclose(kernel(x), task.reference([x]), rtol=1e-5, atol=1e-6)
    finally:
        set_threads(2)
