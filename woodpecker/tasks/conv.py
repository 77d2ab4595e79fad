"""The conv2d task: a 2-d convolution with its fused epilogue (and prologue), computed in NHWC.
A prologue reading per-channel run-time vectors (squeeze-and-excitation's scale,
ops/fused.py) takes them as the kernel's last arguments, each NHWC (N, 1, 1, C)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from woodpecker.config import MODEL_INPUT_CHANNELS
from woodpecker.ir.graph import Node
from woodpecker.ops.conv import conv
from woodpecker.ops.fused import apply_epilogue, run_program, runtime_count
from woodpecker.tasks import (
    NHWC,
    Task,
    epilogue_dicts,
    epilogue_steps,
    program_dicts,
    program_steps,
    steps_text,
)

NCHW = "NCHW"


@dataclass(frozen=True)
class ConvTask(Task):
    """A 2-d convolution with its fused epilogue, computed in NHWC with HWIO weights."""

    kind = "conv2d"
    layout = NHWC
    ops = frozenset({"Conv", "FusedConv"})

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
    x_layout: str = NHWC                      # or NCHW: a model input read where it lies
    prologue: tuple = ()                      # element-wise steps on x first (ops/fused.py)

    LATER_FIELDS = ("x_layout", "prologue")

    @property
    def vectors(self) -> int:
        """How many per-channel run-time vectors the prologue reads (the last arguments)."""
        return runtime_count(program_dicts(self.prologue)) - 1 if self.prologue else 0

    @property
    def reads_nchw(self) -> bool:
        return self.x_layout == NCHW

    @property
    def out_h(self) -> int:
        span = self.h + self.pads[0] + self.pads[2] - self.dilation[0] * (self.kh - 1) - 1
        return span // self.stride[0] + 1

    @property
    def out_w(self) -> int:
        span = self.w + self.pads[1] + self.pads[3] - self.dilation[1] * (self.kw - 1) - 1
        return span // self.stride[1] + 1

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.n, self.out_h, self.out_w, self.k)

    @property
    def flops(self) -> int:
        return 2 * self.n * self.k * self.out_h * self.out_w * (self.c // self.groups) \
            * self.kh * self.kw

    @classmethod
    def from_node(cls, node: Node) -> "ConvTask":
        if node.op not in cls.ops or len(node.inputs[0].shape) != 4:
            raise ValueError(f"{node.op} node {node.name!r} is not a 2-d convolution")
        vectors = runtime_count(node.attrs["prologue"]) - 1 if node.attrs.get("prologue") else 0
        if any(v is not None and tuple(v.shape) != tuple(node.outputs[0].shape)
               for v in node.inputs[3:len(node.inputs) - vectors]):
            raise ValueError(f"{node.name!r}: an epilogue Add broadcasts its operand")
        if node.inputs[1].data is None:
            # the kernel takes its weights packed (HWIO) at build time, never as they run
            raise ValueError(f"{node.name!r}: weights computed at run time")
        x = node.inputs[0]
        n, c, h, w = x.shape
        k, _, kh, kw = node.inputs[1].shape
        a = node.attrs
        p = a["_pads"]
        reads_nchw = x.producer is None and x.data is None and c <= MODEL_INPUT_CHANNELS
        return cls(n, c, h, w, k, kh, kw, tuple(a["strides"]), (p[0], p[1], p[2], p[3]),
                   tuple(a["dilations"]), a.get("group", 1), node.input(2) is not None,
                   epilogue_steps(node), x.dtype.name, NCHW if reads_nchw else NHWC,
                   program_steps(a.get("prologue", [])))

    def input_layout(self, i: int) -> str:
        return "" if i == 0 and self.reads_nchw else NHWC

    def schedule_twin(self) -> "ConvTask":
        return replace(self, has_bias=False, epilogue=(), prologue=())

    def describe(self) -> str:
        kind = "conv" if self.groups == 1 else "dwconv" if self.groups == self.c else \
            f"conv/{self.groups} groups"
        return (f"{kind} {self.kh}x{self.kw}/{self.stride[0]} {self.c}->{self.k} @ "
                f"{self.h}x{self.w}" + (" (NCHW input)" if self.reads_nchw else "")
                + (" after " + "+".join(s[0] for s in self.prologue) if self.prologue else "")
                + steps_text(self.epilogue))

    def constant(self, node: Node, i: int) -> np.ndarray:
        """Node input `i`'s constant in the kernel's layout: OIHW weights as HWIO, NCHW
        residuals as NHWC, the bias as it is."""
        a = node.inputs[i].data
        if i == 1:
            return np.ascontiguousarray(a.transpose(2, 3, 1, 0))
        return a if i == 2 else np.ascontiguousarray(a.transpose(0, 2, 3, 1))

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """x (NHWC, or NCHW), w (HWIO), bias if any, one residual (NHWC) per Add step, then
        the prologue's per-channel vectors (NHWC (N, 1, 1, C), from [0.5, 1.5))."""
        rng = np.random.default_rng(seed)
        x_shape = (self.n, self.c, self.h, self.w) if self.reads_nchw else \
            (self.n, self.h, self.w, self.c)
        arrays = [rng.standard_normal(x_shape),
                  rng.standard_normal((self.kh, self.kw, self.c // self.groups, self.k))]
        if self.has_bias:
            arrays.append(rng.standard_normal(self.k))
        arrays += [rng.standard_normal(self.out_shape) for s in self.epilogue if s[0] == "Add"]
        arrays += [rng.uniform(0.5, 1.5, (self.n, 1, 1, self.c)) for _ in range(self.vectors)]
        return [a.astype(np.float32) for a in arrays]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """The numpy reference (ops/conv + ops/fused), in NHWC."""
        x, w = inputs[0], inputs[1]
        b = inputs[2] if self.has_bias else None
        operands = inputs[3 if self.has_bias else 2:]
        cut = len(operands) - self.vectors
        residuals = operands[:cut]
        vectors = [v.transpose(0, 3, 1, 2) for v in operands[cut:]]
        attrs = {"_pads": list(self.pads), "strides": list(self.stride),
                 "dilations": list(self.dilation), "group": self.groups}
        x = x if self.reads_nchw else x.transpose(0, 3, 1, 2)
        if self.prologue:
            x = run_program(program_dicts(self.prologue), [x, *vectors], np.zeros(0, x.dtype),
                            (1, self.c, 1, 1))
        y = conv(attrs, x, w.transpose(3, 2, 0, 1), b)
        return apply_epilogue(y.transpose(0, 2, 3, 1), epilogue_dicts(self.epilogue),
                              residuals).astype(np.float32)
