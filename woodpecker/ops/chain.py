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
from woodpecker.ops.registry import OPS, DataOf, composite, op

OP = "FusedConvChain"


def parts(node: Node) -> list[Node]:
    """The FusedConv nodes `node` stands for, in order; the value between convs i and i + 1 is
    `node`'s name + f"/{i}", of the conv's output shape, in the layout of `node`'s input (the
    model's, or NHWC after the layout pass; None in another)."""
    convs = node.attrs["convs"]
    x, y = node.inputs[0], node.outputs[0]
    residuals = node.inputs[1 + 2 * len(convs):]
    nhwc = x.layout == "NHWC"          # the layout pass gave the chain NHWC values
    shape = None if x.shape is None or x.layout not in ("", "NHWC") else \
        (tuple(x.shape[i] for i in (0, 3, 1, 2)) if nhwc else tuple(x.shape))
    out: list[Node] = []
    for i, attrs in enumerate(convs):
        w, b = node.inputs[1 + 2 * i], node.inputs[2 + 2 * i]
        last = i == len(convs) - 1
        ins = [x, w, b] + (list(residuals) if last else [])
        if not last and shape is not None:
            shape = (shape[0], w.shape[0]) + window.out_shape(shape[2:], tuple(w.shape[2:]),
                                                              attrs)
        held = None if shape is None else \
            (tuple(shape[i] for i in (0, 2, 3, 1)) if nhwc else shape)
        mid = y if last else Value(f"{node.name}/{i}", held, x.dtype, x.layout)
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


composite(OP, parts)
