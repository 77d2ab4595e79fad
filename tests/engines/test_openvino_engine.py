"""The OpenVINO engine: a node and a region against ONNX Runtime and numpy, kernels writing into
given arrays with their binding kept, OpenVINO's own refusals, and a plan with OpenVINO steps
saved, loaded and checked."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

import woodpecker
from tests.helpers import REGIONS, make_model, ort_run, rand
from woodpecker.assembly import AssemblyOptions, assemble
from woodpecker.engines import names
from woodpecker.engines.base import BuildContext
from woodpecker.engines.choice import Choice
from woodpecker.engines.registry import MOVEMENT, get_engine
from woodpecker.errors import PlanError
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.ir.steps import step_io
from woodpecker.passes import optimize
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.target import Target

ov = pytest.importorskip("openvino")


def _engine():
    return get_engine(names.OPENVINO)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))


def _convnet():
    """Conv+Relu, a second conv with a residual Add, then pooling, Flatten and Gemm."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["a2"]),
             helper.make_node("GlobalAveragePool", ["a2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    inits = {"w1": rand(16, 8, 3, 3, seed=1) * 0.2, "b1": rand(16, seed=2),
             "w2": rand(16, 16, 3, 3, seed=3) * 0.1, "wf": rand(10, 16, seed=4),
             "bf": rand(10, seed=5)}
    return make_model(nodes, [("x", [1, 8, 12, 12])], [("y", [1, 10])], inits)


def _matmul_add():
    """MatMul then Add: a region of two nodes with both results as outputs."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["y"])]
    inits = {"w": rand(16, 8, seed=6), "b": rand(8, seed=7)}
    return make_model(nodes, [("x", [4, 16])], [("mm", [4, 8]), ("y", [4, 8])], inits), inits


def _conv_relu():
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    return make_model(nodes, [("x", [1, 8, 12, 12])], [("y", [1, 16, 12, 12])],
                      {"w": rand(16, 8, 3, 3, seed=1) * 0.2, "b": rand(16, seed=2)})


def test_a_conv_relu_node_matches_onnxruntime():
    graph = import_onnx(_conv_relu())
    optimize(graph)
    (node,) = graph.nodes
    assert node.op == "FusedConv"    # the Relu is its epilogue
    ctx = BuildContext(1, graph.opset)
    assert _engine().supports(node, ctx)
    x = rand(1, 8, 12, 12, seed=8)
    (got,) = _engine().build(node, ctx)(x)
    _close(got, ort_run(_conv_relu(), {"x": x})[0])


def _region():
    model, inits = _matmul_add()
    graph = import_onnx(model)     # no passes: two nodes, one step
    ins, outs = step_io(graph.nodes, graph)
    kernel = _engine().build_step(graph.nodes, ins, outs, BuildContext(1, graph.opset), {})
    return kernel, [v.name for v in outs], inits


def test_a_matmul_add_region_matches_numpy_and_onnxruntime():
    kernel, outs, inits = _region()
    x = rand(4, 16, seed=9)
    got = dict(zip(outs, kernel(x)))
    mm = x @ inits["w"]
    _close(got["mm"], mm)
    _close(got["y"], mm + inits["b"])
    model, _ = _matmul_add()
    for name, want in zip(("mm", "y"), ort_run(model, {"x": x})):
        _close(got[name], want)


def test_into_writes_into_arena_views_and_keeps_their_binding(monkeypatch):
    kernel, outs, inits = _region()
    calls = []
    set_tensor = ov.InferRequest.set_tensor
    monkeypatch.setattr(ov.InferRequest, "set_tensor",
                        lambda self, *a: (calls.append(a), set_tensor(self, *a))[1])
    arena = np.full(4 * 16 + 2 * 4 * 8, np.nan, np.float32)
    x = arena[:64].reshape(4, 16)
    views = [arena[64:96].reshape(4, 8), arena[96:].reshape(4, 8)]
    for seed in (10, 11):     # new values in the same arrays: the binding sees them
        x[...] = rand(4, 16, seed=seed)
        kernel.into(views, x)
        want = {"mm": x @ inits["w"], "y": x @ inits["w"] + inits["b"]}
        for name, view in zip(outs, views):
            _close(view, want[name])
    assert len(calls) == 3      # bound once: one input and two outputs
    other = rand(4, 16, seed=12)
    kernel.into(views, other)   # a new input array: that port alone is bound again
    assert len(calls) == 4
    _close(views[outs.index("y")], other @ inits["w"] + inits["b"])
    # an output OpenVINO cannot share (a transposed view) is written through a copy
    strided = [np.empty((8, 4), np.float32).T, views[1]]
    kernel.into(strided, other)
    _close(strided[0], dict(zip(outs, kernel(other)))[outs[0]])


def test_accepts_asks_openvino():
    """OpenVINO's ONNX reader has no Pad mode "wrap" (opset 19), which ONNX Runtime runs; and
    int64 arithmetic, which OpenVINO's CPU plugin computes in 32 bits, is declined."""
    pad = make_model([helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")],
                     [("x", [1, 2, 4, 4])], [("y", [1, 2, 6, 6])],
                     {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}, opset=19)
    add = make_model([helper.make_node("Add", ["a", "b"], ["y"])],
                     [("a", [4], TensorProto.INT64), ("b", [4], TensorProto.INT64)],
                     [("y", [4], TensorProto.INT64)])
    engine = _engine()
    for model, reason in ((pad, "wrap"), (add, "int64 in 32 bits")):
        graph = import_onnx(model)
        node, ctx = graph.nodes[0], BuildContext(1, graph.opset)
        assert not engine.accepts(node, ctx)
        assert reason in engine.why_not(node, ctx)
        with pytest.raises(RuntimeError, match=reason):
            engine.build(node, ctx)
    graph = import_onnx(pad)
    assert get_engine(names.ONNXRUNTIME).accepts(graph.nodes[0], BuildContext(1, 19))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The convnet on OpenVINO but for data movement and the pooling (numpy), which split it
    into two OpenVINO steps; compiled and saved, OpenVINO's model cache in a folder of its
    own."""
    with pytest.MonkeyPatch.context() as mp:
        cache = tmp_path_factory.mktemp("cache")
        mp.setenv("WOODPECKER_CACHE", str(cache))
        graph = import_onnx(_convnet())
        optimize(graph)
        choices = {n.name: Choice(names.NUMPY if n.op in MOVEMENT | {"GlobalAveragePool"}
                                  else names.OPENVINO) for n in graph.nodes}
        ctx, target = BuildContext(1, graph.opset), Target.parse("cpu", 1)
        plan = assemble(graph, choices, AssemblyOptions((names.OPENVINO, names.NUMPY), ctx,
                                                        target, {}, schedule=REGIONS))
        model = CompiledModel(plan)
        folder = tmp_path_factory.mktemp("plan") / "p"
        model.save(folder)
        yield model, folder, cache


def test_a_plan_on_openvino_saves_loads_and_matches(saved, monkeypatch):
    model, folder, cache = saved
    monkeypatch.setenv("WOODPECKER_CACHE", str(cache))
    assert names.OPENVINO in model.plan.engines
    assert model.steps == [[0, 1], [2], [3, 4]]   # regions (Flatten joins the Gemm's)
    doc = json.loads((folder / "plan.json").read_text())
    section = doc["engines"][names.OPENVINO]
    assert section["openvino"] == ov.__version__
    assert sorted(m["file"] for m in section["models"].values()) == \
        ["openvino/step0.onnx", "openvino/step1.onnx"]
    x = rand(1, 8, 12, 12, seed=13)
    want = ort_run(_convnet(), {"x": x})[0]
    _close(model(x), want)
    loaded = woodpecker.load(folder)
    assert loaded.plan.engines == model.plan.engines and loaded.steps == model.steps
    np.testing.assert_allclose(loaded(x), model(x), rtol=1e-6, atol=1e-6)
    assert list((cache / "openvino").iterdir())       # loaded steps went through the cache
    _close(woodpecker.load(folder)(x), want)          # and compile from it


def test_an_edited_openvino_model_is_refused_at_load(saved, tmp_path):
    import shutil

    _, folder, _ = saved
    copy = tmp_path / "p"
    shutil.copytree(folder, copy)
    step = copy / "openvino" / "step0.onnx"
    step.write_bytes(step.read_bytes() + b"\0")
    with pytest.raises(PlanError, match="sha256"):
        woodpecker.load(copy)


def test_an_empty_tensor_is_left_to_the_other_engines():
    """A batch-0 input through MaxPool, AveragePool and Flatten corrupted the process's heap in
    OpenVINO's CPU plugin (the fuzzer's find, once a declared output shape the graph does not
    make stopped refusing the model): OpenVINO declines empty values, ONNX Runtime runs them."""
    import numpy as np
    from onnx import TensorProto, helper

    import woodpecker
    from tests.helpers import ort_run

    nodes = [helper.make_node("MaxPool", ["x"], ["a"], kernel_shape=[2, 2]),
             helper.make_node("AveragePool", ["a"], ["b"], kernel_shape=[2, 2]),
             helper.make_node("GlobalAveragePool", ["b"], ["c"]),
             helper.make_node("Flatten", ["c"], ["y"])]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 4, 9, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.zeros((0, 4, 9, 9), np.float32)
    m = woodpecker.compile(model, threads=1)
    assert "openvino" not in m.plan.engines
    got = m.run({"x": x})["y"]
    assert got.shape == ort_run(model, {"x": x})[0].shape == (0, 4)
