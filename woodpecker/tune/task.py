"""Tuning tasks: a distinct (op or fused group, shapes, dtype, layout) extracted from a node.
Identical layers map to equal tasks and so share one tuning result (Woodpecker-DL §3.1)."""

from __future__ import annotations

from dataclasses import dataclass

from woodpecker.ir.graph import Node


@dataclass(frozen=True)
class ConvTask:
    """A 2-d convolution with its fused epilogue, computed in NHWC with HWIO weights."""

    n: int
    c: int
    h: int
    w: int
    k: int
    kh: int
    kw: int
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]          # top, left, bottom, right
    dilation: tuple[int, int]
    groups: int
    has_bias: bool
    epilogue: tuple[tuple, ...]               # (op, *params) steps; "Add" reads a residual
    dtype: str = "float32"

    @property
    def out_h(self) -> int:
        span = self.h + self.pads[0] + self.pads[2] - self.dilation[0] * (self.kh - 1) - 1
        return span // self.stride[0] + 1

    @property
    def out_w(self) -> int:
        span = self.w + self.pads[1] + self.pads[3] - self.dilation[1] * (self.kw - 1) - 1
        return span // self.stride[1] + 1

    @property
    def flops(self) -> int:
        return 2 * self.n * self.k * self.out_h * self.out_w * (self.c // self.groups) \
            * self.kh * self.kw

    @classmethod
    def from_node(cls, node: Node) -> "ConvTask":
        if node.op not in ("Conv", "FusedConv") or len(node.inputs[0].shape) != 4:
            raise ValueError(f"{node.op} node {node.name!r} is not a 2-d convolution")
        n, c, h, w = node.inputs[0].shape
        k, _, kh, kw = node.inputs[1].shape
        a = node.attrs
        p = a["_pads"]
        steps = []
        for s in a.get("epilogue", []):
            params = tuple(s.get(key) for key in ("min", "max")) if s["op"] == "Clip" else ()
            steps.append((s["op"],) + params)
        return cls(n, c, h, w, k, kh, kw, tuple(a["strides"]), (p[0], p[1], p[2], p[3]),
                   tuple(a["dilations"]), a.get("group", 1), node.input(2) is not None,
                   tuple(steps), node.inputs[0].dtype.name)
