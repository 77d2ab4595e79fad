"""The separable-conv task: a depthwise conv and the 1×1 conv reading it (ops/separable.py),
computed in NHWC as one kernel. It is the pair of the two convs' own tasks: their geometry,
weight layouts, random inputs and references are theirs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops import separable
from woodpecker.tasks import NHWC, Task, steps_text
from woodpecker.tasks.conv import ConvTask


@dataclass(frozen=True)
class SeparableTask(Task):
    """Node inputs: x, the depthwise weights (HW1C) and bias, the pointwise weights (HWIO) and
    bias, the pointwise residuals (NHWC)."""

    kind = "sepconv"
    layout = NHWC
    ops = frozenset({separable.OP})

    depthwise: ConvTask
    pointwise: ConvTask

    def to_json(self) -> dict:
        return {"depthwise": self.depthwise.to_json(), "pointwise": self.pointwise.to_json()}

    @classmethod
    def from_json(cls, d: dict) -> "SeparableTask":
        return cls(ConvTask.from_json(d["depthwise"]), ConvTask.from_json(d["pointwise"]))

    @classmethod
    def from_node(cls, node: Node) -> "SeparableTask":
        dw, pw = separable.parts(node)
        task = cls(ConvTask.from_node(dw), ConvTask.from_node(pw))
        if task.depthwise.reads_nchw:
            raise ValueError(f"{node.name!r}: a depthwise conv of a model input")
        return task

    def schedule_twin(self) -> "SeparableTask":
        return SeparableTask(self.depthwise.schedule_twin(), self.pointwise.schedule_twin())

    @property
    def dtype(self) -> str:
        return self.pointwise.dtype

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.pointwise.out_shape

    @property
    def flops(self) -> int:
        return self.depthwise.flops + self.pointwise.flops

    @property
    def depthwise_inputs(self) -> int:
        """How many of the task's inputs are the depthwise conv's (x, weights, bias)."""
        return 2 + self.depthwise.has_bias

    def describe(self) -> str:
        d, p = self.depthwise, self.pointwise
        return (f"sepconv {d.kh}x{d.kw}/{d.stride[0]} {d.c}->{p.k} @ {d.h}x{d.w}"
                + (" after " + "+".join(s[0] for s in d.prologue) if d.prologue else "")
                + steps_text(d.epilogue) + " |" + (steps_text(p.epilogue) or " -"))

    def constant(self, node: Node, i: int) -> np.ndarray:
        """Node input `i` in the kernel's layout (see ConvTask.constant)."""
        dw, pw = separable.parts(node)
        return self.depthwise.constant(dw, i) if i < 3 else self.pointwise.constant(pw, i - 2)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """x, the depthwise weights and bias if any, the pointwise weights, bias if any and
        one residual per Add step (see ConvTask.random_inputs)."""
        return self.depthwise.random_inputs(seed) + self.pointwise.random_inputs(seed + 1)[1:]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        n = self.depthwise_inputs
        mid = self.depthwise.reference(inputs[:n])
        return self.pointwise.reference([mid] + list(inputs[n:]))
