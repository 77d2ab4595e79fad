"""woodpecker.InferenceSession against onnxruntime.InferenceSession: the same calling code runs
against both and gets the same answers; the plan is compiled once and then loaded from the
cache; a model with a dynamic dimension is compiled for the first feed's shapes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import woodpecker
from tests.helpers import make_model, rand


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
    assert sess.get_providers() == ["WoodpeckerExecutionProvider"]
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
    with pytest.raises(woodpecker.WoodpeckerError, match="cannot use CUDAExecutionProvider"):
        woodpecker.InferenceSession(str(path), providers=["CUDAExecutionProvider"])
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
    with pytest.raises(woodpecker.WoodpeckerError, match="missing input 'x'"):
        again.run(None, {})
