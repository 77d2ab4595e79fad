"""Separable-conv fusion: a depthwise conv whose only reader is a 1×1 conv becomes one
FusedSeparableConv node (ops/separable.py), WPK §2.1's operator fusion applied to a producer
that is not element-wise.

Why: MobileNet's and MnasNet's inverted residual blocks, SwiftNet's nodes and DARTS' and
RandWire's separable convs all compute a depthwise conv and at once reduce its result over
channels with a 1×1 conv. As two kernels the depthwise result makes a round trip through memory
(1.2 MiB at MobileNet v2's 112² layer) and the second call costs a parallel fork and join of its
own, which weighs on DARTS' small layers (166 kernels of ~7 µs each). One generated kernel
computes the depthwise result a few rows at a time where the 1×1 product reads them
(engines/halide/conv_separable.py). Library engines run the node as the two convs.

Conditions: the depthwise conv has one filter per channel (group = in = out channels), constant
weights and an epilogue of activations only (a prologue is kept); its output has no other
reader and is not a graph output. The 1×1 conv has unit strides and dilations, no padding, no
groups and no prologue, and reads the depthwise output as its activation only.
Its weights are at most POINTWISE_WEIGHT_BYTES: the fused kernel runs strips of rows in
parallel, each reading all the pointwise weights, where a separate 1×1 conv kernel can give
each core its own channel tiles' weights. Measured on mobilenet_v2 (2 threads, 15 min of
tuning): fused kernels with 0.6-1.2 MiB of weights (7² × 960 → 160, 320) took 0.25-0.32 ms
against ONNX Runtime's 0.15-0.21 for the two convs, and with 147 KiB (14² × 384 → 96) 0.174
against 0.150, while those of at most 96 KiB (DARTS' all, MobileNet's up to 14² × 384 → 64)
beat it.
The memory schedule runs without this pass (passes.MEMORY), since SERENITY's rewriting splits
the depthwise conv itself along its input Concat (passes/split_concat.py), and fuses the pairs
left after the rewriting where the peak allows (`fuse_pair`, schedule/memory.py).
"""

from __future__ import annotations

from woodpecker.config import POINTWISE_WEIGHT_BYTES
from woodpecker.ir.graph import Graph, Node
from woodpecker.ops.separable import OP

_CONVS = ("Conv", "FusedConv")


def _fused_attrs(node: Node) -> dict:
    """The conv's attributes in FusedConv form (an epilogue, possibly empty)."""
    return dict(node.attrs) if node.op == "FusedConv" else dict(node.attrs, epilogue=[])


def _depthwise(node: Node) -> bool:
    if node.op not in _CONVS:
        return False
    x, w = node.inputs[0], node.inputs[1]
    # at most x, w and the bias: no residual operand, so no Add in the epilogue
    return len(x.shape) == 4 and w.is_const and len(node.inputs) <= 3 \
        and node.attrs.get("group", 1) == x.shape[1] == w.shape[0] > 1 \
        and (node.input(2) is None or node.input(2).is_const)


def _pointwise(node: Node, y) -> bool:
    if node.op not in _CONVS:
        return False
    a = node.attrs
    w = node.inputs[1]
    return node.inputs[0] is y and node.inputs.count(y) == 1 \
        and w.is_const and tuple(w.shape[2:]) == (1, 1) and a.get("group", 1) == 1 \
        and w.data.nbytes <= POINTWISE_WEIGHT_BYTES \
        and all(s == 1 for s in a.get("strides", [1, 1])) \
        and all(d == 1 for d in a.get("dilations", [1, 1])) \
        and not any(a.get("_pads", [0])) and not a.get("prologue") \
        and (node.input(2) is None or node.input(2).is_const)


def separable_reader(graph: Graph, dw: Node) -> Node | None:
    """The 1×1 conv this pass would fuse with `dw`, if any."""
    if not _depthwise(dw):
        return None
    y = dw.outputs[0]
    if graph.is_output(y) or len(y.consumers) != 1 or not _pointwise(y.consumers[0], y):
        return None
    return y.consumers[0]


def _fuse(graph: Graph, dw: Node, pw: Node) -> None:
    """One FusedSeparableConv, named as the 1×1 conv, where the 1×1 conv was."""
    index = graph.nodes.index(pw)
    inputs = [dw.inputs[0], dw.inputs[1], dw.input(2), pw.inputs[1], pw.input(2),
              *pw.inputs[3:]]
    attrs = {"depthwise": _fused_attrs(dw), "pointwise": _fused_attrs(pw)}
    out = pw.outputs[0]
    graph.remove_node(pw)
    graph.remove_node(dw)
    graph.add_node(OP, inputs, [out], attrs, pw.name, index - 1)


def fuse_pair(graph: Graph, depthwise: str) -> None:
    """Fuse the depthwise conv named `depthwise` with its 1×1 reader (see separable_reader)."""
    dw = next(n for n in graph.nodes if n.name == depthwise)
    pw = separable_reader(graph, dw)
    if pw is None:
        raise ValueError(f"{depthwise} is not the depthwise half of a separable pair")
    _fuse(graph, dw, pw)
    graph.dce()


def fuse_separable(graph: Graph) -> int:
    fused = 0
    for dw in list(graph.nodes):   # only the 1x1 conv after each is removed: never a dw
        pw = separable_reader(graph, dw)
        if pw is None:
            continue
        _fuse(graph, dw, pw)
        fused += 1
    if fused:
        graph.dce()
    return fused
