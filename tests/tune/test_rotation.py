"""Kernels are timed with their weights out of the caches, as a plan calls them."""

from __future__ import annotations

import numpy as np

from woodpecker.tune.rotation import MIN_WEIGHT_BYTES, ROTATED_BYTES, rotating_call


def test_each_call_reads_the_next_copy_of_the_weights():
    x = np.ones(4, np.float32)
    w = np.arange(MIN_WEIGHT_BYTES // 4 * 8, dtype=np.float32)   # 8x the threshold
    seen = []
    call = rotating_call(lambda a, b, c: seen.append((a, b, c)) or b.sum(), [x, w, "bias"])
    results = [call() for _ in range(2 * (ROTATED_BYTES // w.nbytes))]
    assert all(r == w.sum() for r in results)                     # same values every call
    copies = {id(b) for _, b, _ in seen}
    assert len(copies) == ROTATED_BYTES // w.nbytes               # copies filling ROTATED_BYTES
    assert id(w) not in copies                                    # never the caller's array
    assert all(a is x and c == "bias" for a, _, c in seen)        # other arguments as given
    assert id(seen[0][1]) != id(seen[1][1])                       # consecutive calls differ


def test_small_or_absent_weights_are_not_copied():
    x = np.ones(4, np.float32)
    small = np.ones(16, np.float32)
    seen = []
    rotating_call(lambda *a: seen.append(a), [x, small])()
    rotating_call(lambda *a: seen.append(a), [x])()
    rotating_call(lambda *a: seen.append(a), [x, None])()
    assert seen[0][1] is small and len(seen[1]) == 1 and seen[2][1] is None


def test_a_kernel_that_takes_its_output_writes_every_call_into_one_array():
    """As a plan's kernels write into the arena: no fresh output (and its page faults) per call,
    with weights rotated (large ones) or not (small ones)."""
    from woodpecker.engines.halide import dense
    from woodpecker.engines.halide.templates import kernel_arguments
    from woodpecker.tasks.dense import DenseTask

    for k in (16, 2 * MIN_WEIGHT_BYTES // (4 * 16)):
        task = DenseTask(1, 8, k, 16, True, "", (), ())
        config = next(iter(dense.space(task).valid_configs()))
        kernel = dense.build(task, config, threads=1)
        inputs = task.random_inputs(0)
        call = rotating_call(kernel, kernel_arguments(dense, task, config, inputs))
        first, second = call(), call()
        assert first is second and first.shape == task.out_shape
        np.testing.assert_allclose(first, task.reference(inputs), rtol=1e-4, atol=1e-4)
    outputs = []
    plain = rotating_call(lambda a: outputs.append(np.empty(3)) or outputs[-1], [np.ones(2)])
    assert plain() is not plain()                 # a callable without `out_shape`: as it is
