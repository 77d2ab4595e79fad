"""The numpy engine's Transpose writes into the output array (the layout conversions)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from woodpecker.engines.numpy_ref import transpose_into


@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (2, 16, 3, 4), (1, 1, 1, 9), (4, 6)])
def test_transpose_into_matches_numpy(shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for perm in itertools.permutations(range(len(shape))):
        out = np.full(tuple(shape[p] for p in perm), np.nan, np.float32)
        transpose_into(out, x, perm)
        np.testing.assert_array_equal(out, x.transpose(perm))
