"""Small models of ops Woodpecker has no definition of (If, Loop, LSTM, GRU; Resize and
ConvTranspose had none when these were written) and of dimensions written -1 / 0: the
open-world tests' inputs, each checked by onnx.checker and run by ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT


def _w(name: str, *shape: int, seed: int = 0) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "open_world", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def resize_model(width=-1) -> onnx.ModelProto:
    """Conv → Relu → Resize ×2 → ConvTranspose → Sigmoid, batch and image dims written -1 and
    named (a detector's head; paddle2onnx's -1); the width written `width` (ONNX Runtime takes
    -1 as dynamic, 0 as an empty axis)."""
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    return _model(
        [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Resize", ["r", "", "scales"], ["u"], mode="nearest"),
         helper.make_node("ConvTranspose", ["u", "Wt"], ["y"], strides=[2, 2]),
         helper.make_node("Sigmoid", ["y"], ["z"])],
        [helper.make_tensor_value_info("x", F32, [-1, 3, "h", width])],
        [helper.make_tensor_value_info("z", F32, [-1, 4, -1, -1])],
        [_w("W", 8, 3, 3, 3), _w("Wt", 8, 4, 2, 2, seed=1), scales])


def rnn_model(steps: int = 10, features: int = 8, hidden: int = 16) -> onnx.ModelProto:
    """LSTM → Squeeze → GRU → MatMul on its last state."""
    axis = numpy_helper.from_array(np.array([1], np.int64), "axis")
    return _model(
        [helper.make_node("LSTM", ["x", "Wl", "Rl"], ["Y", "Yh"], hidden_size=hidden),
         helper.make_node("Squeeze", ["Y", "axis"], ["s"]),
         helper.make_node("GRU", ["s", "Wg", "Rg"], ["Y2", "Yh2"], hidden_size=hidden),
         helper.make_node("MatMul", ["Yh2", "M"], ["o"])],
        [helper.make_tensor_value_info("x", F32, [steps, 1, features])],
        [helper.make_tensor_value_info("o", F32, [1, 1, 4])],
        [_w("Wl", 1, 4 * hidden, features), _w("Rl", 1, 4 * hidden, hidden, seed=1),
         _w("Wg", 1, 3 * hidden, hidden, seed=2), _w("Rg", 1, 3 * hidden, hidden, seed=3),
         axis, _w("M", hidden, 4, seed=4)])


def if_loop_model(loop: bool = True) -> onnx.ModelProto:
    """An If on the input's sign whose branches read an outer value, then (with `loop`) a Loop
    of three iterations adding an outer value to its carried state."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    trips = numpy_helper.from_array(np.array(3, np.int64), "trips")
    true = numpy_helper.from_array(np.array(True), "true")
    out = lambda n: helper.make_tensor_value_info(n, F32, [2, 5])  # noqa: E731
    then = helper.make_graph([helper.make_node("Mul", ["a", "two"], ["t"])], "then", [],
                             [out("t")])
    other = helper.make_graph([helper.make_node("Sub", ["a", "two"], ["e"])], "else", [],
                              [out("e")])
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "a"], ["acc2"]),
         helper.make_node("Identity", ["cond"], ["cond2"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []), out("acc")],
        [helper.make_tensor_value_info("cond2", TensorProto.BOOL, []), out("acc2")])
    return _model(
        [helper.make_node("Relu", ["x"], ["a"]),
         helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0),
         helper.make_node("Greater", ["sum", "zero"], ["positive"]),
         helper.make_node("If", ["positive"], ["b"], then_branch=then, else_branch=other)] +
        ([helper.make_node("Loop", ["trips", "true", "b"], ["looped"], body=body),
          helper.make_node("Add", ["looped", "x"], ["y"])] if loop else
         [helper.make_node("Add", ["b", "x"], ["y"])]),
        [helper.make_tensor_value_info("x", F32, [2, 5])], [out("y")], [two, zero, trips, true])


def ort_outputs(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)
