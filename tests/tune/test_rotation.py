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
