"""Separable-conv fusion on random DAGs of depthwise convs, 1x1 convs, ReLUs and Adds: the
fused graph computes what the unfused one and ONNX Runtime do, and leaves no fusable pair."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand
from woodpecker.passes import DEFAULT
from woodpecker.passes.fuse_separable import fuse_separable

C, HW = 8, 5
SHAPE = [1, C, HW, HW]
OPS = ("dw", "pw", "relu", "add")


def _model(steps: list[tuple[str, int, int]]):
    """Each step (op, a, b) reads value a (and b for an Add) among x and the earlier steps'
    results; every result no step reads is a graph output."""
    values, nodes, inits, read = ["x"], [], {}, set()
    for i, (kind, a, b) in enumerate(steps):
        x, y = values[a % len(values)], f"v{i}"
        read.add(x)
        if kind == "dw":
            inits[f"w{i}"] = rand(C, 1, 3, 3, seed=i)
            nodes.append(helper.make_node("Conv", [x, f"w{i}"], [y], pads=[1, 1, 1, 1],
                                          group=C))
        elif kind == "pw":
            inits[f"w{i}"], inits[f"b{i}"] = rand(C, C, 1, 1, seed=i) * 0.4, rand(C, seed=i)
            nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y]))
        elif kind == "relu":
            nodes.append(helper.make_node("Relu", [x], [y]))
        else:
            other = values[b % len(values)]
            read.add(other)
            nodes.append(helper.make_node("Add", [x, other], [y]))
        values.append(y)
    outputs = [(v, SHAPE) for v in values[1:] if v not in read]
    return make_model(nodes, [("x", SHAPE)], outputs, inits)


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
