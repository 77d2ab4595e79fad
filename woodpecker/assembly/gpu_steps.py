"""A GPU plan's steps (issue 54): which GPU template computes each node, with which config,
on which engine — the first stage of assembly/gpu_plan.py, shared with tuning batches
(tune/gpu_batch.py).

Contract: `gpu_steps(graph, target, configs, precision, library)` maps every computing node to
a `GpuStep`: its task (in half precision for an fp16 plan), the GPU template of
`GPU_TEMPLATES` a measured choice names (`GpuChoice`) or the first that supports it, the
config (tuned, or that template's first seed), and its engine (`LIBRARY`, torch, for task
keys in `library`, or EVERY_TASK). One WoodpeckerError names every node no template computes.
`kernel_arguments` transforms a step's constants where its template asks (tasks/transforms.py:
Winograd's U). Flatten, Reshape, Squeeze and Unsqueeze are views, not steps (`VIEW_OPS`);
`LayoutConvert` nodes are the layout conversions assembly/gpu_layouts.py inserts.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, replace

from woodpecker.engines.halide.gpu import (
    concat,
    conv,
    dense,
    depthwise,
    elementwise,
    movement,
    pool,
    rows,
    winograd,
)
from woodpecker.errors import WoodpeckerError
from woodpecker.ir.graph import Graph, Node
from woodpecker.runtime.gpu_plan import GENERATED, HOST, LIBRARY
from woodpecker.target import Target
from woodpecker.tasks import NHWC, Task, task_from_node, transforms
from woodpecker.tasks.elementwise import ElementwiseTask
from woodpecker.tasks.movement import ConcatTask, MoveTask
from woodpecker.tasks.transforms import Transform

PRECISIONS = ("fp32", "fp16")
# in order of preference for a task no measurement chose for (the first that supports it);
# a tuning batch measures every template that supports a task (tune/gpu_batch.py)
GPU_TEMPLATES = {"conv": conv, "winograd": winograd, "depthwise": depthwise, "dense": dense,
                 "pool": pool, "elementwise": elementwise, "rows": rows, "movement": movement,
                 "concat": concat}
VIEW_OPS = frozenset({"Flatten", "Reshape", "Squeeze", "Unsqueeze"})
CONVERT = "LayoutConvert"     # a GPU plan's own node: a value moved between NHWC and NCHW


@dataclass(frozen=True)
class GpuStep:
    node: Node
    task: Task
    template: str
    config: dict
    engine: str = GENERATED     # or LIBRARY (torch: runtime/gpu_torch.py), or HOST




@dataclass(frozen=True)
class HostOp:
    """The task of a host step: a node no GPU template computes, run by its numpy reference
    between copies (runtime/gpu_host_ops.py). Keyed by the node: nothing shares it."""

    op: str
    node: str
    dtype: str = "float32"

    kind = HOST
    layout = ""           # the model's own layout: an NHWC value it reads is converted first

    @property
    def key(self) -> str:
        return f"{HOST}:" + json.dumps({"op": self.op, "node": self.node}, sort_keys=True)

    def input_layout(self, i: int) -> str:
        return self.layout

    def describe(self) -> str:
        return f"{self.op} on the host"


@dataclass(frozen=True)
class GpuChoice:
    """A task's measured choice (tune/gpu_batch.py): a GPU template's name and config, or
    LIBRARY (the task on torch)."""

    template: str
    config: dict

    @property
    def library(self) -> bool:
        return self.template == LIBRARY


class EveryTask:
    """`library=EVERY_TASK`: every step on the library (a plan of cuDNN and cuBLAS calls in
    the plan's own arena — the per-node choice's other end)."""

    def __contains__(self, key: object) -> bool:
        return True


EVERY_TASK = EveryTask()


def half(task: Task) -> Task:
    """`task` storing its float32 tensors in float16 (a `precision="fp16"` GPU plan)."""
    if getattr(task, "dtype", None) != "float32":
        return task
    changes = {"dtype": "float16"}
    if isinstance(task, ElementwiseTask):
        changes["in_dtypes"] = tuple("float16" if task.input_dtype(i) == "float32"
                                     else task.input_dtype(i) for i in range(task.inputs))
    return replace(task, **changes)


def gpu_steps(graph: Graph, target: Target, configs: dict | None = None,
              precision: str = "fp32", library: Collection[str] = (),
              host_fallback: bool = True) -> list[GpuStep]:
    """Each computing node's task (in half precision for an fp16 plan), template and config,
    and its engine: the library for tasks whose key is in `library`; a node no GPU template
    computes runs on the host by its numpy reference (`host_fallback`; HOST steps); one
    WoodpeckerError names every node neither can run."""
    if precision not in PRECISIONS:
        raise WoodpeckerError(f"GPU plans compute in {' or '.join(PRECISIONS)}, not "
                              f"{precision!r}")
    configs = configs or {}
    steps, missing, made_nhwc = [], [], set()
    for node in graph.nodes:
        if node.op in VIEW_OPS:
            continue
        task = task_from_node(node) or _movement(node) or _concat(node, made_nhwc)
        if task is not None and precision == "fp16":
            task = half(task)
        choice = None if task is None else _choice(task, target, configs.get(task.key))
        if choice is None and host_fallback and _host_op(node) is not None:
            steps.append(GpuStep(node, _host_op(node), HOST, {}, HOST))
        elif choice is None:
            missing.append(f"{node.name} ({node.op})")
        else:
            steps.append(GpuStep(node, task, *choice,
                                 LIBRARY if task.key in library else GENERATED))
            if task.layout == NHWC and len(node.outputs[0].shape) == 4:
                made_nhwc.add(node.outputs[0].name)
    if missing:
        raise WoodpeckerError(f"neither a GPU kernel nor the host computes {len(missing)} "
                              f"node(s): "
                              f"{', '.join(missing[:8])}{' …' if len(missing) > 8 else ''}")
    return steps


def _host_op(node: Node) -> HostOp | None:
    """A host step for `node`: an op with a numpy reference (not ONNX Runtime's opaque
    nodes: the device has numpy alone) and static output shapes."""
    from woodpecker.ops import OPS

    if node.op not in OPS or node.op == "Opaque" or not node.outputs or any(
            v.shape is None or v.dtype is None for v in node.outputs):
        return None
    return HostOp(node.op, node.name, node.outputs[0].dtype.name)


def _movement(node: Node) -> MoveTask | None:
    """A Transpose, Gather or Slice as a GPU copy (kinds only GPU plans compute)."""
    if node.op not in MoveTask.ops:
        return None
    try:
        return MoveTask.from_node(node)
    except ValueError:
        return None


def templates_for(task: Task) -> list[str]:
    """The GPU templates that compute `task`, in GPU_TEMPLATES' order."""
    return [name for name, module in GPU_TEMPLATES.items()
            if task.kind in getattr(module, "KINDS", (module.KIND,)) and module.supports(task)]


def _concat(node: Node, made_nhwc: set[str]) -> ConcatTask | None:
    """A Concat as a GPU copy: in NHWC where every input is an NHWC image made by an earlier
    step (the layout decision device_layouts then reads back), else in the model's layout
    (an NHWC input then converted first, convert_layouts)."""
    if node.op != "Concat" or any(v is None or v.shape is None for v in node.inputs):
        return None
    nhwc = all(v.name in made_nhwc and len(v.shape) == 4 for v in node.inputs)
    return ConcatTask.from_node(node, nhwc)


def _choice(task: Task, target: Target, tuned: "dict | GpuChoice | None",
            ) -> tuple[str, dict] | None:
    """`tuned` where it is valid (a GpuChoice's template, or the first template a bare config
    is valid for), else the first template's first seed (or valid config)."""
    names = templates_for(task)
    if isinstance(tuned, GpuChoice):
        if tuned.template in names and \
                GPU_TEMPLATES[tuned.template].space(task, target.device).is_valid(tuned.config):
            return tuned.template, dict(tuned.config)
        tuned = None
    for name in names:
        module = GPU_TEMPLATES[name]
        space = module.space(task, target.device)
        if tuned is not None and space.is_valid(tuned):
            return name, dict(tuned)
    for name in names:
        space = GPU_TEMPLATES[name].space(task, target.device)
        if space.seeds:
            return name, dict(space.seeds[0])
        first = next(iter(space.valid_configs()), None)
        if first is not None:
            return name, first
    return None


def argument_transforms(module, task: Task, config: dict) -> dict[int, Transform]:
    """The transforms a template applies to the task's constants once (winograd.py's
    weights; tasks/transforms.py), by argument index; none for most."""
    hook = getattr(module, "transforms", None)
    return {} if hook is None else hook(task, config)


def kernel_arguments(module, task: Task, config: dict, args: list) -> list:
    """The task's arguments as the template's kernel takes them (None: one that arrives at
    run time): its constants transformed where the template says so."""
    out = list(args)
    for i, spec in argument_transforms(module, task, config).items():
        if out[i] is not None:
            out[i] = transforms.apply(spec, out[i])
    return out
