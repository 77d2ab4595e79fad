"""Prologue fusion: an element-wise group of one run-time input and no constants (a ReLU, in
practice) whose every reader is a convolution taking it as its activation is applied inside
those convolutions, to their input as they read it, and its own node goes.

Why: DARTS and RandWire apply ReLU right before most convolutions (ReLU-Conv-BN), to a value
that other ops read unactivated, so no epilogue can take it; as a node it is a kernel call and
a round trip of the activation through memory per conv. Inside the conv it is a `max` on each
value read (generated kernels: conv_common.ConvInputs; ONNX Runtime and torch run the steps
before the conv). The zero padding comes after the prologue, as the conv pads what it reads.
Choices: only programs without constants (a per-channel constant would need its channel's
slice in every split of the conv, passes/split_concat.py); a reader that already has a
prologue keeps it and the group stays a node.

Squeeze-and-excitation (EfficientNet, MobileNetV3, RegNet-Y) ends in `x * s`, s a (N, C, 1, 1)
run-time gate computed from x itself, so it cannot be the epilogue of x's producer; as a node
it reads and writes the whole activation once more, and in the model's layout between NHWC
kernels it costs two layout conversions too. When every reader of `x * s` is a conv taking it
as its activation, the Mul becomes those convs' prologue `in0 * in1` with s as their last
input (ops/fused.py): a multiply on each value the conv reads.
"""

from __future__ import annotations

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ops.fused import BASE_INPUTS
from woodpecker.passes.fuse_elementwise import element_program, eligible
from woodpecker.passes.split_concat import CONVS


def _program(node: Node) -> list[dict] | None:
    """The node's element-wise program if it has one run-time input and no constants: a
    FusedElementwise group, or a single element-wise node when this pass runs without
    passes/fuse_elementwise.py first."""
    if node.op == "FusedElementwise":
        return node.attrs["program"] if len(node.inputs) == 1 else None
    if eligible(node) and len(node.inputs) == 1 and node.op != "BatchNormalization":
        return element_program([node])[0]
    return None


def _channel_scale(node: Node) -> tuple[list[dict], Value] | None:
    """(the prologue, the gate) of a Mul of a 4-d activation by a run-time (N, C, 1, 1) gate."""
    if node.op != "Mul" or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    y = node.outputs[0]
    if a is None or b is None or a.data is not None or b.data is not None or a is b:
        return None
    x, s = (a, b) if tuple(a.shape) == tuple(y.shape) else (b, a)
    if len(y.shape) != 4 or tuple(x.shape) != tuple(y.shape) or x.dtype != s.dtype \
            or tuple(s.shape) != (y.shape[0], y.shape[1], 1, 1):
        return None
    return [{"op": "Mul", "args": [["in", 0], ["in", 1]], "attrs": {}}], s


def _absorbable(graph: Graph, node: Node) -> bool:
    y = node.outputs[0]
    return not graph.is_output(y) and bool(y.consumers) and all(
        c.op in CONVS and c.inputs[0] is y and c.inputs.count(y) == 1
        and not c.attrs.get("prologue") for c in y.consumers)


def fuse_prologues(graph: Graph) -> int:
    fused = 0
    for node in list(graph.nodes):
        program, vectors = _program(node), []
        if program is None and (scale := _channel_scale(node)) is not None:
            program, vectors = scale[0], [scale[1]]
        if program is None or not _absorbable(graph, node):
            continue
        x = next(v for v in node.inputs if v not in vectors)
        for conv in list(dict.fromkeys(node.outputs[0].consumers)):
            if conv.op == "Conv":
                conv.op = "FusedConv"
                conv.attrs["epilogue"] = []
                n_base = BASE_INPUTS["FusedConv"][1]
                conv.inputs += [None] * (n_base - len(conv.inputs))
            conv.attrs["prologue"] = program
            graph.set_input(conv, 0, x)
            for v in vectors:
                conv.inputs.append(v)
                v.consumers.append(conv)
        graph.remove_node(node)
        fused += 1
    if fused:
        graph.dce()
    return fused
