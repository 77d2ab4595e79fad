"""The transposed-convolution task: a 2-d ConvTranspose (ops/conv_transpose.py) without
groups or dilation, in NHWC like the convolutions around it.

Contract: `ConvTransposeTask.from_node` takes a ConvTranspose of a 4-d map with constant
weights, one group and unit dilations (ValueError otherwise: the libraries run the rest). The
kernel's arguments are the map (NHWC), the weights as the node holds them, (C, K, kh, kw) — the
template packs them once per plan — and the bias if any.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.conv_transpose import conv_transpose
from woodpecker.tasks import NHWC, Task


@dataclass(frozen=True)
class ConvTransposeTask(Task):
    kind = "conv_transpose"
    layout = NHWC
    ops = frozenset({"ConvTranspose"})

    n: int
    c: int
    h: int
    w: int
    k: int                                   # output channels
    kh: int
    kw: int
    stride: tuple[int, int]                  # rows, columns
    pads: tuple[int, int, int, int]          # top, left, bottom, right (cropped)
    extra: tuple[int, int]                   # output_padding: rows, columns
    has_bias: bool
    dtype: str = "float32"

    @property
    def out_h(self) -> int:
        return self.stride[0] * (self.h - 1) + self.extra[0] + self.kh - self.pads[0] - \
            self.pads[2]

    @property
    def out_w(self) -> int:
        return self.stride[1] * (self.w - 1) + self.extra[1] + self.kw - self.pads[1] - \
            self.pads[3]

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.n, self.out_h, self.out_w, self.k)

    @property
    def flops(self) -> int:
        return 2 * self.n * self.h * self.w * self.c * self.k * self.kh * self.kw

    @classmethod
    def from_node(cls, node: Node) -> "ConvTransposeTask":
        x, wv = node.inputs[0], node.inputs[1]
        a = node.attrs
        if len(x.shape) != 4 or a.get("group", 1) != 1 or list(a["dilations"]) != [1, 1]:
            raise ValueError(f"{node.name!r}: not a 2-d ConvTranspose of one group, dilation 1")
        if wv.data is None:
            raise ValueError(f"{node.name!r}: weights computed at run time")
        n, c, h, w = x.shape
        _, k, kh, kw = wv.shape
        p = a["_pads"]
        return cls(n, c, h, w, k, kh, kw, tuple(a["strides"]), (p[0], p[1], p[2], p[3]),
                   tuple(a["output_padding"]), node.input(2) is not None, x.dtype.name)

    def _attrs(self) -> dict:
        return {"group": 1, "strides": list(self.stride), "dilations": [1, 1],
                "_pads": list(self.pads), "output_padding": list(self.extra)}

    def describe(self) -> str:
        return (f"convT {self.kh}x{self.kw}/{self.stride[0]} {self.c}->{self.k} @ "
                f"{self.h}x{self.w}")

    def constant(self, node: Node, i: int) -> np.ndarray:
        """The map as NHWC; the weights and bias as the node holds them."""
        a = node.inputs[i].data
        return np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if i == 0 else a

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        arrays = [rng.standard_normal((self.n, self.h, self.w, self.c)),
                  rng.standard_normal((self.c, self.k, self.kh, self.kw))]
        if self.has_bias:
            arrays.append(rng.standard_normal(self.k))
        return [a.astype(np.float32) for a in arrays]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """ops.conv_transpose's reference on the NCHW map, in NHWC."""
        y = conv_transpose(self._attrs(), inputs[0].transpose(0, 3, 1, 2), *inputs[1:])
        return np.ascontiguousarray(y.transpose(0, 2, 3, 1))
