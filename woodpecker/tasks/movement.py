"""The movement tasks: a copy whose every output element reads one input element through an
affine index map — Transpose, Gather of one constant index, Slice over constant bounds
(`MoveTask`) — and a Concat (`ConcatTask`).

`axes[a]` says where input axis `a`'s index comes from: (output axis, start, step) — index =
start + step · out[axis] — or (-1, start, 0), a fixed index (an axis Gather removes). Only GPU
plans compute movement as a kernel (engines/halide/gpu/movement.py): on the CPU numpy and the
libraries move data, so these kinds are not offered to the CPU engines
(`tasks.gpu_only_kinds`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.tasks import NHWC, Task


@dataclass(frozen=True)
class MoveTask(Task):
    kind = "move"
    layout = ""
    ops = frozenset({"Transpose", "Gather", "Slice"})

    in_shape: tuple[int, ...]
    shape: tuple[int, ...]                       # the output's
    axes: tuple[tuple[int, int, int], ...]       # per input axis: (output axis | -1, start, step)
    dtype: str = "float32"

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.shape

    @property
    def flops(self) -> int:
        return 0

    @classmethod
    def from_node(cls, node: Node) -> "MoveTask":
        x, out = node.inputs[0], node.outputs[0]
        shape, rank = tuple(int(d) for d in x.shape), len(x.shape)
        if node.op == "Transpose":
            perm = node.attrs.get("perm") or list(reversed(range(rank)))
            axes = [(perm.index(a), 0, 1) for a in range(rank)]
        elif node.op == "Gather":
            idx = node.inputs[1].data if node.inputs[1] is not None else None
            axis = node.attrs.get("axis", 0) % rank
            if idx is None or np.asarray(idx).ndim != 0:
                raise ValueError(f"{node.name!r}: only a constant scalar index moves as a copy")
            k = int(idx) % shape[axis]
            axes = [(-1, k, 0) if a == axis else (a - (a > axis), 0, 1) for a in range(rank)]
        elif node.op == "Slice":
            consts = [None if v is None else v.data for v in node.inputs[1:]]
            if any(v is not None and c is None for v, c in zip(node.inputs[1:], consts)):
                raise ValueError(f"{node.name!r}: slice bounds computed at run time")
            starts = consts[0]              # the output's shape says where each slice ends
            which = consts[2] if len(consts) > 2 and consts[2] is not None else range(len(starts))
            steps = consts[3] if len(consts) > 3 and consts[3] is not None else [1] * len(starts)
            axes = [(a, 0, 1) for a in range(rank)]
            for s, a, st in zip(starts, which, steps):
                a = int(a) % rank
                if st < 0:
                    raise ValueError(f"{node.name!r}: a reversing slice")
                start = min(max(int(s) + (shape[a] if s < 0 else 0), 0), shape[a])
                axes[a] = (a, start, int(st))
        else:
            raise ValueError(f"{node.name!r}: {node.op} is not a movement")
        return cls(shape, tuple(int(d) for d in out.shape), tuple(axes), x.dtype.name)

    def describe(self) -> str:
        return f"move {'x'.join(map(str, self.in_shape))} -> {'x'.join(map(str, self.shape))}"

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        return [np.random.default_rng(seed).standard_normal(self.in_shape).astype(self.dtype)]

    def index(self) -> tuple:
        """The numpy index of the output into the input (before the transposition)."""
        return tuple(k if o < 0 else slice(k, k + st * (self.shape[o] - 1) + 1, st)
                     for o, k, st in self.axes)

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        picked = inputs[0][self.index()]
        kept = [o for o, _, _ in self.axes if o >= 0]
        order = sorted(range(len(kept)), key=lambda i: kept[i])
        return np.ascontiguousarray(picked.transpose(order)).reshape(self.shape)

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class ConcatTask(Task):
    """A Concat as one copy kernel (GPU plans): every output element read from the input its
    index along `axis` falls in. Shapes and `axis` are the device's: NHWC (`nhwc`) where every
    input is an NHWC image on the device — the axis then moved as the data is — else the
    model's own; `model_axis` is the node's axis in the model."""

    kind = "concat"
    ops = frozenset({"Concat"})

    shapes: tuple[tuple[int, ...], ...]
    axis: int
    model_axis: int
    nhwc: bool = False
    dtype: str = "float32"

    @property
    def layout(self) -> str:
        return NHWC if self.nhwc else ""

    @property
    def out_shape(self) -> tuple[int, ...]:
        shape = list(self.shapes[0])
        shape[self.axis] = sum(s[self.axis] for s in self.shapes)
        return tuple(shape)

    @property
    def flops(self) -> int:
        return 0

    @classmethod
    def from_node(cls, node: Node, nhwc: bool = False) -> "ConcatTask":
        """`nhwc`: the inputs are NHWC images on the device (the caller knows the layouts)."""
        rank = len(node.outputs[0].shape)
        axis = node.attrs.get("axis", 0) % rank
        shapes = [tuple(int(d) for d in v.shape) for v in node.inputs]
        if nhwc:
            shapes = [(s[0], s[2], s[3], s[1]) for s in shapes]
        return cls(tuple(shapes), (0, 3, 1, 2)[axis] if nhwc else axis, axis, nhwc,
                   node.outputs[0].dtype.name)

    def describe(self) -> str:
        out = "x".join(map(str, self.out_shape))
        return f"concat {len(self.shapes)} along {self.axis} -> {out}"

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(s).astype(self.dtype) for s in self.shapes]

    def constant(self, node: Node, i: int) -> np.ndarray:
        """A constant input (a class token): in the model's layout, as only a concat in the
        model's layout takes constants."""
        return np.ascontiguousarray(node.inputs[i].data)

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(inputs, axis=self.axis)

    @property
    def elements(self) -> int:
        return math.prod(self.out_shape)
