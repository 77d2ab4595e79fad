"""woodpecker.InferenceSession with ONNX Runtime's SessionOptions and RunOptions, the rest of
its session methods, and the value types ORT's CPU session takes: each case runs the same
calls on onnxruntime.InferenceSession and compares (session_options.py, session_api.py)."""

from __future__ import annotations

import ctypes
import json
import re
import threading
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

import woodpecker
from tests.helpers import rand

vi = helper.make_tensor_value_info
F = onnx.TensorProto.FLOAT


def model(nodes, ins, outs, inits=(), ir=8, opset=17, **kw):
    g = helper.make_graph(nodes, "g", ins, outs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], **kw)
    m.ir_version = ir
    return m


def add_model(batch="N"):
    """y = relu(x + w), w[3] an initializer."""
    return model([helper.make_node("Add", ["x", "w"], ["s"]),
                  helper.make_node("Relu", ["s"], ["y"])],
                 [vi("x", F, [batch, 3])], [vi("y", F, [batch, 3])],
                 [numpy_helper.from_array(np.array([1, -2, 3], np.float32), "w")])


def both(data, so_factory, tmp_path, **kw):
    """ORT's session and ours of `data`, each with options made by `so_factory`."""
    theirs = ort.InferenceSession(data, so_factory(), providers=["CPUExecutionProvider"])
    ours = woodpecker.InferenceSession(data, so_factory(), cache=tmp_path / "plans", **kw)
    return theirs, ours


def test_add_initializer_is_compiled_in_and_keyed(tmp_path):
    data = add_model(2).SerializeToString()
    w = np.array([5, 5, -9], np.float32)
    value = ort.OrtValue.ortvalue_from_numpy(w)      # (kept alive, as ORT asks)

    def options():
        so = ort.SessionOptions()
        so.add_initializer("w", value)
        return so

    x = rand(2, 3, seed=1)
    theirs, ours = both(data, options, tmp_path)
    want = theirs.run(None, {"x": x})[0]
    assert not np.allclose(want, ort.InferenceSession(data).run(None, {"x": x})[0])
    np.testing.assert_allclose(ours.run(None, {"x": x})[0], want, rtol=1e-6)
    # the plan without the override is another cache entry, and the override's is served again
    plain = woodpecker.InferenceSession(data, cache=tmp_path / "plans")
    assert not plain.loaded_from_cache
    np.testing.assert_allclose(plain.run(None, {"x": x})[0],
                               ort.InferenceSession(data).run(None, {"x": x})[0], rtol=1e-6)
    again = woodpecker.InferenceSession(data, options(), cache=tmp_path / "plans")
    assert again.loaded_from_cache
    np.testing.assert_allclose(again.run(None, {"x": x})[0], want, rtol=1e-6)
    docs = [json.loads((d / "source.json").read_text())["document"]
            for d in (tmp_path / "plans").iterdir()]
    assert sorted("initializers" in d for d in docs) == [False, True]


def test_free_dimension_overrides_fix_the_input_shapes(tmp_path):
    m = add_model("N")
    m.graph.input[0].type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    data = m.SerializeToString()
    for how in ("name", "denotation"):
        def options():
            so = ort.SessionOptions()
            if how == "name":
                so.add_free_dimension_override_by_name("N", 4)
            else:
                so.add_free_dimension_override_by_denotation("DATA_BATCH", 4)
            return so

        theirs, ours = both(data, options, tmp_path)
        assert [i.shape for i in ours.get_inputs()] == [i.shape for i in theirs.get_inputs()] \
            == [[4, 3]]
        x = rand(4, 3, seed=2)
        np.testing.assert_allclose(ours.run(None, {"x": x})[0], theirs.run(None, {"x": x})[0])
        for s in (theirs, ours):
            with pytest.raises(ort_errors.InvalidArgument):
                s.run(None, {"x": x[:2]})


def test_add_external_initializers_supply_the_data(tmp_path, monkeypatch):
    folder = tmp_path / "m"
    folder.mkdir()
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", F, [2, 4])],
              [vi("y", F, [2, 4])], [numpy_helper.from_array(rand(4, 4, seed=3), "w")])
    onnx.save_model(m, folder / "model.onnx", save_as_external_data=True,
                    location="model.data", size_threshold=0)
    data = (folder / "model.onnx").read_bytes()     # bytes: no data file in the working folder
    monkeypatch.chdir(tmp_path)
    w = rand(4, 4, seed=7)
    value = ort.OrtValue.ortvalue_from_numpy(w)

    def options():
        so = ort.SessionOptions()
        so.add_external_initializers(["w"], [value])
        return so

    x = rand(2, 4, seed=4)
    theirs, ours = both(data, options, tmp_path)
    np.testing.assert_allclose(ours.run(None, {"x": x})[0], theirs.run(None, {"x": x})[0],
                               rtol=1e-5)
    np.testing.assert_allclose(ours.run(None, {"x": x})[0], x @ w, rtol=1e-5)


def test_optimized_model_filepath_and_profiling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = add_model(2).SerializeToString()
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    so.enable_profiling = True
    so.profile_file_prefix = "wp_profile"
    sess = woodpecker.InferenceSession(data, so, cache=tmp_path / "plans")
    assert onnx.load(tmp_path / "optimized.onnx").graph.node      # written, by ORT itself
    x = rand(2, 3, seed=5)
    sess.run(None, {"x": x})
    sess.run(None, {"x": x})
    assert sess.get_session_options() is so
    ort_sess = ort.InferenceSession(data, so)
    assert abs(sess.get_profiling_start_time_ns() - ort_sess.get_profiling_start_time_ns()) < 60e9
    assert ort.InferenceSession(data).get_profiling_start_time_ns() == 0 == \
        woodpecker.InferenceSession(data, cache=tmp_path / "plans").get_profiling_start_time_ns()
    name = sess.end_profiling()
    theirs = ort_sess.end_profiling()     # (ORT's, for the name's form)
    pattern = r"wp_profile_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d{3}\.json"
    assert re.fullmatch(pattern, name) and re.fullmatch(pattern, theirs)
    events = json.loads((tmp_path / name).read_text())
    assert [e["name"] for e in events if e["cat"] == "Session"] == ["model_run"] * 2
    nodes = [e for e in events if e["cat"] == "Node"]
    assert nodes and all(e["ph"] == "X" and e["dur"] >= 0 and e["args"]["op_name"]
                         for e in nodes)
    assert woodpecker.InferenceSession(data, cache=tmp_path / "plans").end_profiling() == ""


def test_options_ignored_are_one_warning_line(tmp_path):
    data = add_model(2).SerializeToString()
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    so.inter_op_num_threads = 2
    so.log_severity_level = 3
    so.logid = "mine"
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = woodpecker.InferenceSession(data, so, cache=tmp_path / "plans")
    mine = [str(w.message) for w in caught if "Woodpecker" in str(w.message)]
    assert len(mine) == 1 and "execution_mode" in mine[0] and "inter_op_num_threads" in mine[0]
    x = rand(2, 3, seed=6)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0],
                               ort.InferenceSession(data).run(None, {"x": x})[0])
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # kept


def lora_model(path):
    """y = x @ (w + a @ b): a[4,r], b[r,4] the LoRA parameters, overridable (zeros by
    default), as ORT's LoRA examples build them."""
    m = model([helper.make_node("MatMul", ["a", "b"], ["ab"]),
               helper.make_node("Add", ["w", "ab"], ["wab"]),
               helper.make_node("MatMul", ["x", "wab"], ["y"])],
              [vi("x", F, [2, 4]), vi("a", F, [4, "r"]), vi("b", F, ["r", 4])],
              [vi("y", F, [2, 4])],
              [numpy_helper.from_array(rand(4, 4, seed=1), "w"),
               numpy_helper.from_array(np.zeros((4, 1), np.float32), "a"),
               numpy_helper.from_array(np.zeros((1, 4), np.float32), "b")])
    onnx.save(m, path)


def test_lora_adapters_run_as_in_ort(tmp_path):
    path = tmp_path / "lora.onnx"
    lora_model(path)
    keep = [rand(4, 2, seed=2), rand(2, 4, seed=3)]
    values = [ort.OrtValue.ortvalue_from_numpy(a) for a in keep]
    fmt = ort.AdapterFormat()
    fmt.set_adapter_version(1)
    fmt.set_model_version(1)
    fmt.set_parameters({"a": values[0], "b": values[1]})
    fmt.export_adapter(str(tmp_path / "a.onnx_adapter"))
    adapter = ort.LoraAdapter()
    adapter.Load(str(tmp_path / "a.onnx_adapter"))
    ro = ort.RunOptions()
    ro.add_active_adapter(adapter)
    theirs = ort.InferenceSession(str(path))
    ours = woodpecker.InferenceSession(str(path), cache=tmp_path / "plans")
    assert [i.name for i in ours.get_overridable_initializers()] == \
        [i.name for i in theirs.get_overridable_initializers()] == ["a", "b"]
    x = rand(2, 4, seed=4)
    want = theirs.run(None, {"x": x}, ro)[0]
    assert not np.allclose(want, theirs.run(None, {"x": x})[0])
    np.testing.assert_allclose(ours.run(None, {"x": x}, ro)[0], want, rtol=1e-5)
    np.testing.assert_allclose(ours.run(None, {"x": x}, ort.RunOptions())[0],
                               theirs.run(None, {"x": x})[0], rtol=1e-5)
    # an overridable initializer fed, as ORT takes it
    np.testing.assert_allclose(ours.run(None, {"x": x, "a": keep[0], "b": keep[1]})[0], want,
                               rtol=1e-5)


def test_run_options_terminate_and_log_fields(tmp_path):
    data = add_model(2).SerializeToString()
    theirs = ort.InferenceSession(data)
    ours = woodpecker.InferenceSession(data, cache=tmp_path / "plans")
    x = rand(2, 3)
    ro = ort.RunOptions()
    ro.log_severity_level = 3
    ro.logid = "tag"
    np.testing.assert_allclose(ours.run(None, {"x": x}, ro)[0], theirs.run(None, {"x": x}, ro)[0])
    ro.terminate = True
    for s in (theirs, ours):
        with pytest.raises(ort_errors.Fail, match="terminate flag"):
            s.run(None, {"x": x}, ro)


def test_the_session_methods_ort_has(tmp_path):
    data = add_model(2).SerializeToString()
    theirs = ort.InferenceSession(data)
    ours = woodpecker.InferenceSession(data, cache=tmp_path / "plans")
    x = rand(2, 3, seed=8)
    want = theirs.run(None, {"x": x})[0]
    assert "CPUExecutionProvider" in ours.get_providers()
    assert "CPUExecutionProvider" in ours.get_provider_options()
    assert isinstance(ours.get_session_options(), ort.SessionOptions)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours.set_providers(["CUDAExecutionProvider"])
    assert len(caught) == 1
    assert len(ours.get_input_memory_infos()) == len(theirs.get_input_memory_infos()) == 1
    assert ours.get_output_memory_infos()[0].name == theirs.get_output_memory_infos()[0].name
    # io binding: a bound input, an output the session allocates, one into a caller's buffer
    b = ours.io_binding()
    b.bind_cpu_input("x", x)
    b.bind_output("y")
    ours.run_with_iobinding(b)
    np.testing.assert_allclose(b.copy_outputs_to_cpu()[0], want)
    np.testing.assert_allclose(b.get_outputs()[0].numpy(), want)
    into = np.zeros((2, 3), np.float32)
    b2 = ours.io_binding()
    b2.bind_input("x", "cpu", 0, np.float32, [2, 3], x.ctypes.data)
    b2.bind_output("y", "cpu", 0, np.float32, [2, 3], into.ctypes.data)
    ours.run_with_iobinding(b2)
    np.testing.assert_allclose(into, want)
    with pytest.raises(ort_errors.InvalidArgument, match="CPU"):
        b2.bind_output("y", "cuda")
    # OrtValues in and out
    got = ours.run_with_ort_values(["y"], {"x": ort.OrtValue.ortvalue_from_numpy(x)})
    np.testing.assert_allclose(got[0].numpy(), want)
    # run_async: callback(results, user_data, error)
    done, seen = threading.Event(), {}

    def callback(results, user_data, err):
        seen.update(results=results, user_data=user_data, err=err)
        done.set()

    ours.run_async(None, {"x": x}, callback, "data")
    assert done.wait(60)
    assert seen["err"] == "" and seen["user_data"] == "data"
    np.testing.assert_allclose(seen["results"][0], want)
    with pytest.raises(ort_errors.Fail, match="record_ep_graph_assignment_info"):
        ours.get_provider_graph_assignment_info()      # (not recorded: ORT's Fail)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    ours = woodpecker.InferenceSession(data, so, cache=tmp_path / "plans")
    ours.run(None, {"x": x})
    info = ours.get_provider_graph_assignment_info()
    assert info and all(s.ep_name.startswith("WoodpeckerExecutionProvider:") for s in info)
    assert sum(len(s.get_nodes()) for s in info) >= 1
    dynamic = woodpecker.InferenceSession(add_model("N").SerializeToString(), so,
                                          cache=tmp_path / "plans")     # no plan yet
    assert [n.op_type for s in dynamic.get_provider_graph_assignment_info()
            for n in s.get_nodes()] == ["Add", "Relu"]
    assert ctypes.sizeof(ctypes.c_float) == 4


def test_value_types_ort_takes(tmp_path):
    cache = tmp_path / "plans"
    S = onnx.TensorProto.STRING
    strings = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", S, [2])],
                    [vi("y", S, [2])]).SerializeToString()
    x = np.array(["a", "bc"])          # numpy's str dtype, as ORT takes it
    assert woodpecker.InferenceSession(strings, cache=cache).run(None, {"x": x})[0].tolist() \
        == ort.InferenceSession(strings).run(None, {"x": x})[0].tolist()
    seq = model([helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], [vi("x", F, [3])],
                [helper.make_tensor_sequence_value_info("s", F, [3])]).SerializeToString()
    ours, theirs = woodpecker.InferenceSession(seq, cache=cache), ort.InferenceSession(seq)
    assert [o.type for o in ours.get_outputs()] == [o.type for o in theirs.get_outputs()] \
        == ["seq(tensor(float))"]
    v = rand(3)
    got, want = ours.run(None, {"x": v})[0], theirs.run(None, {"x": v})[0]
    assert len(got) == len(want) == 2 and all(np.array_equal(a, b) for a, b in zip(got, want))
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [3]))
    optional = model([helper.make_node("OptionalHasElement", ["o"], ["h"])],
                     [helper.make_value_info("o", opt_t)],
                     [vi("h", onnx.TensorProto.BOOL, [])], opset=18).SerializeToString()
    ours, theirs = woodpecker.InferenceSession(optional, cache=cache), \
        ort.InferenceSession(optional)
    assert ours.get_inputs()[0].type == theirs.get_inputs()[0].type
    assert ours.run(None, {"o": v})[0] == theirs.run(None, {"o": v})[0]
    # IR 3: initializers listed as graph inputs too (not overridable)
    ir3 = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", F, [3]), vi("w", F, [3])],
                [vi("y", F, [3])], [numpy_helper.from_array(rand(3, seed=2), "w")], ir=3,
                opset=7).SerializeToString()
    ours, theirs = woodpecker.InferenceSession(ir3, cache=cache), ort.InferenceSession(ir3)
    assert [i.name for i in ours.get_inputs()] == [i.name for i in theirs.get_inputs()]
    assert ours.get_overridable_initializers() == theirs.get_overridable_initializers() == []
    np.testing.assert_allclose(ours.run(None, {"x": v})[0], theirs.run(None, {"x": v})[0])


def if_model():
    """y = x + w if c else x - v: w and v initializers of the branches."""
    def branch(op, out, init):
        return helper.make_graph([helper.make_node(op, ["x", init], [out])], op, [],
                                 [vi(out, F, [2])],
                                 [numpy_helper.from_array(np.ones(2, np.float32), init)])
    return model([helper.make_node("If", ["c"], ["y"], then_branch=branch("Add", "a", "w"),
                                   else_branch=branch("Sub", "b", "v"))],
                 [vi("c", onnx.TensorProto.BOOL, []), vi("x", F, [2])], [vi("y", F, [2])])


def test_an_initializer_replaced_inside_a_subgraph_runs_as_in_ort(tmp_path):
    """ORT replaces an initializer by name at any depth (an If branch's): ours gave the
    model's own branch value, silently (issue 76)."""
    data = if_model().SerializeToString()
    value = ort.OrtValue.ortvalue_from_numpy(np.full(2, 10, np.float32))

    def options():
        so = ort.SessionOptions()
        so.add_initializer("w", value)
        return so

    feeds = {"c": np.array(True), "x": np.array([1, 2], np.float32)}
    theirs, ours = both(data, options, tmp_path)
    want = theirs.run(None, feeds)[0]
    np.testing.assert_array_equal(want, [11, 12])
    np.testing.assert_array_equal(ours.run(None, feeds)[0], want)


@pytest.mark.parametrize("kind", ["bfloat16", "float8_e4m3fn"])
def test_an_initializer_of_an_ml_dtypes_type_replaced_runs_as_in_ort(tmp_path, kind):
    """A bfloat16/float8 initializer replaced by add_initializer: ORT's own session with
    the options computes the model (the model itself ran on no plan before: issue 76)."""
    import ml_dtypes

    dtype = getattr(ml_dtypes, kind)
    w = numpy_helper.from_array(np.array([1, 2], np.float32).astype(dtype), "w")
    data = model([helper.make_node("Cast", ["w"], ["f"], to=F),
                  helper.make_node("Add", ["x", "f"], ["y"])],
                 [vi("x", F, [2])], [vi("y", F, [2])], [w], ir=10, opset=21).SerializeToString()
    value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
        np.array([5, 6], np.float32).astype(dtype).view(np.uint8 if kind != "bfloat16"
                                                         else np.uint16), w.data_type)

    def options():
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.add_initializer("w", value)
        return so

    x = np.array([1, 1], np.float32)
    theirs, ours = both(data, options, tmp_path)
    want = theirs.run(None, {"x": x})[0]
    np.testing.assert_array_equal(want, [6, 7])
    np.testing.assert_array_equal(ours.run(None, {"x": x})[0], want)


def config_model(config: str):
    m = add_model(2)
    helper.set_model_props(m, {"ort_config": config})
    return m.SerializeToString()


def test_session_options_from_the_model_as_ort_reads_them(tmp_path, monkeypatch):
    """ORT_LOAD_CONFIG_FROM_MODEL=1: the model's ort_config sets the options ORT reads from it
    (ORT's own test_loading_session_options_from_model); a bad entry is ORT's error type."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    data = config_model(json.dumps({"session_options": {
        "inter_op_num_threads": 5, "intra_op_num_threads": 2,
        "graph_optimization_level": 99, "enable_profiling": 1, "unknown": "ignored"}}))
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    ours = woodpecker.InferenceSession(data, cache=tmp_path / "plans")
    for s in (theirs, ours):
        so = s.get_session_options()
        assert (so.inter_op_num_threads, so.intra_op_num_threads) == (5, 2)
        assert so.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
        assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        assert so.enable_profiling
        s.run(None, {"x": rand(2, 3)})
        assert json.loads(open(s.end_profiling()).read())
    for bad in ("{not json", json.dumps({"session_options": {"enable_profiling": 7}}),
                json.dumps({"session_options": {"intra_op_num_threads": "two"}})):
        with pytest.raises(Exception) as t:
            ort.InferenceSession(config_model(bad), providers=["CPUExecutionProvider"])
        with pytest.raises(woodpecker.WoodpeckerError) as o:
            woodpecker.InferenceSession(config_model(bad), cache=tmp_path / "plans")
        assert isinstance(o.value, type(t.value)) and "\n" not in str(o.value), bad
    monkeypatch.delenv("ORT_LOAD_CONFIG_FROM_MODEL")
    plain = woodpecker.InferenceSession(data, cache=tmp_path / "plans")
    assert plain.get_session_options().intra_op_num_threads == 0
