"""A plan mixing generated kernels, ONNX Runtime, OpenVINO and numpy steps matches ONNX Runtime,
saved and loaded."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import woodpecker
from tests.helpers import REGIONS, make_model, ort_run, rand, sampled_log
from woodpecker.assembly import AssemblyOptions, assemble
from woodpecker.engines import names
from woodpecker.engines.base import BuildContext
from woodpecker.engines.choice import Choice
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.passes import optimize
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.target import Target


def _model():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c2"], ["s2"]),
             helper.make_node("GlobalAveragePool", ["s2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wf"], ["y"], transB=1)]
    inits = {"w1": rand(16, 8, 3, 3, seed=1) * 0.2, "w2": rand(16, 16, 3, 3, seed=2) * 0.1,
             "wf": rand(10, 16, seed=3)}
    return make_model(nodes, [("x", [1, 8, 12, 12])], [("y", [1, 10])], inits)


def tuned(tmp_path):
    """`_model()`, its optimised graph and a tuning log of one valid kernel per task."""
    pytest.importorskip("halide")
    pytest.importorskip("openvino")
    model = _model()
    graph = import_onnx(model)
    optimize(graph)
    return model, graph, sampled_log(graph, tmp_path / "tuning.jsonl")


def test_generated_onnxruntime_openvino_and_numpy_steps_in_one_plan(tmp_path):
    model, graph, log = tuned(tmp_path)
    generated = woodpecker.compile(model, engines="halide,numpy", tuning_log=log.path,
                                   threads=1).plan.choices
    first_conv = graph.nodes[0].name
    assert generated[first_conv].engine == names.HALIDE
    choices = {}
    for n in graph.nodes:
        if n.name == first_conv:
            choices[n.name] = generated[n.name]
        elif n.op.endswith("Conv"):
            choices[n.name] = Choice(names.OPENVINO)
        elif n.op in ("Gemm", "FusedGemm"):
            choices[n.name] = Choice(names.ONNXRUNTIME)
        else:
            choices[n.name] = Choice(names.NUMPY)
    engines = (names.HALIDE, names.ONNXRUNTIME, names.OPENVINO, names.NUMPY)
    plan = assemble(graph, choices, AssemblyOptions(engines, BuildContext(1, graph.opset),
                                                    Target.parse("cpu", 1),
                                                    {}, schedule=REGIONS))
    compiled = CompiledModel(plan)
    assert {names.HALIDE, names.ONNXRUNTIME, names.OPENVINO} <= set(compiled.plan.engines)
    x = rand(1, 8, 12, 12, seed=4)
    want = ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(compiled(x), want, rtol=1e-4, atol=1e-5)
    compiled.save(tmp_path / "p")
    np.testing.assert_allclose(woodpecker.load(tmp_path / "p")(x), want, rtol=1e-4, atol=1e-5)
