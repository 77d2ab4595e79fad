"""woodpecker.InferenceSession against onnxruntime.InferenceSession: the same calling code runs
against both and gets the same answers and the same exception types; the plan is compiled once
and then loaded from the cache, under a key of everything that defines it (external data
included), in a cache kept under its byte limit; a model with a dynamic dimension is compiled
for the first feed's shapes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from importlib.metadata import version

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

import woodpecker
from tests.helpers import make_model, rand
from woodpecker.errors import InputError, ModelError


def two_output_model(batch="N"):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"]),
             helper.make_node("GlobalAveragePool", ["y"], ["z"])]
    vi = helper.make_tensor_value_info
    f = 1  # TensorProto.FLOAT
    return make_model(nodes, [vi("x", f, [batch, 4, 6, 6])],
                      [vi("y", f, [batch, 8, 6, 6]), vi("z", f, [batch, 8, 1, 1])],
                      {"w": rand(8, 4, 3, 3, seed=1)})


def client(session_class, path, x, **kw):
    """What an ONNX Runtime user's program does with a session."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = session_class(str(path), so, providers=["CPUExecutionProvider"], **kw)
    inputs = [(i.name, list(i.shape), i.type) for i in sess.get_inputs()]
    outputs = [(o.name, list(o.shape), o.type) for o in sess.get_outputs()]
    feed = {sess.get_inputs()[0].name: x}
    every = sess.run(None, feed)
    last = sess.run([sess.get_outputs()[-1].name], feed)
    return sess, inputs, outputs, every, last


@pytest.mark.parametrize("batch", ["N", 2])
def test_same_calling_code_as_onnxruntime(tmp_path, batch):
    path = tmp_path / "m.onnx"
    path.write_bytes(two_output_model(batch).SerializeToString())
    x = rand(2, 4, 6, 6, seed=3)
    _, *theirs = client(ort.InferenceSession, path, x)
    sess, *ours = client(woodpecker.InferenceSession, path, x, cache=tmp_path / "plans")
    assert ours[0] == theirs[0] and ours[1] == theirs[1]    # names, shapes, types
    for a, b in zip(ours[2] + ours[3], theirs[2] + theirs[3]):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert sess.get_providers() == ["WoodpeckerExecutionProvider", "CPUExecutionProvider"]
    assert not sess.loaded_from_cache
    again, *_ = client(woodpecker.InferenceSession, path, x, cache=tmp_path / "plans")
    assert again.loaded_from_cache and len(list((tmp_path / "plans").iterdir())) == 1
    if batch == "N":   # another batch size: another plan
        np.testing.assert_allclose(again.run(["z"], {"x": x[:1]})[0],
                                   ort.InferenceSession(str(path)).run(["z"], {"x": x[:1]})[0],
                                   rtol=1e-4, atol=1e-5)
        assert len(list((tmp_path / "plans").iterdir())) == 2


def test_errors_are_one_line(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(two_output_model(2).SerializeToString())
    sess = woodpecker.InferenceSession(path, cache=tmp_path / "plans")
    x = rand(2, 4, 6, 6)
    with pytest.raises(woodpecker.WoodpeckerError, match="unknown output 'q'"):
        sess.run(["q"], {"x": x})
    with pytest.raises(woodpecker.WoodpeckerError, match="unknown input 'v'"):
        sess.run(None, {"x": x, "v": x})
    with pytest.raises(woodpecker.WoodpeckerError, match="has shape 1x4x6x6, expected 2x4x6x6"):
        sess.run(None, {"x": x[:1]})
    # a damaged cached plan is compiled again, with a note
    (plan,) = (tmp_path / "plans").iterdir()
    (plan / "weights.bin").write_bytes(b"broken")
    again = woodpecker.InferenceSession(path, cache=tmp_path / "plans")
    assert not again.loaded_from_cache
    # the same model's result; not bit for bit: the compile again picks its library by timing
    # (ONNX Runtime, or OpenVINO on Woodpecker's graph, round differently)
    np.testing.assert_allclose(again.run(None, {"x": x})[1], sess.run(None, {"x": x})[1],
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(woodpecker.WoodpeckerError, match=r"Required inputs \(\['x'\]\)"):
        again.run(None, {})


# -- external data -------------------------------------------------------------------------
def external_model(folder, seed=1):
    """x[2,16] @ w[16,16] → Relu, its weight in `folder`/model.data; returns the model path."""
    folder.mkdir(parents=True, exist_ok=True)
    vi = helper.make_tensor_value_info
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["m"]),
                    helper.make_node("Relu", ["m"], ["y"])],
                   [vi("x", 1, [2, 16])], [vi("y", 1, [2, 16])], {"w": rand(16, 16, seed=seed)})
    onnx.save_model(m, folder / "model.onnx", save_as_external_data=True,
                    location="model.data", size_threshold=0)
    assert (folder / "model.data").stat().st_size == 16 * 16 * 4
    return folder / "model.onnx"


def ort_run(path, x):
    return ort.InferenceSession(str(path)).run(None, {"x": x})[0]


def test_rewritten_external_data_is_compiled_again(tmp_path, monkeypatch):
    path, x, plans = external_model(tmp_path / "m"), rand(2, 16, seed=4), tmp_path / "plans"
    monkeypatch.chdir(tmp_path / "m")    # (where the data is found either way)
    first = woodpecker.InferenceSession(path, cache=plans)
    np.testing.assert_allclose(first.run(None, {"x": x})[0], ort_run(path, x), rtol=1e-5,
                               atol=1e-6)
    graph = path.read_bytes()
    (tmp_path / "m" / "model.data").write_bytes(rand(16, 16, seed=9).tobytes())  # same graph
    assert path.read_bytes() == graph
    second = woodpecker.InferenceSession(path, cache=plans)
    assert not second.loaded_from_cache
    np.testing.assert_allclose(second.run(None, {"x": x})[0], ort_run(path, x), rtol=1e-5,
                               atol=1e-6)
    assert woodpecker.InferenceSession(path, cache=plans).loaded_from_cache
    # each plan's folder records what it was built from: the model's and the data's sha256,
    # the options, the target and the libraries' versions
    sha = hashlib.sha256((tmp_path / "m" / "model.data").read_bytes()).hexdigest()
    docs = [json.loads((d / "source.json").read_text())["document"] for d in plans.iterdir()]
    assert sorted(d["external_data"]["model.data"] == sha for d in docs) == [False, True]
    doc = next(d for d in docs if d["external_data"]["model.data"] == sha)
    assert doc["model"] == hashlib.sha256(graph).hexdigest()
    assert doc["versions"]["onnxruntime"] == ort.__version__
    assert doc["versions"]["halide"] == version("halide")
    assert doc["versions"]["woodpecker"] == woodpecker.__version__
    assert doc["options"] == second._compile_options.to_json() and doc["target"]


def test_a_plan_whose_record_differs_is_not_served(tmp_path):
    path, x, plans = external_model(tmp_path / "m"), rand(2, 16, seed=4), tmp_path / "plans"
    woodpecker.InferenceSession(path, cache=plans)
    (folder,) = plans.iterdir()
    source = json.loads((folder / "source.json").read_text())
    source["document"]["external_data"]["model.data"] = "0" * 64    # built from other weights
    (folder / "source.json").write_text(json.dumps(source))
    note = io.StringIO()
    again = woodpecker.InferenceSession(path, cache=plans, progress=note)
    assert not again.loaded_from_cache and "records another model" in note.getvalue()
    np.testing.assert_allclose(again.run(None, {"x": x})[0], ort_run(path, x), rtol=1e-5,
                               atol=1e-6)
    (folder / "source.json").unlink()          # a plan that records nothing is no match either
    assert not woodpecker.InferenceSession(path, cache=plans, progress=note).loaded_from_cache
    assert woodpecker.InferenceSession(path, cache=plans).loaded_from_cache


def test_external_data_is_found_beside_the_model(tmp_path, monkeypatch):
    path, x = external_model(tmp_path / "m"), rand(2, 16, seed=4)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    want = ort_run(path, x)
    sess = woodpecker.InferenceSession(str(path), cache=tmp_path / "plans")
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(woodpecker.compile(str(path)).run({"x": x})["y"], want,
                               rtol=1e-5, atol=1e-6)
    # bytes: their external data is looked for in the working directory, as ORT does
    monkeypatch.chdir(tmp_path / "m")
    from_bytes = woodpecker.InferenceSession(path.read_bytes(), cache=tmp_path / "plans")
    np.testing.assert_allclose(from_bytes.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)


def raised(make):
    try:
        make()
    except Exception as e:
        return e
    pytest.fail("no exception")


def test_missing_or_short_external_data_fails_as_ort_does(tmp_path, monkeypatch):
    path = external_model(tmp_path / "m")
    data = path.read_bytes()
    monkeypatch.chdir(tmp_path)                # bytes whose data is not in the working folder
    cases = [lambda S: S(data)]
    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "model.onnx").write_bytes(data)      # no model.data beside it
    cases.append(lambda S: S(str(tmp_path / "n" / "model.onnx")))
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "model.onnx").write_bytes(data)
    (tmp_path / "s" / "model.data").write_bytes(b"short")
    cases.append(lambda S: S(str(tmp_path / "s" / "model.onnx")))
    for make in cases:
        theirs = raised(lambda: make(ort.InferenceSession))
        ours = raised(lambda: make(lambda m: woodpecker.InferenceSession(
            m, cache=tmp_path / "plans")))
        assert isinstance(ours, type(theirs)) and isinstance(ours, ModelError), (ours, theirs)
        assert "\n" not in str(ours) and "model.data" in str(ours)


# -- the cache's bound -----------------------------------------------------------------------
def plan_bytes(folder):
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_the_cache_keeps_under_its_limit_least_recently_used_out(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(two_output_model("N").SerializeToString())
    plans = tmp_path / "plans"
    (plans / "notes").mkdir(parents=True)          # not a plan: never touched
    x = rand(3, 4, 6, 6, seed=3)

    def run(batch):
        sess = woodpecker.InferenceSession(path, cache=plans)
        sess.run(None, {"x": x[:batch]})
        return sess.loaded_from_cache

    assert not run(1) and not run(2)
    folders = {d.name: plan_bytes(d) for d in plans.iterdir() if d.name != "notes"}
    assert len(folders) == 2
    one, two = sorted(folders, key=lambda n: os.stat(plans / n).st_mtime_ns)
    assert run(1)                                 # batch 1's plan loaded: now the most recent
    limit = folders[one] + folders[two] + folders[two] // 2
    monkeypatch.setenv("WOODPECKER_SESSION_CACHE_BYTES", str(limit))
    assert not run(3)                             # a third plan: batch 2's, least recent, goes
    left = {d.name for d in plans.iterdir()}
    assert one in left and two not in left and "notes" in left and len(left) == 3
    assert sum(plan_bytes(plans / n) for n in left) <= limit
    three = (left - {one, "notes"}).pop()
    assert run(1) and not run(2)                  # batch 3's plan is now the least recent
    assert {d.name for d in plans.iterdir()} - {one, "notes"} not in ({three}, set())
    assert three not in {d.name for d in plans.iterdir()}
    monkeypatch.setenv("WOODPECKER_SESSION_CACHE_BYTES", "1")     # the plan just saved stays
    sess = woodpecker.InferenceSession(path, cache=plans)
    sess.run(None, {"x": np.concatenate([x, x])})                  # batch 6: a new plan
    assert not sess.loaded_from_cache
    assert len([d for d in plans.iterdir() if d.name != "notes"]) == 1
    monkeypatch.setenv("WOODPECKER_SESSION_CACHE_BYTES", "lots")
    with pytest.raises(woodpecker.WoodpeckerError, match="WOODPECKER_SESSION_CACHE_BYTES"):
        woodpecker.InferenceSession(path, cache=plans)


# -- run as ORT runs -------------------------------------------------------------------------
def scalar_model():
    vi = helper.make_tensor_value_info
    return make_model([helper.make_node("Mul", ["x", "s"], ["y"]),
                       helper.make_node("Add", ["y", "s"], ["z"])],
                      [vi("x", 1, [2, 3]), vi("s", 1, [])],
                      [vi("y", 1, [2, 3]), vi("z", 1, [2, 3])])


def test_run_takes_what_ort_takes(tmp_path):
    data = scalar_model().SerializeToString()
    ours = woodpecker.InferenceSession(data, cache=tmp_path / "plans")
    theirs = ort.InferenceSession(data)
    x, s = rand(2, 3, seed=5), np.array(1.5, np.float32)
    want = theirs.run(None, {"x": x, "s": s})
    assert len(theirs.run([], {"x": x, "s": s})) == 2
    for got in (ours.run([], {"x": x, "s": s}), ours.run(None, {"x": x.tolist(), "s": 1.5}),
                ours.run(None, {"x": x.tolist(), "s": np.float64(1.5)})):
        assert [a.dtype for a in got] == [np.float32, np.float32]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    ints = ours.run(None, {"x": [[1, 2, 3], [4, 5, 6]], "s": s})
    np.testing.assert_allclose(ints[0], theirs.run(None, {"x": [[1, 2, 3], [4, 5, 6]],
                                                          "s": s})[0])
    ragged = raised(lambda: ours.run(None, {"x": [[1, 2], [3]], "s": s}))
    assert isinstance(ragged, type(raised(lambda: theirs.run(None, {"x": [[1, 2], [3]],
                                                                    "s": s}))))
    assert isinstance(ragged, InputError) and "\n" not in str(ragged)


def test_providers_ort_cannot_use_are_skipped_with_a_warning(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(two_output_model(2).SerializeToString())
    x = rand(2, 4, 6, 6, seed=3)
    want = ort.InferenceSession(str(path)).run(None, {"x": x})
    for providers, options in [(ort.get_available_providers(), None),
                               (["CUDAExecutionProvider", "CPUExecutionProvider"], None),
                               ([("CUDAExecutionProvider", {"device_id": 0}),
                                 "CPUExecutionProvider"], None),
                               (["BogusExecutionProvider"], [{}]),
                               (["CPUExecutionProvider"], [{"arena": "1"}])]:
        skipped = [p[0] if isinstance(p, tuple) else p for p in providers
                   if (p[0] if isinstance(p, tuple) else p) != "CPUExecutionProvider"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sess = woodpecker.InferenceSession(str(path), providers=providers,
                                               provider_options=options,
                                               cache=tmp_path / "plans")
        mine = [str(w.message) for w in caught if "Woodpecker" in str(w.message)]
        if skipped:
            assert len(mine) == 1 and "\n" not in mine[0]
            assert all(name in mine[0] for name in skipped), mine
        else:
            assert mine == []
        for a, b in zip(sess.run(None, {"x": x}), want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # what ORT falls back to the CPU for, never an error: a warning line, then the CPU
    for providers, options in [(["CPUExecutionProvider"], [{}, {}]), ([42], None),
                               ("CUDAExecutionProvider", None)]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # (ORT's own lines)
            assert ort.InferenceSession(str(path), providers=providers,
                                        provider_options=options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sess = woodpecker.InferenceSession(str(path), providers=providers,
                                               provider_options=options,
                                               cache=tmp_path / "plans")
        assert len(caught) == 1 and "\n" not in str(caught[0].message)
        np.testing.assert_allclose(sess.run(["z"], {"x": x})[0], want[1], rtol=1e-4, atol=1e-5)


def test_errors_have_ort_types(tmp_path):
    path = tmp_path / "m.onnx"
    data = two_output_model(2).SerializeToString()
    path.write_bytes(data)
    (tmp_path / "garbage.onnx").write_bytes(b"garbage\x00\xff\x12")
    making = {
        "missing file": lambda S: S(str(tmp_path / "missing.onnx")),
        "garbage file": lambda S: S(str(tmp_path / "garbage.onnx")),
        "a folder": lambda S: S(str(tmp_path)),
        "garbage bytes": lambda S: S(b"garbage\x00\xff\x12"),
        "truncated bytes": lambda S: S(data[:len(data) // 2]),
        "empty bytes": lambda S: S(b""),
    }
    for what, make in making.items():
        theirs = raised(lambda: make(ort.InferenceSession))
        ours = raised(lambda: make(lambda m: woodpecker.InferenceSession(
            m, cache=tmp_path / "plans")))
        assert isinstance(ours, type(theirs)), (what, ours, theirs)
        assert type(theirs).__module__ == ort_errors.__name__, what
        assert isinstance(ours, ModelError) and "\n" not in str(ours), what
    ours_s = woodpecker.InferenceSession(str(path), cache=tmp_path / "plans")
    theirs_s = ort.InferenceSession(str(path))
    x = rand(2, 4, 6, 6)
    running = {
        "wrong input name": lambda s: s.run(None, {"v": x}),
        "an input too many": lambda s: s.run(None, {"x": x, "v": x}),
        "wrong dtype": lambda s: s.run(None, {"x": x.astype(np.float64)}),
        "wrong shape": lambda s: s.run(None, {"x": x[:1]}),
        "wrong rank": lambda s: s.run(None, {"x": x[0]}),
        "unknown output": lambda s: s.run(["q"], {"x": x}),
    }
    for what, call in running.items():
        theirs = raised(lambda: call(theirs_s))
        ours = raised(lambda: call(ours_s))
        assert isinstance(ours, type(theirs)), (what, ours, theirs)
        assert isinstance(ours, InputError) and "\n" not in str(ours), what
    # a user's ORT program catches ours by ORT's own type
    with pytest.raises(ort_errors.InvalidArgument, match="has dtype float64"):
        ours_s.run(None, {"x": x.astype(np.float64)})
    with pytest.raises(ort_errors.NoSuchFile, match="not found"):
        woodpecker.InferenceSession(str(tmp_path / "missing.onnx"))


# -- CompiledModel.run ------------------------------------------------------------------------
def test_compiled_model_run_wants_a_dict(tmp_path):
    model = woodpecker.compile(two_output_model(2), engines="numpy")
    x = rand(2, 4, 6, 6)
    for feeds in ([x], (x,), x):
        with pytest.raises(InputError, match=r"a dict \{name: array\}") as e:
            model.run(feeds)
        assert "\n" not in str(e.value) and "model(*arrays)" in str(e.value)
    np.testing.assert_allclose(model(x)[1], model.run({"x": x})["z"])
