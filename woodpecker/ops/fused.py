"""Fused ops made by the epilogue-fusion pass: FusedConv, FusedGemm, FusedMatMul.

A fused node holds the base op's inputs (fixed slots, None where omitted), then one extra input
per `Add` step of its epilogue. `attrs["epilogue"]` is a list of steps applied in order to the
base result, e.g. `[{"op": "Add"}, {"op": "Relu"}]` for ResNet's conv+bn+add+relu (the
BatchNorm having been folded into the weights first). Engines run the whole node in one call.
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.registry import OPS, DataOf, op, output_numel

BASE_INPUTS = {"FusedConv": ("Conv", 3), "FusedGemm": ("Gemm", 3), "FusedMatMul": ("MatMul", 2)}
ACTIVATIONS = ("Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Gelu")


def apply_epilogue(y: np.ndarray, epilogue: list[dict], operands: list[np.ndarray]) -> np.ndarray:
    """The numpy meaning of an epilogue: Add steps consume `operands` in order."""
    operands = list(operands)
    for step in epilogue:
        kind = step["op"]
        if kind == "Add":
            y = y + operands.pop(0)
        elif kind == "Clip":
            lo, hi = step.get("min"), step.get("max")
            y = np.clip(y, -np.inf if lo is None else lo, np.inf if hi is None else hi)
        else:
            y = OPS[kind].reference(step, y)
    return y


def _register(fused: str, base: str, n_base: int) -> None:
    def infer(node: Node, data_of: DataOf):
        return OPS[base].infer(node, data_of)

    def flops(node: Node) -> int:
        return OPS[base].flops(node) + output_numel(node) * len(node.attrs["epilogue"])

    def reference(attrs, *inputs):
        y = OPS[base].reference(attrs, *inputs[:n_base])
        return apply_epilogue(y, attrs["epilogue"], list(inputs[n_base:])).astype(y.dtype)

    op(fused, infer, flops)(reference)


for _fused, (_base, _n) in BASE_INPUTS.items():
    _register(_fused, _base, _n)
