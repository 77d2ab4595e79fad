"""The conv-chain task: convolutions each reading only the one before (ops/chain.py), computed
in NHWC as one kernel. It is the tuple of the convs' own tasks: their geometry, weight layouts,
random inputs and references are theirs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops import chain
from woodpecker.tasks import NHWC, Task, steps_text
from woodpecker.tasks.conv import ConvTask


@dataclass(frozen=True)
class ChainTask(Task):
    """Node inputs: x, each conv's weights (HWIO) and bias, the last conv's residuals (NHWC);
    the kernel takes them without the missing biases."""

    kind = "convchain"
    layout = NHWC
    ops = frozenset({chain.OP})

    convs: tuple[ConvTask, ...]

    def to_json(self) -> dict:
        return {"convs": [c.to_json() for c in self.convs]}

    @classmethod
    def from_json(cls, d: dict) -> "ChainTask":
        return cls(tuple(ConvTask.from_json(c) for c in d["convs"]))

    @classmethod
    def from_node(cls, node: Node) -> "ChainTask":
        task = cls(tuple(ConvTask.from_node(p) for p in chain.parts(node)))
        if task.convs[0].reads_nchw:
            raise ValueError(f"{node.name!r}: a conv chain reading a model input")
        return task

    @property
    def dtype(self) -> str:
        return self.convs[-1].dtype

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.convs[-1].out_shape

    @property
    def flops(self) -> int:
        return sum(c.flops for c in self.convs)

    def describe(self) -> str:
        def one(c: ConvTask) -> str:
            kind = "dw" if c.groups == c.c > 1 else "conv"
            return f"{kind} {c.kh}x{c.kw}/{c.stride[0]} {c.c}->{c.k}" + steps_text(c.epilogue)
        return "chain " + " | ".join(one(c) for c in self.convs) + \
            f" @ {self.convs[0].h}x{self.convs[0].w}"

    def _conv_of_input(self, i: int) -> tuple[int, int]:
        """(conv, its node input index) of the chain node's input `i`."""
        m = len(self.convs)
        if i == 0:
            return 0, 0
        if i < 1 + 2 * m:
            return (i - 1) // 2, 1 + (i - 1) % 2
        return m - 1, 3 + i - (1 + 2 * m)

    def constant(self, node: Node, i: int) -> np.ndarray:
        """Node input `i` in the kernel's layout (see ConvTask.constant)."""
        j, k = self._conv_of_input(i)
        return self.convs[j].constant(chain.parts(node)[j], k)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """x, then each conv's weights and bias if any, then one residual per Add step of the
        last conv (see ConvTask.random_inputs)."""
        out = self.convs[0].random_inputs(seed)
        for i, c in enumerate(self.convs[1:], 1):
            out += c.random_inputs(seed + i)[1:]
        return out

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        x, rest = inputs[0], list(inputs[1:])
        for i, c in enumerate(self.convs):
            n = 1 + c.has_bias
            own, rest = rest[:n], rest[n:]
            last = i == len(self.convs) - 1
            x = c.reference([x, *own, *(rest if last else [])])
        return x
