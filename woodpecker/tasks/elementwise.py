"""The element-wise task: a FusedElementwise group (passes/fuse_elementwise.py) over one 4-d
shape, computed in NHWC like the convolutions around it (for an element-wise map the layout is
only the order of the loop, so the layout pass's conversions are the ones it saves)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.fused import QDQ_STEPS, run_program, runtime_count
from woodpecker.tasks import NHWC, Task, program_dicts, program_steps

# the program steps a generated kernel computes bit for bit as the references do
EXACT_STEPS = frozenset({"Add", "Sub", "Mul", "Div", "Relu", "Clip", "QuantizeLinear",
                         "DequantizeLinear"})


@dataclass(frozen=True)
class ElementwiseTask(Task):
    """`program`: the group's steps as (op, args, attrs) with args ("in", i), ("const", j),
    ("channel", j), ("step", k) or None (see ops/fused.py) and attrs as sorted (name, value)
    pairs. The constants' values are kernel arguments, not part of the task: RandWire's nodes,
    which weigh their inputs by different learned scalars, share one task and one tuned
    kernel per shape."""

    kind = "elementwise"
    layout = NHWC
    ops = frozenset({"FusedElementwise"})

    n: int
    h: int
    w: int
    c: int
    inputs: int
    consts: int
    program: tuple
    dtype: str = "float32"
    in_dtypes: tuple = ()        # the run-time inputs' types where one is not float32

    LATER_FIELDS = ("in_dtypes",)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.n, self.h, self.w, self.c)

    @property
    def flops(self) -> int:
        return self.n * self.h * self.w * self.c * len(self.program)

    @classmethod
    def from_node(cls, node: Node) -> "ElementwiseTask":
        """A 4-d group's task (NHWC), or a group of another rank's `ElementwiseRowsTask`."""
        program = node.attrs["program"]
        y = node.outputs[0]
        if not y.shape:
            raise ValueError(f"{node.name!r}: an element-wise group over a scalar")
        if len(y.shape) == 4:
            kind, (n, c, h, w) = cls, y.shape
        else:
            kind, (n, h, w, c) = ElementwiseRowsTask, (1, math.prod(y.shape[:-1]), 1, y.shape[-1])
        k = runtime_count(program)
        consts = node.inputs[k].data.size if len(node.inputs) > k else 0
        types = tuple(v.dtype.name for v in node.inputs[:k])
        return kind(n, h, w, c, k, consts, program_steps(program), y.dtype.name,
                    () if set(types) <= {"float32"} else types)

    @property
    def steps_off(self) -> int:
        """One step where a QuantizeLinear rounds a value that went through a step whose float
        result the kernel and the reference may round differently in the last bit (Sigmoid,
        Tanh, …: Halide's and numpy's own approximations): a value that lands on a half step
        then rounds either way, as it does between ONNX Runtime and numpy too. Exact otherwise
        (add, multiply, divide, clip and Q/DQ themselves are IEEE operations under
        strict_float)."""
        ops = [op for op, _, _ in self.program]
        return int("QuantizeLinear" in ops and any(op not in EXACT_STEPS for op in ops))

    @property
    def table_ready(self) -> bool:
        """One 8-bit run-time input and no per-channel constant: the output is a function of
        the input's 256 values (`table`)."""
        return self.inputs == 1 and self.input_dtype(0) in ("uint8", "int8") and not any(
            a is not None and a[0] == "channel" for _, args, _ in self.program for a in args)

    def table(self, consts: np.ndarray | None) -> np.ndarray:
        """The program's output at each of its input's 256 values, in input order (int8 from
        −128), computed by the reference program: a kernel reading it is exact."""
        info = np.iinfo(self.input_dtype(0))
        values = np.arange(info.min, info.max + 1).astype(self.input_dtype(0))
        consts = consts if self.consts else np.zeros(0, np.float32)
        return np.ascontiguousarray(run_program(program_dicts(self.program), [values], consts,
                                                (1,)), self.dtype)

    def input_dtype(self, i: int) -> str:
        return self.in_dtypes[i] if self.in_dtypes else "float32"

    @property
    def out_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def describe(self) -> str:
        ops = "+".join(op for op, _, _ in self.program)
        return f"elementwise {ops} ({self.inputs} in) {self.c} @ {self.h}x{self.w}"

    def constant(self, node: Node, i: int) -> np.ndarray:
        return np.ascontiguousarray(node.inputs[i].data, np.float32).reshape(-1)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """The run-time inputs (NHWC; 8-bit ones over their whole range), then the constants,
        drawn from [0.5, 1.5) so that a divisor is never near zero — a Q/DQ step's zero point
        an integer of its type and its scale one that spreads the values over the 8 bits (an
        output's saturating at both ends now and then)."""
        rng = np.random.default_rng(seed)
        xs = []
        for i in range(self.inputs):
            t = np.dtype(self.input_dtype(i))
            xs.append(rng.integers(np.iinfo(t).min, np.iinfo(t).max + 1, self.out_shape)
                      .astype(t) if t.kind in "iu" else
                      rng.standard_normal(self.out_shape).astype(np.float32))
        if not self.consts:
            return xs
        consts = rng.uniform(0.5, 1.5, self.consts).astype(np.float32)
        for op, args, attrs in self.program:
            if op in QDQ_STEPS:
                info = np.iinfo(dict(attrs)["dtype"])
                dq = op == "DequantizeLinear"
                consts[args[1][1]] = rng.uniform(0.01, 0.04) if dq else rng.uniform(0.02, 0.05)
                span = info.max - info.min      # a quantized output's zero point mid-range
                consts[args[2][1]] = rng.integers(info.min, info.max + 1) if dq else \
                    rng.integers(info.min + span // 4, info.max - span // 4)
        return xs + [consts]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        consts = inputs[self.inputs] if self.consts else np.zeros(0, np.float32)
        return np.asarray(run_program(program_dicts(self.program), inputs[:self.inputs], consts,
                                      (self.c,)), self.dtype)


@dataclass(frozen=True)
class ElementwiseRowsTask(ElementwiseTask):
    """An element-wise group over a tensor of another rank than 4 (passes/fuse_elementwise.
    ROWS: a statically quantized transformer's (batch, tokens, features)), computed in the
    tensor's own row-major layout: its M = ∏ shape[:-1] rows of C = shape[-1] values are the
    NHWC (1, M, 1, C) the element-wise template computes (per-channel constants along the last
    axis), which the kernel reads and writes through views of that shape (`view`)."""

    kind = "elementwise_rows"
    layout = ""

    @property
    def view(self) -> tuple[int, ...]:
        return self.out_shape
