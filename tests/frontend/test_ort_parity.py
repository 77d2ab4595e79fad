"""Issue 76: whatever model ONNX Runtime's CPU session runs compiles and gives its outputs, and
what it refuses when it builds the session is refused with one line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import woodpecker
from woodpecker.errors import ModelError
from woodpecker.selection.ort_reference import ort_refusal, ort_said

F = TensorProto.FLOAT


def _vi(name, elem=F, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def _model(nodes, inputs, outputs, inits=(), opset=17, **kw):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    *kw.pop("opsets", [])], **kw)
    model.ir_version = 9
    return model


def _session(model):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def _ort(model, feeds):
    return _session(model).run(None, feeds)


def _ort_refuses(model) -> bool:
    try:
        _session(model)
    except Exception:  # noqa: BLE001 - its error types vary (Fail, InvalidGraph, …)
        return True
    return False


def _relu(opset):
    return _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x")], [_vi("y")],
                  opset=opset)


# -- what ONNX Runtime refuses ---------------------------------------------------------------

def test_an_opset_onnx_runtime_does_not_support_is_refused_with_its_line():
    model = _relu(99)
    assert _ort_refuses(model)
    with pytest.raises(ModelError, match="ONNX Runtime refuses this model: .*opset") as e:
        woodpecker.compile(model, threads=1)     # (OpenVINO would run it)
    assert "\n" not in str(e.value) and "/onnxruntime_src" not in str(e.value)


def test_onnx_runtimes_refusal_after_a_failed_import_is_its_own_line_and_no_library_claim():
    """Where the import fails and ONNX Runtime refuses the file too, the error is ONNX
    Runtime's refusal as it is (not wrapped in the import's reason), and no progress line
    says the libraries run the graph."""
    import io

    from woodpecker.selection.ort_reference import OnnxRuntimeRefusal

    progress = io.StringIO()
    with pytest.raises(OnnxRuntimeRefusal) as e:
        woodpecker.compile(_relu(99), threads=1, progress=progress)
    assert str(e.value).startswith("ONNX Runtime refuses this model: ")
    assert "newer than any this build knows" not in str(e.value)
    assert "the libraries run its original graph" not in progress.getvalue()


def test_a_refusal_of_an_op_outside_onnx_domains_is_not_onnx_runtimes_last_word():
    custom = _model([helper.make_node("Foo", ["x"], ["y"], domain="custom")], [_vi("x")],
                    [_vi("y")], opsets=[helper.make_opsetid("custom", 1)])
    assert _ort_refuses(custom)
    assert ort_refusal(custom) is None          # another library may define it
    assert "Opset 99" in ort_refusal(_relu(99))
    assert ort_refusal(_relu(17)) is None


def test_no_kernel_in_onnx_runtime_is_its_gap_and_woodpecker_still_runs_the_node():
    # ONNX Runtime has no Pow kernel of an unsigned exponent (NotImplemented)
    model = _model([helper.make_node("Pow", ["x", "e"], ["y"])],
                   [_vi("x", shape=(3,)), _vi("e", TensorProto.UINT8, (3,))],
                   [_vi("y", shape=(3,))])
    assert _ort_refuses(model) and ort_refusal(model) is None
    x, e = np.array([2, -3, 0.5], np.float32), np.array([3, 2, 1], np.uint8)
    got = woodpecker.compile(model, threads=1).run({"x": x, "e": e})["y"]
    np.testing.assert_allclose(got, x.astype(np.float64) ** e, rtol=1e-6)


def test_onnx_runtimes_line_loses_its_heading_and_source_location():
    said = ort_said(RuntimeError(
        "[ONNXRuntimeError] : 1 : FAIL : Exception during initialization: /onnxruntime_src/"
        "onnxruntime/core/providers/cpu/math/element_wise_ops.h:256 onnxruntime::Div<T>::Div("
        "const onnxruntime::OpKernelInfo&) [with T = long int] b_data[i] != T{0} was false. "
        "Integer division by zero\nmore"))
    assert said == ("Exception during initialization: b_data[i] != T{0} was false. Integer "
                    "division by zero")


def _int(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


INT2 = dict(elem=TensorProto.INT64, shape=(2,))
DIVISIONS = {
    # a constant Div (two initializers) read by an Add of the input
    "constant Div": (_model([helper.make_node("Div", ["a", "b"], ["q"], name="d"),
                             helper.make_node("Add", ["x", "q"], ["y"])],
                            [_vi("x", **INT2)], [_vi("y", **INT2)],
                            [_int("a", [6, 4]), _int("b", [0, 2])]), "d", "division"),
    # a constant Div that is a Reshape's target
    "Reshape target": (_model([helper.make_node("Div", ["a", "b"], ["shape"], name="d"),
                               helper.make_node("Reshape", ["x", "shape"], ["y"])],
                              [_vi("x")], [_vi("y", shape=(3, 2))],
                              [_int("a", [3, 2]), _int("b", [1, 0])]), "d", "division"),
    # the input divided by a constant holding a zero
    "input / 0": (_model([helper.make_node("Div", ["x", "b"], ["y"], name="d")],
                         [_vi("x", **INT2)], [_vi("y", **INT2)], [_int("b", [0, 2])]),
                  "d", "division"),
    "Mod by 0": (_model([helper.make_node("Mod", ["x", "b"], ["y"], name="m")],
                        [_vi("x", **INT2)], [_vi("y", **INT2)], [_int("b", [3, 0])]),
                 "m", "modulo"),
}


@pytest.mark.parametrize("case", list(DIVISIONS))
def test_an_integer_division_by_a_constant_zero_is_refused_naming_the_node(case):
    model, node, what = DIVISIONS[case]
    assert _ort_refuses(model)
    with pytest.raises(ModelError, match=f"'{node}': integer {what} by zero") as e:
        woodpecker.compile(model, threads=1)
    assert "\n" not in str(e.value)


def test_a_float_division_by_a_constant_zero_still_compiles():
    model = _model([helper.make_node("Div", ["x", "b"], ["y"])], [_vi("x", shape=(2,))],
                   [_vi("y", shape=(2,))],
                   [numpy_helper.from_array(np.array([0, 2], np.float32), "b")])
    x = np.array([1, -3], np.float32)
    got = woodpecker.compile(model, threads=1, engines="numpy").run({"x": x})["y"]
    np.testing.assert_array_equal(got, _ort(model, {"x": x})[0])


# -- what ONNX Runtime runs ------------------------------------------------------------------

def _agrees(model, feeds, **options):
    want = _ort(model, feeds)
    got = list(woodpecker.compile(model, threads=1, **options).run(feeds).values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype == object:
            assert g.tolist() == w.tolist()
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _constant(name, out, value):
    return helper.make_node("Constant", [], [out], name=name,
                            value=numpy_helper.from_array(np.full((2, 3), value, np.float32)))


def _same_named_constants():
    """Two Constants named alike, as silero VAD's OpenVINO export has ('F0::anon')."""
    return _model([_constant("F0::anon", "a", 1.5), _constant("F0::anon", "b", 2.0),
                   helper.make_node("Mul", ["x", "a"], ["s"], name="mul"),
                   helper.make_node("Relu", ["s"], ["r"], name="relu"),
                   helper.make_node("Add", ["r", "b"], ["y"], name="add")],
                  [_vi("x")], [_vi("y")])


X = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}


@pytest.mark.parametrize("engines", [None, "numpy,onnxruntime", "numpy,openvino"])
def test_constants_of_one_name_compile_and_agree_with_onnx_runtime(engines):
    model = _same_named_constants()
    assert not _ort_refuses(model)
    _agrees(model, X, **({"engines": engines} if engines else {}))


def test_same_named_nodes_are_named_apart_keeping_the_users_name():
    from woodpecker.frontend.onnx_import import import_onnx

    graph = import_onnx(_same_named_constants())
    names = [n.name for n in graph.nodes]
    assert len(set(names)) == len(names)
    assert names[:2] == ["F0::anon", "F0::anon_1"]


def test_two_other_nodes_of_one_name_are_refused_as_onnx_runtime_refuses_them():
    model = _model([helper.make_node("Relu", ["x"], ["r"], name="F0::anon"),
                    helper.make_node("Neg", ["r"], ["y"], name="F0::anon")],
                   [_vi("x")], [_vi("y")])
    assert _ort_refuses(model)
    with pytest.raises(ModelError, match="two nodes are named 'F0::anon'"):
        woodpecker.compile(model, threads=1)


def _sparse(coordinates: bool):
    values = numpy_helper.from_array(np.array([1.5, -2.0, 4.0], np.float32), "w")
    flat = np.array([1, 4, 5], np.int64)
    idx = np.stack(np.unravel_index(flat, (2, 3)), axis=1) if coordinates else flat
    sparse = helper.make_sparse_tensor(values, numpy_helper.from_array(idx, "w_idx"), [2, 3])
    model = _model([helper.make_node("Add", ["x", "w"], ["s"]),
                    helper.make_node("Relu", ["s"], ["y"])], [_vi("x")], [_vi("y")])
    model.graph.sparse_initializer.append(sparse)
    return model


@pytest.mark.parametrize("coordinates", [False, True])
@pytest.mark.parametrize("engines", [None, "numpy"])
def test_a_sparse_initializer_compiles_and_agrees_with_onnx_runtime(coordinates, engines):
    _agrees(_sparse(coordinates), X, **({"engines": engines} if engines else {}))


def test_a_sparse_initializer_is_woodpeckers_constant():
    from woodpecker.frontend.onnx_import import import_onnx

    graph = import_onnx(_sparse(False))
    np.testing.assert_array_equal(graph.values["w"].data, [[0, 1.5, 0], [0, -2, 4]])
    assert [n.op for n in graph.nodes] == ["Add", "Relu"]


def _with_functions():
    """A model-local function (Relu then Neg, scaled by an attribute) called twice, and one
    that calls it."""
    opset = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    alpha = helper.make_node("Constant", [], ["k"], value_float=1.0)
    alpha.attribute[0].ref_attr_name = "alpha"
    neg_relu = helper.make_function(
        "local", "NegRelu", ["a"], ["b"],
        [alpha, helper.make_node("Relu", ["a"], ["t"]), helper.make_node("Mul", ["t", "k"], ["u"]),
         helper.make_node("Neg", ["u"], ["b"])], opset, attributes=["alpha"])
    twice = helper.make_function(
        "local", "Twice", ["a"], ["b"],
        [helper.make_node("NegRelu", ["a"], ["t"], domain="local", alpha=2.0),
         helper.make_node("NegRelu", ["t"], ["b"], domain="local", alpha=3.0)], opset)
    return _model([helper.make_node("NegRelu", ["x"], ["r"], domain="local", alpha=0.5),
                   helper.make_node("Abs", ["x"], ["ax"]),
                   helper.make_node("Twice", ["ax"], ["r2"], domain="local"),
                   helper.make_node("Add", ["r", "r2"], ["y"])],
                  [_vi("x")], [_vi("y")], opsets=opset[1:], functions=[neg_relu, twice])


@pytest.mark.parametrize("engines", [None, "numpy", "numpy,onnxruntime"])
def test_a_model_local_function_compiles_and_agrees_with_onnx_runtime(engines):
    _agrees(_with_functions(), X, **({"engines": engines} if engines else {}))


def test_a_model_local_function_is_woodpeckers_graph():
    from woodpecker.frontend.onnx_import import import_onnx

    ops = [n.op for n in import_onnx(_with_functions()).nodes]
    assert "Opaque" not in ops and ops.count("Relu") == 3


def _open_rank_outputs():
    """Graph outputs whose types have no shape field (ONNX Runtime runs the model)."""
    return _model([helper.make_node("Relu", ["x"], ["r"]),
                   helper.make_node("Reshape", ["r", "s"], ["y"]),
                   helper.make_node("Neg", ["r"], ["z"])],
                  [_vi("x")], [_vi("y", shape=None), _vi("z", shape=None)],
                  [_int("s", [3, 2])])


def test_the_check_takes_an_output_without_a_shape_as_onnx_runtime_does():
    from woodpecker.frontend.onnx_import import check_model

    model = _open_rank_outputs()
    before = model.SerializeToString()
    with pytest.raises(onnx.checker.ValidationError, match="shape"):
        onnx.checker.check_model(model)
    check_model(model)
    assert model.SerializeToString() == before
    bad = _open_rank_outputs()
    bad.graph.node[0].input[0] = "nowhere"
    with pytest.raises(onnx.checker.ValidationError):
        check_model(bad)
    assert not bad.graph.output[0].type.tensor_type.HasField("shape")


@pytest.mark.parametrize("engines", [None, "numpy", "numpy,onnxruntime"])
def test_an_output_without_a_shape_compiles_and_agrees_with_onnx_runtime(engines):
    _agrees(_open_rank_outputs(), X, **({"engines": engines} if engines else {}))


def _strings():
    return _model([helper.make_node("Identity", ["x"], ["y"])],
                  [_vi("x", TensorProto.STRING, (2,))], [_vi("y", TensorProto.STRING, (2,))])


def test_a_string_graph_is_one_whole_model_node_of_string_values():
    from woodpecker.frontend.whole import whole_graph

    graph = whole_graph(_strings())
    assert [n.op for n in graph.nodes] == ["Opaque"]
    assert [v.dtype for v in graph.inputs + graph.outputs] == [np.dtype(object)] * 2


def test_a_string_tensor_through_identity_runs_on_a_library():
    _agrees(_strings(), {"x": np.array(["a", "bc"], dtype=object)})


def test_a_string_plan_saves_loads_and_runs_through_the_session(tmp_path, monkeypatch):
    monkeypatch.setenv("WOODPECKER_CACHE", str(tmp_path / "cache"))
    model, x = _strings(), np.array(["a", "bc"], dtype=object)
    want = _ort(model, {"x": x})[0].tolist()
    plan = woodpecker.compile(model, threads=1)
    plan.save(tmp_path / "plan")
    loaded = woodpecker.load(tmp_path / "plan")
    assert loaded.run({"x": x})["y"].tolist() == want
    # a str array (numpy's unicode dtype), as ONNX Runtime takes it
    assert loaded.run({"x": np.array(["a", "bc"])})["y"].tolist() == want
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    session = woodpecker.InferenceSession(str(path))
    assert [i.type for i in session.get_inputs()] == ["tensor(string)"]
    got = session.run(None, {"x": x})[0]
    assert got.dtype == object and got.tolist() == want


def test_a_declared_output_shape_the_graph_does_not_make_runs_as_onnx_runtime_runs_it():
    """ONNX Runtime warns ("Falling back to lenient merge") and runs with the inferred shape;
    Woodpecker refused the model (strict inference: 'existing shape differ')."""
    import warnings

    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    import woodpecker

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        got = woodpecker.compile(m, threads=1).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    assert any("declares a shape its graph does not produce" in str(w.message) for w in said)


@pytest.mark.parametrize("kind", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "int4", "uint4"])
def test_an_initializer_numpy_holds_only_through_ml_dtypes_runs_on_a_library(kind, tmp_path):
    """A bfloat16/float8/4-bit initializer (LLM exports' weights) was refused ('element type
    bfloat16, which is not supported'); ORT runs it, so a library runs it, saved and loaded
    (its bytes kept as they are)."""
    import ml_dtypes

    w = numpy_helper.from_array(np.array([1, 2, 3, 4, 5, 6], np.float32)
                                .astype(getattr(ml_dtypes, kind)).reshape(2, 3), "w")
    m = _model([helper.make_node("Cast", ["w"], ["f"], to=F),
                helper.make_node("Add", ["x", "f"], ["y"])], [_vi("x")], [_vi("y")], [w],
               opset=21)
    m.ir_version = 10
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = _ort(m, {"x": x})[0]
    model = woodpecker.compile(m)
    np.testing.assert_array_equal(model.run({"x": x})["y"], want)
    model.save(tmp_path / "p.wpk")
    np.testing.assert_array_equal(woodpecker.load(tmp_path / "p.wpk").run({"x": x})["y"], want)


@pytest.mark.parametrize("opset", [7, 17])
def test_an_ir3_model_whose_initializer_is_no_graph_input_runs_as_onnx_runtime_runs_it(opset):
    """IR 3 asks initializers to be listed as graph inputs; ONNX Runtime's own test model
    mul_1.onnx (IR 3, opset 7) does not list its W, and ORT runs it: it was refused ('W in
    initializer but not in graph input'), and its opset upgrade said 'Input W is undefined'."""
    m = _model([helper.make_node("Mul", ["X", "W"], ["Y"])], [_vi("X", shape=(3, 2))],
               [_vi("Y", shape=(3, 2))],
               [numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "W")],
               opset=opset)
    m.ir_version = 3
    x = np.arange(6, dtype=np.float32).reshape(3, 2) + 1
    want = _ort(m, {"X": x})[0]
    for library_first in (True, False):
        model = woodpecker.compile(m, library_first=library_first)
        np.testing.assert_array_equal(model.run({"X": x})["Y"], want)
    assert m.ir_version == 3 and [i.name for i in m.graph.input] == ["X"]
