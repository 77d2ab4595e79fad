"""FusedConvChain: convolutions each reading only the one before, as one node — AGO's
intensive fusion of complex operators (AGO §III; passes/fuse_chain.py makes them), so that a
generated kernel can compute the earlier convs a strip of rows at a time, in cache, right where
the later ones read them (engines/halide/conv_chain.py). MobileNet's inverted residual block is
the 1×1 expansion, the depthwise conv and the 1×1 projection; its first half is the expansion
and the depthwise conv.

Inputs: x, then each conv's weights and bias (None where a conv has no bias), then one residual
per `Add` step of the last conv's epilogue. `attrs["convs"]` holds each conv's own FusedConv
attributes (geometry, epilogue; the first may have a prologue of no run-time vectors). Library
engines and the ONNX export run the node as those convs (`parts`).
"""

from __future__ import annotations

from woodpecker.ir.graph import Node, Value
from woodpecker.ops import window
from woodpecker.ops.registry import OPS, DataOf, op

OP = "FusedConvChain"


def parts(node: Node) -> list[Node]:
    """The FusedConv nodes `node` stands for, in order; the value between convs i and i + 1 is
    `node`'s name + f"/{i}", of the conv's output shape in the model's layout (None once a
    layout pass has given `node`'s input another)."""
    convs = node.attrs["convs"]
    x, y = node.inputs[0], node.outputs[0]
    residuals = node.inputs[1 + 2 * len(convs):]
    shape = tuple(x.shape) if x.shape is not None and not x.layout else None
    out: list[Node] = []
    for i, attrs in enumerate(convs):
        w, b = node.inputs[1 + 2 * i], node.inputs[2 + 2 * i]
        last = i == len(convs) - 1
        ins = [x, w, b] + (list(residuals) if last else [])
        if not last and shape is not None:
            shape = (shape[0], w.shape[0]) + window.out_shape(shape[2:], tuple(w.shape[2:]),
                                                              attrs)
        mid = y if last else Value(f"{node.name}/{i}", shape, x.dtype)
        part = Node("FusedConv", f"{node.name}/c{i}", ins, [mid], dict(attrs))
        if not last:
            mid.producer = part
        out.append(part)
        x = mid
    return out


def _infer(node: Node, data_of: DataOf):
    return OPS["FusedConv"].infer(parts(node)[-1], data_of)


def _flops(node: Node) -> int:
    return sum(OPS[p.op].flops(p) for p in parts(node))


@op(OP, _infer, _flops)
def conv_chain(attrs, x, *rest):
    convs = attrs["convs"]
    n = 2 * len(convs)
    weights, residuals = rest[:n], rest[n:]
    for i, a in enumerate(convs):
        last = i == len(convs) - 1
        x = OPS["FusedConv"].reference(a, x, weights[2 * i], weights[2 * i + 1],
                                       *(residuals if last else ()))
    return x
