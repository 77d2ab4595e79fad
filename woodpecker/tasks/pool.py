"""The pool task: MaxPool, AveragePool and GlobalAveragePool over 2-d windows, in NHWC."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops import window
from woodpecker.ops.pool import avgpool, maxpool
from woodpecker.tasks import NHWC, Task


@dataclass(frozen=True)
class PoolTask(Task):
    """A max or average over (kh×kw) windows; a global average pool is the window covering
    the whole image. `count_include_pad`: the average divides by the taps inside the explicit
    pads too (ONNX AveragePool); taps added only by `ceil_mode` never count."""

    kind = "pool"
    layout = NHWC
    ops = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool"})

    n: int
    c: int
    h: int
    w: int
    reduce: str                              # "max" or "avg"
    kh: int                                  # window rows (h for a global pool)
    kw: int                                  # window columns
    stride: tuple[int, int]                  # rows, columns
    pads: tuple[int, int, int, int]          # top, left, bottom, right
    dilation: tuple[int, int]                # spacing of the window's taps: rows, columns
    ceil_mode: bool
    count_include_pad: bool
    dtype: str = "float32"

    def _attrs(self) -> dict:
        return {"kernel_shape": [self.kh, self.kw], "_pads": list(self.pads),
                "strides": list(self.stride), "dilations": list(self.dilation),
                "ceil_mode": int(self.ceil_mode),
                "count_include_pad": int(self.count_include_pad)}

    @property
    def out_hw(self) -> tuple[int, int]:
        return window.out_shape((self.h, self.w), (self.kh, self.kw), self._attrs())

    @property
    def out_h(self) -> int:
        return self.out_hw[0]

    @property
    def out_w(self) -> int:
        return self.out_hw[1]

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.n, *self.out_hw, self.c)

    @property
    def out_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def flops(self) -> int:
        """One operation per window tap (as ops/pool counts them)."""
        return self.n * self.c * self.out_h * self.out_w * self.kh * self.kw

    @classmethod
    def from_node(cls, node: Node) -> "PoolTask":
        x = node.inputs[0]
        if len(x.shape) != 4 or any(o is not None for o in node.outputs[1:]):
            raise ValueError(f"{node.name!r}: not a 2-d pool with one output")
        n, c, h, w = x.shape
        if node.op == "GlobalAveragePool":
            return cls(n, c, h, w, "avg", h, w, (1, 1), (0, 0, 0, 0), (1, 1), False, False,
                       x.dtype.name)
        a = node.attrs
        p = a["_pads"]
        kh, kw = a["kernel_shape"]
        return cls(n, c, h, w, "max" if node.op == "MaxPool" else "avg", kh, kw,
                   tuple(a["strides"]), (p[0], p[1], p[2], p[3]), tuple(a["dilations"]),
                   bool(a.get("ceil_mode", 0)), bool(a.get("count_include_pad", 0)),
                   x.dtype.name)

    def describe(self) -> str:
        if self.reduce == "avg" and (self.kh, self.kw) == (self.h, self.w) and \
                self.out_shape[1:3] == (1, 1):
            return f"global avgpool {self.c} @ {self.h}x{self.w}"
        return f"{self.reduce}pool {self.kh}x{self.kw}/{self.stride[0]} {self.c} @ " \
            f"{self.h}x{self.w}"

    def constant(self, node: Node, i: int) -> np.ndarray:
        return np.ascontiguousarray(node.inputs[i].data.transpose(0, 2, 3, 1))

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        shape = (self.n, self.h, self.w, self.c)
        if np.dtype(self.dtype).kind in "iu":        # 8-bit integers over their whole range
            info = np.iinfo(self.dtype)
            return [rng.integers(info.min, info.max + 1, shape).astype(self.dtype)]
        return [rng.standard_normal(shape).astype(np.float32)]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        pool = maxpool if self.reduce == "max" else avgpool
        y = pool(self._attrs(), inputs[0].transpose(0, 3, 1, 2))
        y = y[0] if isinstance(y, tuple) else y
        return np.ascontiguousarray(y.transpose(0, 2, 3, 1)).astype(self.dtype)
