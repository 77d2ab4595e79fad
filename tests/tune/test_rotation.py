"""Kernels are timed with their weights out of the caches, as a plan calls them."""

from __future__ import annotations

import numpy as np

from woodpecker.tune.rotation import (
    MIN_INPUT_BYTES,
    MIN_WEIGHT_BYTES,
    ROTATED_BYTES,
    rotating_call,
)


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


def test_an_input_larger_than_a_cores_l2_rotates_with_the_weights():
    x = np.arange(MIN_INPUT_BYTES // 4, dtype=np.float32)
    w = np.ones(MIN_WEIGHT_BYTES // 4, np.float32)
    seen = []
    call = rotating_call(lambda a, b: seen.append((a, b)) or a.sum() + b.sum(), [x, w])
    count = ROTATED_BYTES // (x.nbytes + w.nbytes)
    results = [call() for _ in range(2 * count)]
    assert all(r == x.sum() + w.sum() for r in results)
    assert len({id(a) for a, _ in seen}) == len({id(b) for _, b in seen}) == count
    assert all(a is not x and b is not w for a, b in seen)
    seen.clear()
    rotating_call(lambda *a: seen.append(a), [x[: MIN_INPUT_BYTES // 8], w])()
    assert seen[0][0].base is x                                   # a smaller input stays put
