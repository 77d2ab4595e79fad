"""FusedSeparableConv: a depthwise conv and the 1×1 conv reading it, as one node
(passes/fuse_separable.py), so that a generated kernel can compute the depthwise result a few
rows at a time, in cache, right where the pointwise product reads it.

Inputs: x, the depthwise weights and bias, the pointwise weights and bias (None where a conv
has no bias), then one residual per `Add` step of the pointwise epilogue. `attrs["depthwise"]`
and `attrs["pointwise"]` are the two convs' own FusedConv attributes (geometry, epilogue, the
depthwise prologue); library engines and the ONNX export run the node as those two convs
(`parts`).
"""

from __future__ import annotations

from woodpecker.ir.graph import Node, Value
from woodpecker.ops.registry import OPS, DataOf, composite, op

OP = "FusedSeparableConv"


def parts(node: Node) -> tuple[Node, Node]:
    """The depthwise and the pointwise FusedConv nodes `node` stands for; the value between
    them is `node`'s name + "/depthwise", of the output's spatial shape."""
    x, wd, bd, wp, bp, *residuals = node.inputs
    y = node.outputs[0]
    mid = Value(f"{node.name}/depthwise", (y.shape[0], x.shape[1]) + tuple(y.shape[2:]),
                y.dtype)
    dw = Node("FusedConv", f"{node.name}/dw", [x, wd, bd], [mid], dict(node.attrs["depthwise"]))
    mid.producer = dw
    pw = Node("FusedConv", f"{node.name}/pw", [mid, wp, bp, *residuals], [y],
              dict(node.attrs["pointwise"]))
    return dw, pw


def _infer(node: Node, data_of: DataOf):
    dw = Node("FusedConv", node.name, node.inputs[:3], [], node.attrs["depthwise"])
    (shape, dtype), = OPS["FusedConv"].infer(dw, data_of)
    return [((shape[0], node.inputs[3].shape[0]) + tuple(shape[2:]), dtype)]


def _flops(node: Node) -> int:
    return sum(OPS[p.op].flops(p) for p in parts(node))


@op(OP, _infer, _flops)
def separable_conv(attrs, x, wd, bd, wp, bp, *residuals):
    mid = OPS["FusedConv"].reference(attrs["depthwise"], x, wd, bd)
    return OPS["FusedConv"].reference(attrs["pointwise"], mid, wp, bp, *residuals)


composite(OP, parts)
