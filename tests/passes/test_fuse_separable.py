"""Separable-conv fusion on random DAGs of depthwise convs, 1x1 convs, ReLUs and Adds: the
fused graph computes what the unfused one and ONNX Runtime do, and leaves no fusable pair."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import woodpecker
from tests.helpers import conv_dag_model, ort_run, rand
from woodpecker.passes import DEFAULT
from woodpecker.passes.fuse_separable import fuse_separable

C, HW = 8, 5
SHAPE = [1, C, HW, HW]
OPS = ("dw", "pw", "relu", "add")


def _model(steps: list[tuple[str, int, int]]):
    return conv_dag_model(steps, C, HW)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 50), st.integers(0, 50)),
                min_size=1, max_size=8))
@example([("relu", 0, 0), ("dw", 1, 0), ("relu", 2, 0), ("pw", 3, 0), ("add", 4, 0)])
def test_fusion_keeps_outputs_and_leaves_no_pair(steps):
    model = _model(steps)
    fused = woodpecker.compile(model, engines="numpy", threads=1)
    apart = woodpecker.compile(model, engines="numpy", threads=1,
                               passes=tuple(p for p in DEFAULT if p != "fuse_separable"))
    x = rand(*SHAPE, seed=7)
    got, want, ref = fused.run({"x": x}), apart.run({"x": x}), ort_run(model, {"x": x})
    for name, r in zip([o.name for o in model.graph.output], ref):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[name], r, rtol=1e-4, atol=1e-4)
    pairs = sum(kind == "dw" for kind, _, _ in steps)
    assert fused.plan.meta["passes"]["fuse_separable"] <= pairs
    assert fuse_separable(fused.graph) == 0
