"""woodpecker.InferenceSession against onnxruntime.InferenceSession where ONNX Runtime's own
Python API tests found them apart: an unknown provider in set_providers, a missing input's
message, string feeds as bytes or void arrays, a graph input passed straight to an output,
the graph-assignment record's switch, the inputs' ep devices, external data files supplied
in memory. Each test asks ORT the same question in the same test."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

import woodpecker
from tests.helpers import make_model, rand
from woodpecker.errors import WoodpeckerError

F, S, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.STRING, onnx.TensorProto.INT64
RECORD = "session.record_ep_graph_assignment_info"


def both(data, tmp_path, so=None, **kw):
    theirs = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"], **kw)
    ours = woodpecker.InferenceSession(data, so, providers=["CPUExecutionProvider"], **kw,
                                       cache=tmp_path / "plans")
    return theirs, ours


def add_model():
    return make_model([helper.make_node("Add", ["x", "y"], ["z"], name="add_0")],
                      [("x", [2, 3]), ("y", [2, 3])], [("z", [2, 3])]).SerializeToString()


def raised(call):
    try:
        call()
    except Exception as e:      # noqa: BLE001 - the exception is what is compared
        return e
    raise AssertionError("no exception")


def test_set_providers_unknown_name_raises_as_ort(tmp_path):
    theirs, ours = both(add_model(), tmp_path)
    for s in (theirs, ours):
        e = raised(lambda s=s: s.set_providers(["InvalidProvider"]))
        assert isinstance(e, RuntimeError) and "Unknown Provider Type: InvalidProvider" in str(e)
    assert isinstance(raised(lambda: ours.set_providers(["InvalidProvider"])), WoodpeckerError)
    # known to ORT but not available here: a warning, the session stays on the CPU
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours.set_providers(["CUDAExecutionProvider"])
    assert len(caught) == 1 and "CUDAExecutionProvider" in str(caught[0].message)
    x = rand(2, 3, seed=1)
    np.testing.assert_allclose(ours.run(None, {"x": x, "y": x})[0], x + x)
    # in the constructor ORT falls back to the CPU; so does Woodpecker, with a warning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ort.InferenceSession(add_model(), providers=["InvalidProvider"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        woodpecker.InferenceSession(add_model(), providers=["InvalidProvider"],
                                    cache=tmp_path / "plans")
    assert any("InvalidProvider" in str(w.message) for w in caught)


def test_missing_input_message_and_type_are_ort_s(tmp_path):
    theirs, ours = both(add_model(), tmp_path)
    y = rand(2, 3)
    for feed in ({"y": y}, {}, {"y": y, "w": y}):
        mine, ort_s = raised(lambda: ours.run(None, feed)), raised(lambda: theirs.run(None, feed))
        assert type(ort_s) is ValueError and isinstance(mine, ValueError)
        assert str(mine) == str(ort_s)
    assert str(raised(lambda: ours.run(None, {"y": y}))) == \
        "Required inputs (['x']) are missing from input feed (['y'])."


def test_string_feeds_as_bytes_or_void_arrays(tmp_path):
    data = make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", [2, 2], S)],
                      [("y", [2, 2], S)]).SerializeToString()
    theirs, ours = both(data, tmp_path)
    for x in (np.array([b"this", b"is", b"identity", b"test"]).reshape(2, 2),
              np.array([b"must", b"have", b"same", b"size"], dtype=np.void).reshape(2, 2),
              np.array([b"a\x00", b"bc", "é".encode(), b"d"], dtype="S4").reshape(2, 2),
              np.array(["this", "is", "a", "test"]).reshape(2, 2)):
        got, want = ours.run(None, {"x": x})[0], theirs.run(None, {"x": x})[0]
        assert got.dtype == want.dtype == object and all(type(v) is str for v in got.flat)
        items = [bytes(e).rstrip(b"\0") if x.dtype.kind != "U" else str(e).encode()
                 for e in x.flat]
        assert got.ravel().tolist() == [e.decode() for e in items]
        # ORT reads a bytes element that fills its itemsize on into the next one's bytes:
        # equal where it ends with a NUL, and as ORT's own test compares them (cut to S8)
        for g, w, e in zip(got.flat, want.flat, items):
            assert g == w if len(e) < x.dtype.itemsize or x.dtype.kind != "S" else \
                w.startswith(g)
    bad = np.array([b"a\xffb", b"c", b"d", b"e"]).reshape(2, 2)     # no UTF-8
    assert type(raised(lambda: ours.run(None, {"x": bad}))) is \
        type(raised(lambda: theirs.run(None, {"x": bad})))


def test_graph_input_passed_to_an_output_is_a_copy(tmp_path):
    shape = [1, 2, 2, 2]
    ten = onnx.numpy_helper.from_array(np.array(10, np.float32), "ten")
    vi = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Add", ["x", "ten"], ["plus"])], "passthrough",
                              [vi("x", F, shape), vi("unused", F, shape)],
                              [vi("plus", F, shape), vi("x", F, shape), vi("unused", F, shape)],
                              [ten])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    theirs, ours = both(data.SerializeToString(), tmp_path)
    kept = []
    for i in range(3):
        feed = {"x": np.full(shape, float(i), np.float32), "unused": rand(*shape, seed=i)}
        got, want = ours.run(None, feed), theirs.run(None, feed)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        assert not any(np.shares_memory(a, v) for a in got for v in feed.values())
        kept.append((got, {k: v.copy() for k, v in feed.items()}))
        feed["x"][...] = -1        # the caller's array changed after the run
    for i, (got, fed) in enumerate(kept):
        np.testing.assert_array_equal(got[1], np.full(shape, float(i), np.float32))
        assert ours.run(["x"], fed)[0].tolist() == fed["x"].tolist()
    # every output an input: nothing to compile, ORT's own session runs it
    only = helper.make_graph([], "only", [vi("x", F, [2])], [vi("x", F, [2])])
    theirs, ours = both(helper.make_model(only).SerializeToString(), tmp_path)
    x = rand(2)
    got = ours.run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, theirs.run(None, {"x": x})[0])
    assert not np.shares_memory(got, x)


def test_graph_assignment_info_only_when_recorded(tmp_path):
    theirs, ours = both(add_model(), tmp_path)
    for s in (theirs, ours):
        e = raised(s.get_provider_graph_assignment_info)
        assert isinstance(e, ort_errors.Fail)
        assert f"Session configuration entry '{RECORD}' must be set to \"1\"" in str(e)
    for value in ("0", "1"):
        so = ort.SessionOptions()
        so.add_session_config_entry(RECORD, value)
        theirs, ours = both(add_model(), tmp_path, so)
        if value == "0":
            assert isinstance(raised(ours.get_provider_graph_assignment_info), ort_errors.Fail)
            assert isinstance(raised(theirs.get_provider_graph_assignment_info),
                              ort_errors.Fail)
            continue
        want = [n.name for s in theirs.get_provider_graph_assignment_info()
                for n in s.get_nodes()]
        got = [n.name for s in ours.get_provider_graph_assignment_info() for n in s.get_nodes()]
        assert got == want == ["add_0"]


def test_input_epdevices_are_ort_s_cpu_devices(tmp_path):
    theirs, ours = both(add_model(), tmp_path)
    want, got = theirs.get_input_epdevices(), ours.get_input_epdevices()
    assert len(got) == len(want) == 2
    assert [d.ep_name for d in got] == [d.ep_name for d in want] == ["CPUExecutionProvider"] * 2
    assert [d.device.type for d in got] == [d.device.type for d in want]


def external_pads_model(folder):
    """Pad(x[1,2], pads) with `pads` an initializer whose data is in pads.bin, not on disk
    (and a graph input, as in ORT's own test model: ORT's shape inference then reads no
    external data)."""
    pads = onnx.TensorProto(name="pads", data_type=I64, dims=[4],
                            data_location=onnx.TensorProto.EXTERNAL)
    for key, value in (("location", "pads.bin"), ("offset", "0"), ("length", "32")):
        pads.external_data.add(key=key, value=value)
    vi = helper.make_tensor_value_info
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["y"])], "pad",
        [vi("x", F, [1, 2]), vi("pads", I64, [4])], [vi("y", F, [2, 3])], [pads]),
        opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = folder / "m.onnx"
    onnx.save_model(m, path)
    return str(path)


def test_external_data_files_in_memory(tmp_path):
    path = external_pads_model(tmp_path)
    x = rand(1, 2, seed=2)
    with pytest.raises(ort_errors.Fail):       # no file, none in memory: as ORT
        woodpecker.InferenceSession(path, cache=tmp_path / "plans")
    with pytest.raises(ort_errors.Fail):
        ort.InferenceSession(path)
    results = []
    for pads in ([0, 0, 1, 1], [1, 0, 0, 1]):
        blob = np.array(pads, np.int64).tobytes()
        so = ort.SessionOptions()
        so.add_external_initializers_from_files_in_memory(["pads.bin"], [blob], [len(blob)])
        theirs, ours = both(path, tmp_path, so)
        got = ours.run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, theirs.run(None, {"x": x})[0])
        results.append(got)
    assert not np.array_equal(results[0], results[1])    # each buffer's values, keyed apart
    assert not (tmp_path / "pads.bin").exists()
