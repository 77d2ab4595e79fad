"""Comparisons, boolean logic, IsNaN/IsInf and integer-safe unary math: the ops the current
PyTorch exporter emits around attention masks (`And`, `IsNaN`, `Where`: transformers' BERT,
DistilBERT and ViT) and their usual companions. Shapes broadcast as ONNX says; comparisons and
logic give bool tensors.
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.registry import (
    DataOf,
    broadcast_rule,
    op,
    output_numel,
    same_as_input,
    shape_of,
)


def _bool_like(node: Node, data_of: DataOf):
    return [(shape_of(node, 0), np.dtype(np.bool_))]


for _name, _fn in (("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor),
                   ("Less", np.less), ("Greater", np.greater), ("LessOrEqual", np.less_equal),
                   ("GreaterOrEqual", np.greater_equal)):
    op(_name, broadcast_rule(np.bool_), output_numel)(lambda attrs, a, b, fn=_fn: fn(a, b))

op("Not", _bool_like, output_numel)(lambda attrs, x: np.logical_not(x))
op("IsNaN", _bool_like, output_numel)(lambda attrs, x: np.isnan(x))


@op("IsInf", _bool_like, output_numel)
def _isinf(attrs, x):
    neg, pos = attrs.get("detect_negative", 1), attrs.get("detect_positive", 1)
    return (np.isneginf(x) & bool(neg)) | (np.isposinf(x) & bool(pos))


op("Neg", same_as_input, output_numel)(lambda attrs, x: np.negative(x))
op("Abs", same_as_input, output_numel)(lambda attrs, x: np.abs(x))
op("Sign", same_as_input, output_numel)(lambda attrs, x: np.sign(x).astype(x.dtype))
op("Floor", same_as_input, output_numel)(lambda attrs, x: np.floor(x))
op("Ceil", same_as_input, output_numel)(lambda attrs, x: np.ceil(x))
# ONNX rounds halves to even, as numpy does
op("Round", same_as_input, output_numel)(lambda attrs, x: np.round(x))
op("Reciprocal", same_as_input, output_numel)(lambda attrs, x: (1 / x).astype(x.dtype))
op("Exp", same_as_input, output_numel)(lambda attrs, x: np.exp(x))
op("Log", same_as_input, output_numel)(lambda attrs, x: np.log(x))
for _name, _fn in (("Max", np.maximum), ("Min", np.minimum)):
    op(_name, broadcast_rule(), output_numel)(
        lambda attrs, *xs, fn=_fn: fn.reduce(np.broadcast_arrays(*xs)))
