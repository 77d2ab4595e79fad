"""A library region runs the user's own nodes for its part of the graph (engines/onnx_step.py):
the nodes of the model file between the region's inputs and outputs, found by name, not
Woodpecker's rewrite of them; where that cannot be shown, the region is made from
Woodpecker's nodes as before."""

from __future__ import annotations

import numpy as np
import onnx

import woodpecker
from tests.helpers import conv_bn_relu_residual, ort_run, rand
from woodpecker.engines.onnx_step import original_region
from woodpecker.ir.graph import Value


def test_a_region_of_fused_nodes_runs_the_files_nodes(tmp_path):
    """(OpenVINO's regions are built the same way, engines/onnx_step.StepModels; it runs
    regions only where measured selection puts them: tests/selection/test_libraries.py.)"""
    engine = "onnxruntime"
    model = conv_bn_relu_residual()
    compiled = woodpecker.compile(model, threads=1, engines=f"{engine},numpy",
                                  library_first=False)
    assert "FusedConv" in [n.op for n in compiled.graph.nodes]   # Woodpecker's rewrite
    (step,) = compiled.steps
    assert len(step) > 1
    x = rand(1, 8, 6, 6, seed=2)
    want = ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(compiled(x), want, rtol=1e-5, atol=1e-6)
    compiled.save(tmp_path / "p")
    (saved,) = (tmp_path / "p" / engine).glob("*.onnx")
    ops = [n.op_type for n in onnx.load(saved).graph.node]
    # the file's nodes from x to y: BatchNormalization, Dropout and the Shape arithmetic kept,
    # the dead Sigmoid not reached
    assert ops == [n.op_type for n in model.graph.node if n.op_type != "Sigmoid"]
    np.testing.assert_allclose(woodpecker.load(tmp_path / "p")(x), want, rtol=1e-5, atol=1e-6)


def _region(model):
    compiled = woodpecker.compile(model, threads=1, engines="onnxruntime,numpy",
                                  library_first=False)
    io = compiled.plan.step_io(compiled.graph.nodes)
    return compiled.graph.source, io.inputs, io.outputs


def test_the_walk_refuses_what_is_not_the_very_step():
    model = conv_bn_relu_residual()
    source, inputs, outputs = _region(model)
    assert original_region(source, inputs, outputs) is not None
    # a name the file does not have (one Woodpecker's passes made)
    made = Value("y_fused", outputs[0].shape, outputs[0].dtype)
    assert original_region(source, inputs, [made]) is None
    # a value in another layout than the file's
    nhwc = Value("x", inputs[0].shape, inputs[0].dtype, layout="NHWC")
    assert original_region(source, [nhwc], outputs) is None
    # an input the region does not read: the walk reaches a graph input it was not given
    other = Value("xi", inputs[0].shape, inputs[0].dtype)
    assert original_region(source, [other], outputs) is not None      # from the Identity on
    assert original_region(source, [], outputs) is None
    # an output whose shape the file computes otherwise
    wrong = Value("y", (1, 287), outputs[0].dtype)
    assert original_region(source, inputs, [wrong]) is None


def test_a_bound_input_makes_the_region_from_woodpeckers_nodes(tmp_path):
    """Binding an input to a value (`input_values`) changes the graph the region is part of:
    the file's nodes would read the input, so the region is Woodpecker's; still ORT's
    result."""
    from onnx import helper

    from tests.helpers import make_model
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"])]
    model = make_model(nodes, [("x", [2, 3]), ("s", [2, 3])], [("y", [2, 3])], {})
    s = rand(2, 3, seed=1)
    compiled = woodpecker.compile(model, threads=1, engines="onnxruntime", library_first=False,
                                  input_values={"s": s})
    x = rand(2, 3, seed=2)
    np.testing.assert_allclose(compiled(x), ort_run(model, {"x": x, "s": s})[0], rtol=1e-6)
    io = compiled.plan.step_io(compiled.graph.nodes)
    assert original_region(compiled.graph.source, io.inputs, io.outputs) is None
