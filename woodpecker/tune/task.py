"""Tuning tasks: a distinct (op or fused group, shapes, dtype, layout) extracted from a node.
Identical layers map to equal tasks and so share one tuning result (Woodpecker-DL §3.1)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.conv import conv
from woodpecker.ops.fused import apply_epilogue


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

    # -- what a measurement needs: a key, seeded inputs, the reference result --------------------
    def to_json(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, d: dict) -> "ConvTask":
        d = dict(d)
        for f in ("stride", "pads", "dilation"):
            d[f] = tuple(d[f])
        d["epilogue"] = tuple(tuple(s) for s in d["epilogue"])
        return cls(**d)

    @property
    def key(self) -> str:
        return "conv2d:" + json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """x (NHWC), w (HWIO), bias if any, one residual (NHWC) per Add step."""
        rng = np.random.default_rng(seed)
        out_shape = (self.n, self.out_h, self.out_w, self.k)
        arrays = [rng.standard_normal((self.n, self.h, self.w, self.c)),
                  rng.standard_normal((self.kh, self.kw, self.c // self.groups, self.k))]
        if self.has_bias:
            arrays.append(rng.standard_normal(self.k))
        arrays += [rng.standard_normal(out_shape) for s in self.epilogue if s[0] == "Add"]
        return [a.astype(np.float32) for a in arrays]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """The numpy reference (ops/conv + ops/fused), in NHWC."""
        x, w = inputs[0], inputs[1]
        b = inputs[2] if self.has_bias else None
        residuals = inputs[3 if self.has_bias else 2:]
        attrs = {"_pads": list(self.pads), "strides": list(self.stride),
                 "dilations": list(self.dilation), "group": self.groups}
        y = conv(attrs, x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), b)
        steps = [{"op": s[0], **({"min": s[1], "max": s[2]} if s[0] == "Clip" else {})}
                 for s in self.epilogue]
        return apply_epilogue(y.transpose(0, 2, 3, 1), steps, residuals).astype(np.float32)
