"""Models ONNX Runtime refuses are refused at import, each with one line naming the node and the
fault, never a traceback (or a result); models it accepts whose values could not fit this
machine's memory are refused too."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import woodpecker
from tests.helpers import rand
from woodpecker.errors import WoodpeckerError

X = [("x", [1, 3, 8, 8])]
ANY = ["a", "b", "c", "d"]


def _model(nodes, outs, inits=None, opset=17):
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "g", [vi(n, TensorProto.FLOAT, s) for n, s in X],
                          [vi(n, t, s) for n, s, t in outs],
                          [numpy_helper.from_array(np.asarray(a), n)
                           for n, a in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def _conv(w=None, **attrs):
    w = rand(4, 3, 3, 3) if w is None else w
    return _model([helper.make_node("Conv", ["x", "w"], ["y"], **attrs)],
                  [("y", ANY, TensorProto.FLOAT)], {"w": w})


def _pool(**attrs):
    return _model([helper.make_node("MaxPool", ["x"], ["y"], **attrs)],
                  [("y", ANY, TensorProto.FLOAT)])


def _relu(out_type=TensorProto.FLOAT, opset=17, names=("", "")):
    return _model([helper.make_node("Relu", ["x"], ["a"], name=names[0]),
                   helper.make_node("Relu", ["a"], ["y"], name=names[1])],
                  [("y", [1, 3, 8, 8], out_type)], opset=opset)


CASES = {
    # refused by ONNX Runtime too
    "pool pads >= kernel": (_pool(kernel_shape=[2, 2], pads=[2, 2, 2, 2]),
                            "pads .* must be smaller than the kernel", True),
    "unknown auto_pad": (_conv(auto_pad="BOGUS"), "auto_pad 'BOGUS' is none of", True),
    "auto_pad with pads": (_conv(auto_pad="SAME_UPPER", pads=[1, 1, 1, 1]),
                           "auto_pad SAME_UPPER and explicit pads", True),
    "opset 99": (_relu(opset=99), "opset 99 is newer", True),
    "declared int64 output": (_relu(TensorProto.INT64), "Inferred elem type differs", True),
    "float64 weights": (_conv(rand(4, 3, 3, 3).astype(np.float64)),
                        "'x' .float32. and 'w' .float64. must have one type", True),
    "float16 weights": (_conv(rand(4, 3, 3, 3).astype(np.float16)), "must have one type", True),
    "int32 weights": (_conv(np.ones((4, 3, 3, 3), np.int32)), "'w' is int32, which Conv", True),
    "duplicate node names": (_relu(names=("n", "n")), "two nodes are named 'n'", True),
    "conv strides 0": (_conv(strides=[0, 0]), "Conv_0.*strides .0, 0. must be", True),
    "pool strides 0": (_pool(kernel_shape=[2, 2], strides=[0, 0]), "strides .0, 0.", True),
    "negative strides": (_conv(strides=[-1, -1]), "Conv_0.*strides .-1, -1.", True),
    "negative pads": (_pool(kernel_shape=[2, 2], pads=[-1] * 4), "pads .* at least 0", True),
    "dilations 0": (_conv(dilations=[0, 0]), "dilations .0, 0.", True),
    "pads 2^62": (_conv(pads=[2**62] * 4), "more than this machine's memory", True),
    "softmax axis 7": (_model([helper.make_node("Softmax", ["x"], ["y"], axis=7)],
                              [("y", [1, 3, 8, 8], TensorProto.FLOAT)]), "'axis' must be in",
                       True),
    # accepted by ONNX Runtime's session, refused here with a reason
    "no outputs": (_model([helper.make_node("Relu", ["x"], ["y"])], []), "no outputs", False),
    "pads 1e6": (_conv(pads=[10**6] * 4), "would hold .* GiB", False),
    "pads INT32_MAX": (_conv(pads=[2**31 - 1] * 4), "would hold .* GiB", False),
    "kernel_shape disagrees": (_conv(kernel_shape=[5, 5]), "kernel_shape .5, 5. disagrees",
                               False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_model_is_one_line(name):
    model, match, ort_refuses = CASES[name]
    with pytest.raises(WoodpeckerError, match=match) as e:
        woodpecker.compile(model, engines="numpy")
    assert "\n" not in str(e.value)
    if ort_refuses:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        try:
            ort.InferenceSession(model.SerializeToString(), opts,
                                 providers=["CPUExecutionProvider"])
        except Exception:  # its error types vary (Fail, InvalidArgument, InvalidGraph)
            return
        pytest.fail("ONNX Runtime accepts this model")


def test_a_good_model_still_compiles():
    x = rand(1, 3, 8, 8)
    model = _conv(pads=[1, 1, 1, 1], strides=[2, 2])
    onnx.checker.check_model(model)
    y = woodpecker.compile(model, engines="numpy").run({"x": x})["y"]
    assert y.shape == (1, 4, 4, 4)


# Each was misleading ("model file not found: 42", of a folder too) or a raw TypeError
@pytest.mark.parametrize("model, kwargs, words", [
    (42, {}, "a model is an ONNX file's path, its bytes or an onnx.ModelProto"),
    (None, {}, "not a NoneType"),
    ([1, 2], {}, "not a list"),
    (".", {}, "is a folder, not an ONNX model file"),
    ("torch", {"example_inputs": 42}, "example_inputs must be a tensor"),
])
def test_a_model_of_the_wrong_kind_is_one_line(tmp_path, model, kwargs, words):
    from woodpecker.errors import ModelError

    if model == ".":
        model = tmp_path
    if model == "torch":
        torch = pytest.importorskip("torch")
        model = torch.nn.ReLU()
    with pytest.raises(ModelError) as e:
        woodpecker.compile(model, engines="numpy", **kwargs)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_model_bytes_in_a_bytearray_compile():
    """(a bytearray was taken for a path: 'model file not found: bytearray(b...')"""
    model = _relu()
    y = woodpecker.compile(bytearray(model.SerializeToString()), engines="numpy")
    x = rand(1, 3, 8, 8)
    np.testing.assert_array_equal(y.run({"x": x})["y"], np.maximum(x, 0))
