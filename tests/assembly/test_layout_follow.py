"""Movement ops on held (permuted) values: the reshape rule on random shapes, and a plan whose
fire-module concat, channel shuffle, split and flatten all run on NHWC values between
generated kernels, with no conversion left (the first conv reads the model input in NCHW)
and outputs equal to ONNX Runtime's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand, sampled_log
from woodpecker.assembly.layout_follow import reshape_perm
from woodpecker.schedule.aliases import VIEW, slice_code


@st.composite
def reshapes(draw):
    """A shape, a permutation of it, and a reshape target made by splitting and merging runs
    of axes (with size-1 axes sprinkled in)."""
    rank = draw(st.integers(1, 5))
    src = [draw(st.sampled_from([1, 2, 3, 4, 6])) for _ in range(rank)]
    perm = draw(st.permutations(range(rank)))
    dst, k = [], 0
    while k < rank:
        run = draw(st.integers(1, rank - k))
        size = int(np.prod(src[k:k + run]))
        if size % 2 == 0 and size > 2 and draw(st.booleans()):
            dst += [2, size // 2]
        else:
            dst.append(size)
        if draw(st.booleans()):
            dst.append(1)
        k += run
    return tuple(src), tuple(perm), tuple(dst)


@settings(max_examples=300, deadline=None)
@given(reshapes())
def test_reshape_of_held_value_is_the_held_reshape(case):
    src, perm, dst = case
    x = np.arange(int(np.prod(src))).reshape(src)
    q = reshape_perm(src, dst, perm)
    if q is None:   # only when the held order cannot be regrouped (checked by brute force)
        held = x.transpose(perm)
        assert not any(np.array_equal(held.reshape([dst[a] for a in c]),
                                      x.reshape(dst).transpose(c))
                       for c in itertools.permutations(range(len(dst))))
        return
    assert sorted(q) == list(range(len(dst)))
    held = x.transpose(perm).reshape([dst[a] for a in q])
    np.testing.assert_array_equal(held, x.reshape(dst).transpose(q))


def _shuffle_model():
    """conv → (1x1 conv, 3x3 conv) → concat → channel shuffle (reshape, transpose, reshape) →
    slice in two halves → conv on one half → concat with the other → global pool → flatten →
    Gemm (no dense task without a bias: numpy, reading the flattened pool in its own layout)."""
    c = 8
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["a", "w1"], ["b1"]),
        helper.make_node("Conv", ["a", "w3"], ["b3"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["b1", "b3"], ["cat"], axis=1),
        helper.make_node("Reshape", ["cat", "s5"], ["r5"]),
        helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t5", "s4"], ["shuf"]),
        helper.make_node("Slice", ["shuf", "st0", "en0", "ax"], ["h0"]),
        helper.make_node("Slice", ["shuf", "st1", "en1", "ax"], ["h1"]),
        helper.make_node("Conv", ["h1", "w4"], ["h1c"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["h0", "h1c"], ["cat2"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf"], ["y"], transB=1),
    ]
    inits = {"w0": rand(c, 3, 3, 3, seed=1) * 0.3, "w1": rand(c, c, 1, 1, seed=2) * 0.3,
             "w3": rand(c, c, 3, 3, seed=3) * 0.2, "w4": rand(c, c, 3, 3, seed=4) * 0.2,
             "s5": np.array([1, 2, c, 6, 6], np.int64), "s4": np.array([1, 2 * c, 6, 6], np.int64),
             "st0": np.array([0], np.int64), "en0": np.array([c], np.int64),
             "st1": np.array([c], np.int64), "en1": np.array([2 * c], np.int64),
             "ax": np.array([1], np.int64), "wf": rand(5, 2 * c, seed=5)}
    return make_model(nodes, [("x", [1, 3, 6, 6])], [("y", [1, 5])], inits)


def test_movement_between_generated_kernels_stays_nhwc(tmp_path):
    pytest.importorskip("halide")

    model = _shuffle_model()
    log = sampled_log(model, tmp_path / "tuning.jsonl")
    compiled = woodpecker.compile(model, engines="halide,numpy", tuning_log=log.path, threads=2)
    plan = compiled.plan
    assert plan.engines.count("halide") == 5    # the convs and the pool
    # none: the first conv reads the 3-channel model input where it lies (ConvTask.x_layout)
    assert plan.meta["layout_conversions"] == 0, [n.op for n in plan.graph.nodes]
    layouts = {n.op: n.outputs[0].layout for n in plan.graph.nodes if n.op != "Transpose"}
    assert layouts["Concat"] == "NHWC" and layouts["Slice"] == "NHWC"
    # both concats' parts (two conv outputs, a slice and a conv output) are strided channel
    # slices of NHWC values, written in place; the shuffle's two reshapes and the flatten are
    # views of their inputs, and the half read by a conv is a channel slice of the shuffle's
    # reshape view (schedule/aliases.py)
    kinds = sorted(axis for _, axis, _ in plan.arena.aliases.values())
    assert kinds == [slice_code(3)] + [VIEW] * 3 + [3] * 4, plan.arena.aliases
    sliced = [a for a in plan.arena.aliases.values() if a[1] == slice_code(3)]
    assert [a[2] for a in sliced] == [8], plan.arena.aliases   # the second half of 16
    # Halide steps whose inputs all live in the arena are bound to them once (executor.py)
    bound = [step for step in compiled._executor._steps if step.bound is not None]
    assert 1 <= len(bound) <= 5
    for seed in (9, 10):   # a bound step reads each run's new input
        feeds = {"x": rand(1, 3, 6, 6, seed=seed)}
        want = ort_run(model, feeds)[0]
        got = compiled(feeds["x"])
        assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))
    compiled.save(tmp_path / "p")
    np.testing.assert_array_equal(woodpecker.load(tmp_path / "p")(feeds["x"]), got)
