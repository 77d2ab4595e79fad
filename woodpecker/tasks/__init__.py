"""Tuning tasks: a distinct (op or fused group, shapes, dtype, layout) extracted from a node.
Identical layers map to equal tasks and so share one tuning result (Woodpecker-DL §3.1).

Every kind of task (conv2d, sepconv, dense, pool, rows, elementwise, attention, chain, resize,
conv_transpose, qconv2d, qmatmul, qdense) offers the same interface, so extraction, the measurement
worker, the tuner, system-level selection and the Halide engine handle them alike:

- `kind`, `layout` ("NHWC": the kernel reads and writes channels-innermost activations and the
  layout pass converts around it; "": the node's own layout), `input_layout(i)` (the layout it
  reads node input `i` in: `layout`, unless a task variant reads one where it lies), `key`,
  `to_json`/`from_json`;
- `from_node(node)` (ValueError for a variant no template computes), `flops`, `out_shape`;
- `schedule_twin()` and `shape_class`: the task without its fused steps and bias, and its key
  (tasks of one shape class share a search, tune/driver.py);
- `random_inputs(seed)` (the kernel's arguments: the node's present inputs, in order, in the
  kernel's layout), `reference(inputs)` (numpy), `constant(node, i)` (node input `i`'s
  constant in the kernel's layout), `describe()`.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import ClassVar

import numpy as np

from woodpecker.ir.graph import Node

NHWC = "NHWC"
NHWC_PERM = (0, 2, 3, 1)     # a model-layout NCHW array held NHWC: x.transpose(NHWC_PERM)
# The node attribute a lowered-precision compile sets on the nodes whose products it takes in
# another type (passes/precision.py): the type's name ("bfloat16"); tasks carry it as `compute`.
COMPUTE = "_compute"


def rounded(a: np.ndarray, compute: str) -> np.ndarray:
    """`a` as a kernel computing in `compute` sees it: rounded to that type (to nearest, ties
    to even, by ml_dtypes) and back to float32; unchanged for "float32"."""
    if compute == "float32":
        return a
    import ml_dtypes

    return np.asarray(a, np.float32).astype(getattr(ml_dtypes, compute)).astype(np.float32)


class Task:
    """Shared serialisation of the frozen task dataclasses."""

    kind: ClassVar[str]
    layout: ClassVar[str]
    ops: ClassVar[frozenset[str]]
    # Fields added after tuning logs were written: left out of the key at their default, so
    # the records of earlier logs still match their tasks.
    LATER_FIELDS: ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict:
        fields = self.__dataclass_fields__
        return {f: getattr(self, f) for f in fields
                if f not in self.LATER_FIELDS or getattr(self, f) != fields[f].default}

    def input_layout(self, i: int) -> str:
        """The layout the kernel reads node input `i` in."""
        return self.layout

    @property
    def steps_off(self) -> int:
        """How many steps an integer output may lie off the reference (tune/worker.agrees):
        0, exact, unless a kind's float steps round differently before a quantize."""
        return 0

    @classmethod
    def from_json(cls, d: dict) -> "Task":
        return cls(**{k: _tupled(v) for k, v in d.items()})

    def schedule_twin(self) -> "Task":
        """The task without what its schedules do not depend on (a fused epilogue or
        prologue, a bias: each template's space is its geometry's): tasks with equal twins
        are one shape class (`shape_class`) and take each other's configs (tune/driver.py).
        Kinds whose spaces read everything: the task itself."""
        return self

    @cached_property
    def shape_class(self) -> str:
        """The key of `schedule_twin`: equal for tasks whose schedule spaces are one."""
        return self.schedule_twin().key

    @cached_property
    def key(self) -> str:
        """Computed once per task (a frozen dataclass: it cannot change); cost models look
        it up per candidate."""
        return f"{self.kind}:" + json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))


def _tupled(v):
    return tuple(_tupled(x) for x in v) if isinstance(v, list) else v


# An epilogue step's parameters, in order, with the ONNX default of each (None: no default).
_PARAMS = {"Clip": (("min", None), ("max", None)), "Mul": (("scale", None),),
           "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)), "Gelu": (("approximate", "none"),)}


def epilogue_steps(node: Node) -> tuple[tuple, ...]:
    """A fused node's epilogue as hashable (op, *params) steps; "Add" reads a residual."""
    return steps_of(node.attrs.get("epilogue", []))


def steps_of(epilogue: list[dict]) -> tuple[tuple, ...]:
    """Epilogue steps (ops/fused.py's dicts) as hashable (op, *params) steps."""
    return tuple((s["op"],) + tuple(s.get(key, default)
                                    for key, default in _PARAMS.get(s["op"], ()))
                 for s in epilogue)


def epilogue_dicts(steps: tuple[tuple, ...]) -> list[dict]:
    """The inverse of `epilogue_steps`, as `ops.fused.apply_epilogue` reads it."""
    return [{"op": s[0], **{key: v for (key, _), v in zip(_PARAMS.get(s[0], ()), s[1:])}}
            for s in steps]


def program_steps(program: list[dict]) -> tuple:
    """An element-wise program (ops/fused.py's dicts) as hashable (op, args, attrs) steps,
    attrs as sorted (name, value) pairs."""
    return tuple((s["op"], tuple(None if a is None else tuple(a) for a in s["args"]),
                  tuple(sorted(s.get("attrs", {}).items()))) for s in program)


def program_dicts(steps: tuple) -> list[dict]:
    """The inverse of `program_steps`, as ops/fused.py's `run_program` reads it."""
    return [{"op": op, "args": [None if a is None else list(a) for a in args],
             "attrs": dict(attrs)} for op, args, attrs in steps]


def steps_text(steps: tuple[tuple, ...]) -> str:
    return " +" + "+".join(s[0] for s in steps) if steps else ""


def task_kinds() -> dict[str, type]:
    from woodpecker.tasks.attention import AttentionTask
    from woodpecker.tasks.chain import ChainTask
    from woodpecker.tasks.conv import ConvTask
    from woodpecker.tasks.conv_transpose import ConvTransposeTask
    from woodpecker.tasks.dense import DenseTask
    from woodpecker.tasks.elementwise import ElementwiseRowsTask, ElementwiseTask
    from woodpecker.tasks.pool import PoolTask
    from woodpecker.tasks.qconv import QConvTask, QMatMulTask
    from woodpecker.tasks.qdense import QDenseTask
    from woodpecker.tasks.resize import ResizeTask
    from woodpecker.tasks.rows import RowTask
    from woodpecker.tasks.separable import SeparableTask

    return {t.kind: t for t in (ConvTask, DenseTask, PoolTask, RowTask, ElementwiseTask,
                                ElementwiseRowsTask,
                                SeparableTask, ChainTask, AttentionTask, ResizeTask,
                                ConvTransposeTask, QConvTask, QMatMulTask, QDenseTask)}


def task_from_node(node: Node) -> Task | None:
    """The task computing `node`, or None when no kind of task covers it (op or variant)."""
    for cls in task_kinds().values():
        if node.op in cls.ops:
            try:
                return cls.from_node(node)
            except ValueError:
                return None
    return None


def spec_kind(spec: dict) -> type:
    """The task class of a kernel spec's JSON (engines/choice.KernelSpec); a spec without a
    kind (written before dense and pool tasks existed) is a convolution."""
    kind = spec.get("kind", "conv2d")
    kinds = task_kinds()
    if kind not in kinds:
        raise ValueError(f"unknown task kind {kind!r}; known: {', '.join(kinds)}")
    return kinds[kind]


def spec_task(spec: dict) -> Task:
    """The task of a kernel spec's JSON (engines/choice.KernelSpec)."""
    return spec_kind(spec).from_json(spec["task"])


def gpu_only_kinds() -> dict[str, type]:
    """Task kinds only GPU plans compute as kernels (movement: on the CPU numpy and the
    libraries move data), kept out of `task_kinds` so no CPU engine claims their nodes."""
    from woodpecker.tasks.movement import ConcatTask, MoveTask

    return {MoveTask.kind: MoveTask, ConcatTask.kind: ConcatTask}


def task_from_key(key: str) -> Task:
    """The task whose `key` this is (tuning records and GPU plans name their task by key)."""
    kind, _, text = key.partition(":")
    kinds = {**task_kinds(), **gpu_only_kinds()}
    if kind not in kinds:
        raise ValueError(f"unknown task kind {kind!r}; known: {', '.join(kinds)}")
    return kinds[kind].from_json(json.loads(text))


def library_inputs(task: Task, node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The task's random arguments that arrive at run time, in the node's own layout and
    shapes: what a library kernel of the node is called with."""
    present = [(i, v) for i, v in enumerate(node.inputs) if v is not None]
    out = []
    for (i, v), a in zip(present, inputs):
        if v.data is None:
            a = a.transpose(0, 3, 1, 2) if task.input_layout(i) == NHWC else a
            out.append(np.ascontiguousarray(a).reshape(v.shape))
    return out
