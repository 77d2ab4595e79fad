"""Seed models and mutations for the fuzzer (tests/fuzz/test_fuzz.py).

A mutation is `(kind, n)`: `kind` names one of MUTATIONS, `n` (any integer) picks what it
changes, so hypothesis can draw, replay and shrink a list of them. Each mutation edits a model
the way a careless exporter or a hostile user would: attribute values (zero, negative, huge),
attributes dropped or added, ops swapped, inputs rewired, initializers retyped or reshaped,
declared input shapes and output types changed, the opset changed, nodes dropped or
duplicated, and the serialised bytes flipped or cut. Seeds are small (each compiles in a few
milliseconds on the numpy engine) and cover the op families the compiler rewrites: convs with
batch norm and residuals, pools, dense layers with Softmax, shape and movement ops, element-wise
chains."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import conv_bn_relu_residual, make_model, rand

I64 = TensorProto.INT64


def _pools() -> onnx.ModelProto:
    nodes = [helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["m"], ["a"], kernel_shape=[2, 2],
                              count_include_pad=1, pads=[0, 0, 1, 1]),
             helper.make_node("GlobalAveragePool", ["a"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"], axis=1)]
    return make_model(nodes, [("x", [1, 4, 9, 9])], [("y", [1, 4])])


def _dense() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Sigmoid", ["hb"], ["s"]),
             helper.make_node("Gemm", ["s", "w2", "b2"], ["z"], transB=1, alpha=0.5),
             helper.make_node("Softmax", ["z"], ["y"], axis=-1)]
    inits = {"w": rand(6, 5, seed=1), "b": rand(5, seed=2), "w2": rand(3, 5, seed=3),
             "b2": rand(3, seed=4)}
    return make_model(nodes, [("x", [2, 6])], [("y", [2, 3])], inits)


def _movement() -> onnx.ModelProto:
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]),
             helper.make_node("Split", ["r", "split"], ["p", "q"], axis=1),
             helper.make_node("Concat", ["q", "p"], ["c"], axis=1),
             helper.make_node("Slice", ["c", "starts", "ends", "axes"], ["s"]),
             helper.make_node("Gather", ["s", "idx"], ["y"], axis=1)]
    inits = {"shape": np.array([2, 12], np.int64), "split": np.array([4, 8], np.int64),
             "starts": np.array([1], np.int64), "ends": np.array([11], np.int64),
             "axes": np.array([1], np.int64), "idx": np.array([0, 3, 9], np.int64)}
    return make_model(nodes, [("x", [2, 4, 3])], [("y", [2, 3])], inits)


def _elementwise() -> onnx.ModelProto:
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
             helper.make_node("Mul", ["c", "x"], ["m"]),
             helper.make_node("Div", ["m", "d"], ["q"]),
             helper.make_node("HardSwish", ["q"], ["h"]),
             helper.make_node("Pow", ["h", "two"], ["p"]),
             helper.make_node("Equal", ["p", "x"], ["e"]),
             helper.make_node("Where", ["e", "x", "p"], ["w"]),
             helper.make_node("Tanh", ["w"], ["y"])]
    inits = {"lo": np.array(-1.0, np.float32), "hi": np.array(2.0, np.float32),
             "d": rand(1, 5, seed=5), "two": np.array(2.0, np.float32)}
    return make_model(nodes, [("x", [3, 5])], [("y", [3, 5])], inits)


SEEDS = {"conv": conv_bn_relu_residual, "pools": _pools, "dense": _dense,
         "movement": _movement, "elementwise": _elementwise}

SPECIAL_INTS = [0, -1, 1, 2, 3, 5, 7, 64, 2**31 - 1, -(2**31), 2**62]
ATTRS = {"axis": [-3, -1, 0, 1, 2, 5], "auto_pad": ["SAME_UPPER", "VALID", "BOGUS", "NOTSET"],
         "pads": [[0, 0, 0, 0], [1, 1, 1, 1], [5, 5, 5, 5], [-1, 0, 0, 0], [1, 1]],
         "strides": [[1, 1], [2, 2], [0, 1], [3]], "group": [1, 2, 3, 0],
         "kernel_shape": [[1, 1], [3, 3], [2], [0, 2]], "ceil_mode": [0, 1, 2],
         "keepdims": [0, 1], "alpha": [0.0, -1.0, 1e30], "perm": [[0, 1], [1, 0, 2], [2, 2, 0]],
         "dilations": [[1, 1], [2, 2], [0, 0]], "transA": [0, 1], "to": [1, 7, 11, 8, 99]}
OPS = ["Relu", "Sigmoid", "Tanh", "Softmax", "Identity", "Add", "Mul", "Sub", "Div", "MatMul",
       "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Transpose", "Reshape",
       "Concat", "Clip", "Gemm", "Einsum", "Cast", "Pow", "Where", "Equal", "LayerNormalization"]
DTYPES = [np.float64, np.float16, np.int32, np.int64, np.bool_, np.uint8]
ELEM_TYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, I64, TensorProto.INT32,
              TensorProto.FLOAT16, TensorProto.BOOL, TensorProto.STRING, TensorProto.BFLOAT16]
OPSETS = [1, 9, 12, 13, 15, 17, 18, 20, 21, 23, 99, 0]


def _pick(seq, n):
    return seq[n % len(seq)] if seq else None


def _attr_value(model, n):
    node = _pick(model.graph.node, n)
    ints = [a for a in node.attribute if a.type in (onnx.AttributeProto.INT,
                                                     onnx.AttributeProto.INTS)]
    a = _pick(ints, n // 7)
    if a is None:
        return
    v = _pick(SPECIAL_INTS, n // 11)
    if a.type == onnx.AttributeProto.INT:
        a.i = v
    elif a.ints:
        a.ints[(n // 13) % len(a.ints)] = v


def _attr_drop(model, n):
    node = _pick(model.graph.node, n)
    if node.attribute:
        del node.attribute[(n // 7) % len(node.attribute)]


def _attr_add(model, n):
    node = _pick(model.graph.node, n)
    name = _pick(sorted(ATTRS), n // 7)
    value = _pick(ATTRS[name], n // 11)
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(name, value)])


def _op_swap(model, n):
    _pick(model.graph.node, n).op_type = _pick(OPS, n // 7)


def _rewire(model, n):
    node = _pick(model.graph.node, n)
    if not node.input:
        return
    names = [v.name for v in model.graph.input] + [i.name for i in model.graph.initializer] + \
        [o for nd in model.graph.node for o in nd.output] + ["", "ghost"]
    node.input[(n // 7) % len(node.input)] = _pick(names, n // 11)


def _init_dtype(model, n):
    init = _pick(model.graph.initializer, n)
    if init is not None:
        a = numpy_helper.to_array(init)
        init.CopyFrom(numpy_helper.from_array(a.astype(_pick(DTYPES, n // 7)), init.name))


def _init_shape(model, n):
    init = _pick(model.graph.initializer, n)
    if init is None:
        return
    a = numpy_helper.to_array(init).ravel()
    choice = (n // 7) % 4
    a = a[:-1] if choice == 0 and a.size > 1 else a.reshape(1, -1) if choice == 1 else \
        np.concatenate([a, a]) if choice == 2 else a[:0]
    init.CopyFrom(numpy_helper.from_array(a, init.name))


def _input_shape(model, n):
    vi = _pick(model.graph.input, n)
    dims = vi.type.tensor_type.shape.dim
    if not dims:
        return
    d = dims[(n // 7) % len(dims)]
    choice = (n // 11) % 4
    if choice == 3:
        d.dim_param = "N"
    else:
        d.dim_value = [0, d.dim_value + 1, 1][choice]


def _output_type(model, n):
    vi = _pick(model.graph.output, n)
    if vi is not None:
        vi.type.tensor_type.elem_type = _pick(ELEM_TYPES, n // 7)


def _opset(model, n):
    model.opset_import[0].version = _pick(OPSETS, n)


def _node_drop(model, n):
    if len(model.graph.node) > 1:
        del model.graph.node[n % len(model.graph.node)]


def _node_dup(model, n):
    node = _pick(model.graph.node, n)
    model.graph.node.insert((n // 7) % (len(model.graph.node) + 1), node)


MUTATIONS = {"attr_value": _attr_value, "attr_drop": _attr_drop, "attr_add": _attr_add,
             "op_swap": _op_swap, "rewire": _rewire, "init_dtype": _init_dtype,
             "init_shape": _init_shape, "input_shape": _input_shape,
             "output_type": _output_type, "opset": _opset, "node_drop": _node_drop,
             "node_dup": _node_dup}
BYTE_MUTATIONS = ("flip", "cut")


def mutated(seed: str, mutations: list[tuple[str, int]]) -> bytes:
    """The seed model's bytes after `mutations` in order (byte mutations on the serialised
    form, the others on the protobuf)."""
    model = SEEDS[seed]()
    data = None
    for kind, n in mutations:
        n = abs(n)
        if kind in BYTE_MUTATIONS:
            data = bytearray(model.SerializeToString() if data is None else data)
            if not data:
                continue
            if kind == "flip":
                data[n % len(data)] ^= 1 << (n // 7) % 8
            else:
                del data[n % len(data):]
            data = bytes(data)
        elif data is None:
            MUTATIONS[kind](model, n)
    return model.SerializeToString() if data is None else data
