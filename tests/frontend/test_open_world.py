"""Open world: ops Woodpecker has no definition of (If, Loop, LSTM, GRU) become Opaque nodes
run by a library (Resize and ConvTranspose, defined since, run beside them), dimensions written
-1 or 0 are dynamic, and every such model's plan matches ONNX Runtime — node by node and
library-first, saved and loaded."""

from __future__ import annotations

import numpy as np
import pytest

import woodpecker
from tests.helpers import rand
from tests.open_world import if_loop_model, ort_outputs, resize_model, rnn_model
from woodpecker.errors import DynamicShapeError, ModelError
from woodpecker.frontend.onnx_import import import_onnx

CASES = {
    "resize": (resize_model, {"x": (1, 3, 16, 20)}, []),
    "rnn": (rnn_model, None, ["LSTM", "GRU"]),
    "if": (lambda: if_loop_model(loop=False), None, ["If"]),
    "if_loop": (if_loop_model, None, ["If", "Loop"]),
}


def test_a_loop_state_onnx_cannot_shape_stops_the_node_level_import_only():
    """ONNX's inference leaves the Loop's carried output open: no node-level plan (its arena
    needs the shape), while the whole graph runs on a library (test below)."""
    with pytest.raises(DynamicShapeError, match="'Loop_4' .Loop.: the shape of its output"):
        import_onnx(if_loop_model())


@pytest.mark.parametrize("name", [k for k in CASES if k != "if_loop" and CASES[k][2]])
def test_opaque_nodes_carry_what_woodpecker_does_not_define(name):
    make, shapes, opaque = CASES[name]
    graph = import_onnx(make(), shapes)
    carried = [n.attrs["op_type"] for n in graph.nodes if n.op == "Opaque"]
    assert [op for op in carried if op in opaque] == opaque
    assert all(n.outputs[0].shape is not None for n in graph.nodes)


@pytest.mark.parametrize("library_first", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_open_world_plans_match_onnxruntime_saved_and_loaded(name, library_first, tmp_path):
    make, shapes, _ = CASES[name]
    model = make()
    m = woodpecker.compile(model, input_shapes=shapes, threads=1, library_first=library_first)
    feeds = {name: rand(*shape, seed=3) for name, shape, _ in m.inputs}
    want = ort_outputs(model, feeds)
    got = m.run(feeds)
    for (out, w) in zip(got.values(), want):
        np.testing.assert_allclose(out, w, rtol=1e-5, atol=1e-6)
    m.save(tmp_path / "p.wpk")
    loaded = woodpecker.load(tmp_path / "p.wpk")
    for out, w in zip(loaded.run(feeds).values(), want):
        np.testing.assert_allclose(out, w, rtol=1e-5, atol=1e-6)


def test_minus_one_dims_are_dynamic_and_zero_dims_take_a_given_size():
    with pytest.raises(ModelError, match=r"dynamic dimensions \['\?', 3, 'h', '\?'\]"):
        import_onnx(resize_model())
    graph = import_onnx(resize_model(), {"x": (2, 3, 8, 6)})
    assert graph.outputs[0].shape == (2, 4, 32, 24)
    graph = import_onnx(resize_model(width=0), {"x": (2, 3, 8, 6)})
    assert graph.outputs[0].shape == (2, 4, 32, 24)
