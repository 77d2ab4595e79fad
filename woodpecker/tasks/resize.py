"""The resize task: a Resize (ops/resize.py) of the rows and columns of a 4-d float map, in
NHWC like the convolutions around it.

Contract: `ResizeTask.from_node` takes a Resize whose batch and channels keep their size and
whose scales or sizes are constants (ValueError otherwise); the task holds what the taps of
each axis depend on (sizes, scales, mode, coordinate and nearest modes), so two layers that
resize alike share a task. `taps()` are ops.resize.axis_taps of the rows and of the columns:
the reference and the kernel read the same source indices and weights. The kernel takes the
map only; the node's scales/sizes are the task's, not arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.resize import attributes, axis_taps, geometry, resize
from woodpecker.tasks import NHWC, Task


@dataclass(frozen=True)
class ResizeTask(Task):
    kind = "resize"
    layout = NHWC
    ops = frozenset({"Resize"})

    n: int
    c: int
    h: int
    w: int
    out_h: int
    out_w: int
    scale_h: float                           # the scale each axis's coordinates use
    scale_w: float
    mode: str                                # "nearest" or "linear"
    coordinates: str                         # coordinate_transformation_mode
    nearest: str                             # nearest_mode
    by_sizes: bool                           # sizes given (else scales)
    dtype: str = "float32"

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.n, self.out_h, self.out_w, self.c)

    @property
    def flops(self) -> int:
        taps = 1 if self.mode == "nearest" else 4
        return self.n * self.out_h * self.out_w * self.c * taps

    @classmethod
    def from_node(cls, node: Node) -> "ResizeTask":
        x, y = node.inputs[0], node.outputs[0]
        if len(x.shape) != 4 or tuple(x.shape[:2]) != tuple(y.shape[:2]):
            raise ValueError(f"{node.name!r}: not a resize of a 4-d map's rows and columns")
        data = [None if v is None else v.data for v in (node.input(2), node.input(3))]
        if any(v is not None and d is None for v, d in zip((node.input(2), node.input(3)),
                                                             data)):
            raise ValueError(f"{node.name!r}: scales or sizes computed at run time")
        scales, sizes = (None if d is None or d.size == 0 else np.asarray(d) for d in data)
        out, factor = geometry(node.attrs, tuple(x.shape), scales, sizes)
        mode, coordinates, nearest = attributes(node.attrs)
        n, c, h, w = x.shape
        return cls(n, c, h, w, out[2], out[3], factor[2], factor[3], mode, coordinates, nearest,
                   sizes is not None, x.dtype.name)

    def _attrs(self) -> dict:
        return {"mode": self.mode, "coordinate_transformation_mode": self.coordinates,
                "nearest_mode": self.nearest}

    def taps(self) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        """The rows' and the columns' (first index, second index, weight of the second)."""
        attrs = self._attrs()
        return (axis_taps(attrs, self.h, self.out_h, self.scale_h),
                axis_taps(attrs, self.w, self.out_w, self.scale_w))

    def describe(self) -> str:
        return f"resize {self.mode} {self.c} @ {self.h}x{self.w} -> {self.out_h}x{self.out_w}"

    def constant(self, node: Node, i: int) -> np.ndarray:
        a = node.inputs[i].data
        return np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if i == 0 else a

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """The map (NHWC): the kernel's one argument."""
        rng = np.random.default_rng(seed)
        return [rng.standard_normal((self.n, self.h, self.w, self.c)).astype(np.float32)]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """ops.resize's reference on the NCHW map, in NHWC."""
        x = inputs[0].transpose(0, 3, 1, 2)
        given = np.array([self.n, self.c, self.out_h, self.out_w], np.int64) if self.by_sizes \
            else np.array([1.0, 1.0, self.scale_h, self.scale_w], np.float32)
        y = resize(self._attrs(), x, None, *((None, given) if self.by_sizes else (given, None)))
        return np.ascontiguousarray(y.transpose(0, 2, 3, 1))
