"""Native block-swap transposes (engines/halide/movement.py) against numpy, and the numpy
engine's Transpose that uses them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from woodpecker.engines.halide.movement import block_swap, swapper

pytest.importorskip("halide")


@pytest.mark.parametrize("perm,want", [((0, 2, 3, 1), (1, 2)), ((0, 3, 1, 2), (1, 3)),
                                       ((0, 1, 2, 4, 3), (3, 4)), ((2, 0, 1), (0, 2)),
                                       ((0, 1, 2), None), ((1, 0, 2, 3), None),
                                       ((0, 3, 2, 1), None)])
def test_block_swap(perm, want):
    assert block_swap(perm) == want


@pytest.mark.parametrize("shape", [(1, 3, 5, 4), (1, 4, 3, 2, 5), (2, 3, 7), (1, 37, 33, 2),
                                   (1, 29, 27, 2, 58), (1, 3, 41, 37, 30)])
def test_every_block_swap_matches_numpy(shape):
    """Interleaving paths (2 or 3 blocks) and the tiled one, tiles cut at odd sizes; the last
    two shapes are large enough to run in parallel, split by matrices (ShuffleNet's shuffle)
    or by columns of a few matrices (a layout conversion)."""
    rng = np.random.default_rng(0)
    swapped = 0
    for perm in itertools.permutations(range(len(shape))):
        swap = swapper(perm, shape, "float32")
        if swap is None:
            assert block_swap(perm) is None
            continue
        x = rng.standard_normal(shape).astype(np.float32)
        out = np.empty(x.transpose(perm).shape, np.float32)
        for _ in range(2):   # the second call reuses the addresses, with new contents
            x[...] = rng.standard_normal(shape)
            assert swap(out, x)
            np.testing.assert_array_equal(out, x.transpose(perm))
        swapped += 1
    assert swapped >= len(shape) - 1


def test_strided_or_other_arrays_are_left_to_numpy():
    shape, perm = (1, 4, 3, 2), (0, 2, 3, 1)
    swap = swapper(perm, shape, "float32")
    wide = np.zeros((1, 3, 2, 8), np.float32)
    assert not swap(wide[..., :4], np.ones(shape, np.float32))
    assert (wide == 0).all()
    assert swapper(perm, shape, "float64") is None
    assert swapper(perm, (1, "n", 3, 2), "float32") is None
