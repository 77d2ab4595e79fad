"""The attention task: softmax(Q·Kᵀ · scale + masks)·V over `batch` independent (batch, head)
slices (ops/attention.py), in the node's own row-major layout."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.attention import attention, rows_first
from woodpecker.tasks import Task, epilogue_dicts, steps_of, steps_text


@dataclass(frozen=True)
class AttentionTask(Task):
    """Q (batch, m, d), K (batch, n, d) and V (batch, n, dv) each read from a flat source of
    `sizes[i]` elements through `views[i]` = (offset, batch stride, row stride, column stride)
    (ops/attention.py's views with the leading dimensions as one); the output (batch, m, dv),
    or (m, batch, dv) with `rows_first`. `scores`: the steps (`Mul` by a scale, `Add` of a
    mask) applied to the scores before the softmax; `masks`: per Add step, the axes of the
    (batch, m, n) scores its operand varies along ("b", "m", "n" in that order; it is
    broadcast along the others)."""

    kind = "attention"
    layout = ""
    ops = frozenset({"FusedAttention"})

    batch: int
    m: int
    n: int
    d: int
    dv: int
    sizes: tuple[int, int, int]
    views: tuple[tuple[int, int, int, int], ...]
    scores: tuple[tuple, ...]
    masks: tuple[str, ...]
    rows_first: bool
    dtype: str = "float32"

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.m, self.batch, self.dv) if self.rows_first else \
            (self.batch, self.m, self.dv)

    @property
    def flops(self) -> int:
        """The two products and the softmax (5 per score, as ops/norm counts it)."""
        return self.batch * self.m * self.n * (2 * self.d + 2 * self.dv + 5)

    @classmethod
    def from_node(cls, node: Node) -> "AttentionTask":
        views = node.attrs["views"]
        q, k, v = (tuple(view["shape"]) for view in views)
        lead = q[:-2]
        batch, m, n = math.prod(lead), q[-2], k[-2]
        masks = tuple(_mask_axes(node, x.shape, lead + (m, n)) for x in node.inputs[3:])
        perm = node.attrs.get("out_perm")
        if perm is not None and list(perm) != rows_first(len(q)):
            raise ValueError(f"{node.name!r}: an output permutation other than rows first")
        sizes = tuple(math.prod(x.shape) for x in node.inputs[:3])
        return cls(batch, m, n, q[-1], v[-1], sizes,
                   tuple(_flat_view(node, view) for view in views),
                   steps_of(node.attrs["scores"]), masks, perm is not None,
                   node.inputs[0].dtype.name)

    def describe(self) -> str:
        lead = f"{self.batch}x" if self.batch > 1 else ""
        return f"attention {lead}{self.m}x{self.n} d{self.d}->{self.dv}" + \
            steps_text(self.scores)

    def mask_shape(self, axes: str) -> tuple[int, int, int]:
        return (self.batch if "b" in axes else 1, self.m if "m" in axes else 1,
                self.n if "n" in axes else 1)

    def logical_views(self) -> list[dict]:
        """Q's, K's and V's views (ops/attention.py's form) with the leading dimensions as
        one."""
        shapes = ((self.batch, self.m, self.d), (self.batch, self.n, self.d),
                  (self.batch, self.n, self.dv))
        return [{"shape": list(s), "offset": v[0], "strides": list(v[1:])}
                for s, v in zip(shapes, self.views)]

    def arg_shapes(self) -> list[tuple[int, ...]]:
        """The three flat sources, each mask, then the output."""
        return [(s,) for s in self.sizes] + [self.mask_shape(a) for a in self.masks] + \
            [self.out_shape]

    def constant(self, node: Node, i: int) -> np.ndarray:
        return np.ascontiguousarray(node.inputs[i].data).reshape(self.arg_shapes()[i])

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """The sources of Q and K scaled so the scores spread over a few units (a softmax
        neither flat nor one-hot), of V and the masks standard normal."""
        rng = np.random.default_rng(seed)
        spread = np.float32(self.d ** -0.25)
        return [rng.standard_normal(s).astype(np.float32) * (spread if i < 2 else 1)
                for i, s in enumerate(self.arg_shapes()[:-1])]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        y = attention({"scores": epilogue_dicts(self.scores), "views": self.logical_views()},
                      *(x.astype(np.float64) for x in inputs))
        return np.ascontiguousarray(y.transpose(1, 0, 2) if self.rows_first else y) \
            .astype(np.float32)


def _flat_view(node: Node, view: dict) -> tuple[int, int, int, int]:
    """(offset, batch stride, row stride, column stride) of a view whose leading dimensions
    step as one index; ValueError where they do not."""
    shape, strides = view["shape"], view["strides"]
    lead = [(e, s) for e, s in zip(shape[:-2], strides[:-2]) if e > 1]
    for (_, outer), (extent, inner) in zip(lead, lead[1:]):
        if outer != inner * extent:
            raise ValueError(f"{node.name!r}: heads that are no single strided dimension")
    return (view["offset"], lead[-1][1] if lead else 0, strides[-2], strides[-1])


def _mask_axes(node: Node, shape: tuple[int, ...], full: tuple[int, ...]) -> str:
    """Which of (batch, m, n) a mask of `shape` varies along; ValueError where it varies along
    only some of the leading dimensions (the kernel sees them as one)."""
    shape = tuple(shape)
    if len(shape) > len(full) or np.broadcast_shapes(shape, full) != full:
        raise ValueError(f"{node.name!r}: a mask of shape {shape} over scores {full}")
    shape = (1,) * (len(full) - len(shape)) + shape
    lead, n_lead = shape[:-2], full[:-2]
    if any(s != 1 for s in lead) and lead != n_lead:
        raise ValueError(f"{node.name!r}: a mask broadcast over some of the heads")
    axes = "b" if lead == n_lead and math.prod(n_lead) > 1 else ""
    return axes + ("m" if shape[-2] == full[-2] > 1 else "") + \
        ("n" if shape[-1] == full[-1] > 1 else "")
