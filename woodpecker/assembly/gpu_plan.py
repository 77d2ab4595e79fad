"""Assembling a GPU plan (issue 54: build here, run there): a graph after the passes becomes a
folder the device runs with numpy and ctypes alone (runtime/gpu_plan.py).

Contract: `assemble_gpu_plan(graph, target, folder, configs)` maps every node to a GPU
template of engines/halide/gpu (`GPU_TEMPLATES`, the first that supports its task) with its
tuned config from `configs` (task key → config) or the template's first valid seed, builds
each kernel for `target` (PTX of the device's capability in a shared library), and writes:
`plan.json` (last, under a temporary name moved into place), `runtime.so` (Halide's CUDA
runtime and cuda_glue.c), `kernels/<digest>.so`, `weights.bin`. A node no GPU template
computes is one WoodpeckerError naming every such node.

Device layout (`device_layouts`): a 4-d value an NHWC task (conv, pool, element-wise group)
writes, or a model input such tasks read, is NHWC on the device; every other value keeps its
own layout (a transformer's). A model input a stem conv reads stays NCHW; an NHWC input is
transposed on the host before its copy, an NHWC output after it — so the only transfers are
the plan's inputs and outputs. An NHWC value read in the model's layout — by a step of
another layout, or through a view whose bytes differ (a classifier's Flatten of 7×7
features) — is converted once by a movement kernel (`convert_layouts`: a `LayoutConvert`
node before its first such reader), and a value held in its own layout that an NHWC step
reads is converted the other way. A Flatten, Reshape,
Squeeze or Unsqueeze is a view of its input's bytes (no kernel) where they mean the same in
both layouts; Transpose, Gather of one constant index and Slice are copies
(tasks/movement.py).

Library steps (`library`: task keys, or EVERY_TASK): a step whose task is listed runs on
torch (cuDNN, cuBLAS: runtime/gpu_torch.py) over the same argument views, recorded as
`"engine": "torch"`; its kernel is built and kept too, so the plan stays checkable on the
host. compiler_gpu.compile_gpu lists the tasks whose library candidate the device measured
fastest (tune/gpu_batch.py) — WPK §2.5's per-operator choice.

`precision="fp16"`: every float32 tensor — activations, weights, the inputs and outputs on
the device — is stored in float16 and computed in float32 by the templates (half the memory
traffic; Halide 21 reaches no tensor cores); the host converts the inputs and outputs.

Activations share one device allocation at offsets from SERENITY's arena planner
(schedule/arena.py, the CPU plans' own), with views as aliases; weights lie in a second one,
copied once at load.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

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
from woodpecker.engines.halide.gpu.build import build_gpu
from woodpecker.engines.halide.gpu.runtime_build import cuda_runtime, kernel_library
from woodpecker.errors import WoodpeckerError
from woodpecker.files import sha256_file
from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.runtime.gpu_plan import FORMAT, VERSION
from woodpecker.schedule.aliases import VIEW
from woodpecker.schedule.arena import plan_arena
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
WEIGHT_ALIGN = 256        # cudaMalloc's alignment: every weight starts on one


@dataclass(frozen=True)
class GpuStep:
    node: Node
    task: Task
    template: str
    config: dict
    engine: str = "halide"      # or LIBRARY: the step runs on torch (runtime/gpu_torch.py)


LIBRARY = "torch"


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
              precision: str = "fp32", library: Collection[str] = ()) -> list[GpuStep]:
    """Each computing node's task (in half precision for an fp16 plan), template and config,
    and its engine: the library for tasks whose key is in `library`; one WoodpeckerError
    naming every node no GPU template computes."""
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
        if choice is None:
            missing.append(f"{node.name} ({node.op})")
        else:
            steps.append(GpuStep(node, task, *choice,
                                 LIBRARY if task.key in library else "halide"))
            if task.layout == NHWC and len(node.outputs[0].shape) == 4:
                made_nhwc.add(node.outputs[0].name)
    if missing:
        raise WoodpeckerError(f"no GPU kernel computes {len(missing)} node(s): "
                              f"{', '.join(missing[:8])}{' …' if len(missing) > 8 else ''}")
    return steps


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


def device_shape(v: Value, nhwc: bool) -> tuple[int, ...]:
    """The shape `v` has on the device: NHWC where `nhwc`, else its own."""
    shape = tuple(int(d) for d in v.shape)
    return (shape[0], shape[2], shape[3], shape[1]) if nhwc else shape


def _reads_nhwc(step: GpuStep, v: Value) -> bool:
    if step.node.op == CONVERT:      # a conversion to NCHW reads the NHWC bytes it transposes
        return v is step.node.inputs[0] and not step.node.attrs["to_nhwc"]
    return len(v.shape) == 4 and any(
        u is v and step.task.input_layout(i) == NHWC for i, u in enumerate(step.node.inputs))


def device_layouts(graph: Graph, steps: list[GpuStep]) -> dict[str, bool]:
    """Per value, whether it is NHWC on the device: a 4-d output of an NHWC task (conv,
    pool, element-wise groups), or a 4-d model input such tasks read; every other value keeps
    its own layout. A step reading a value in the other layout is one WoodpeckerError (the
    assembly first converts what it can: `convert_layouts`)."""
    nhwc = _layouts(graph, steps)
    for s, _, v in _mismatches(steps, nhwc):
        raise WoodpeckerError(
            f"node {s.node.name} ({s.node.op}) reads {v.name!r} in "
            f"{'NHWC' if _reads_nhwc(s, v) else 'its own layout'}, which the device holds "
            "in the other (convert_layouts converts these first)")
    return nhwc


def _layouts(graph: Graph, steps: list[GpuStep]) -> dict[str, bool]:
    made = {s.node.outputs[0].name: s for s in steps}
    nhwc = {}
    for v in graph.values.values():
        if v.name in made:
            step = made[v.name]
            nhwc[v.name] = step.node.attrs["to_nhwc"] if step.node.op == CONVERT else \
                len(v.shape) == 4 and step.task.layout == NHWC
        elif v.producer is None and v.data is None:
            nhwc[v.name] = any(_reads_nhwc(s, v) for s in steps)
        else:
            nhwc[v.name] = False
    return nhwc


def _mismatches(steps: list[GpuStep], nhwc: dict[str, bool]) -> list[tuple]:
    """(step, input index, value) where a step reads a 4-d value in the other layout."""
    return [(s, i, v) for s in steps for i, v in enumerate(s.node.inputs)
            if v is not None and v.data is None and len(v.shape) == 4
            and _reads_nhwc(s, v) != nhwc[v.name]]


def _needs_model_layout(graph: Graph, nhwc: dict[str, bool]) -> list[Value]:
    """The NHWC values a view reshapes (their bytes differ from the model layout's)."""
    return [node.inputs[0] for node in graph.nodes if node.op in VIEW_OPS
            and node.inputs[0].data is None and nhwc.get(node.inputs[0].name)
            and tuple(node.inputs[0].shape[2:]) != (1, 1)]


def convert_layouts(graph: Graph, steps: list[GpuStep], target: Target,
                    precision: str = "fp32") -> tuple[list[GpuStep], dict[str, bool]]:
    """Every NHWC value read in the model's layout — by a step of another layout, or through
    a view (a classifier's Flatten of a conv's 7×7 features) — and every value held in its
    own layout that a step reads in NHWC (a conv after a Slice or a Transpose: ShuffleNet,
    ConvNeXt) gets one conversion step: a movement kernel transposing it, a node
    `LayoutConvert` (attribute `to_nhwc`) before its first such reader, whose output those
    readers take instead. Returns the steps in graph order and the layouts."""
    nhwc = _layouts(graph, steps)
    wanted: dict[tuple[str, bool], list[tuple[Node, int]]] = {}    # (value, to NHWC): readers
    for s, i, v in _mismatches(steps, nhwc):
        if nhwc[v.name] or v.producer is not None:      # a model input is the readers' layout
            wanted.setdefault((v.name, not nhwc[v.name]), []).append((s.node, i))
    for v in _needs_model_layout(graph, nhwc):
        wanted.setdefault((v.name, False), []).extend(
            (c, i) for c in v.consumers if c.op in VIEW_OPS for i, u in enumerate(c.inputs)
            if u is v)
    if not wanted:
        return steps, nhwc
    for (name, to_nhwc), readers in wanted.items():
        v = graph.values[name]
        order = {id(n): k for k, n in enumerate(graph.nodes)}
        first = min(order[id(node)] for node, _ in readers)
        suffix = ".nhwc" if to_nhwc else ".nchw"
        out = graph.value(graph.fresh_name(name + suffix), v.shape, v.dtype)
        node = graph.add_node(CONVERT, [v], [out], {"to_nhwc": to_nhwc},
                              name=graph.fresh_name(name + ".to" + suffix), index=first)
        for reader, i in readers:
            graph.set_input(reader, i, out)
        n, c, h, w = (int(d) for d in v.shape)
        task = MoveTask((n, c, h, w), (n, h, w, c), ((0, 0, 1), (3, 0, 1), (1, 0, 1), (2, 0, 1)),
                        v.dtype.name) if to_nhwc else \
            MoveTask((n, h, w, c), (n, c, h, w), ((0, 0, 1), (2, 0, 1), (3, 0, 1), (1, 0, 1)),
                     v.dtype.name)
        task = half(task) if precision == "fp16" else task
        steps.append(GpuStep(node, task, *_choice(task, target, None)))
    order = {id(n): k for k, n in enumerate(graph.nodes)}
    steps = sorted(steps, key=lambda s: order[id(s.node)])
    return steps, _layouts(graph, steps)


def _views(graph: Graph, nhwc: dict[str, bool]) -> dict[str, tuple]:
    """Reshape-like nodes as aliases of their input's bytes; refused where the layouts differ."""
    aliases = {}
    for node in graph.nodes:
        if node.op not in VIEW_OPS:
            continue
        src, out = node.inputs[0], node.outputs[0]
        if src.data is not None:
            raise WoodpeckerError(f"node {node.name} ({node.op}): a view of a constant is not "
                                  "planned on the GPU (constant folding leaves none)")
        if nhwc[src.name] and (src.shape[2], src.shape[3]) != (1, 1):
            raise WoodpeckerError(f"node {node.name} ({node.op}) reshapes an NHWC value whose "
                                  "bytes differ from NCHW's (convert_layouts converts these)")
        aliases[out.name] = (src.name, VIEW, 0)
    return aliases


def _stored_bytes(v: Value, precision: str) -> int:
    """A value's bytes on the device: float32 ones in half of them in an fp16 plan."""
    n = int(np.prod(v.shape, dtype=np.int64)) * v.dtype.itemsize
    return n // 2 if precision == "fp16" and v.dtype == np.float32 else n


class _Weights:
    """The plan's weights.bin being laid out: each constant at the next WEIGHT_ALIGN offset."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, np.ndarray]] = []
        self.bytes = 0

    def refs(self, args: list, shapes: list, run_time: list[str], store) -> list[dict]:
        """Argument references of a step: a run-time value by name, or a constant added
        (float32 in the plan's float type, reshaped to the kernel's view where sizes agree)."""
        names, refs = iter(run_time), []
        for a, shape in zip(args, shapes, strict=True):
            shape = tuple(shape)
            if a is None:
                refs.append({"value": next(names), "shape": list(shape)})
                continue
            a = np.ascontiguousarray(a, store if a.dtype == np.float32 else a.dtype)
            if tuple(a.shape) != shape and a.size == int(np.prod(shape)):
                a = a.reshape(shape)
            refs.append({"weight": len(self.entries), "shape": list(a.shape)})
            self.entries.append((self.bytes, a))
            self.bytes += -(-a.nbytes // WEIGHT_ALIGN) * WEIGHT_ALIGN
        return refs


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


def _arg_shapes(module, task: Task) -> list[tuple[int, ...]]:
    """Each kernel argument's shape as the kernel reads it, then the output's."""
    shapes = [a.shape for a in task.random_inputs(0)] + [tuple(task.out_shape)]
    views = module.views(task) or [None] * len(shapes)
    return [tuple(v) if v is not None else s for s, v in zip(shapes, views, strict=True)]


def assemble_gpu_plan(graph: Graph, target: Target, folder: "str | Path",
                      configs: dict | None = None, progress=None,
                      precision: str = "fp32", library: Collection[str] = ()) -> Path:
    """Write the GPU plan of `graph` for `target` to `folder` (see the module contract)."""
    if target.device is None:
        raise WoodpeckerError("a GPU plan needs a cuda target")
    folder = Path(folder)
    steps = gpu_steps(graph, target, configs, precision, library)
    store = np.float16 if precision == "fp16" else np.float32
    steps, _ = convert_layouts(graph, steps, target, precision)
    nhwc = device_layouts(graph, steps)
    aliases = _views(graph, nhwc)
    arena = plan_arena(graph, None, aliases, nbytes=lambda v: _stored_bytes(v, precision))
    (folder / "kernels").mkdir(parents=True, exist_ok=True)
    blob, records = _Weights(), []
    for k, step in enumerate(steps):
        module = GPU_TEMPLATES[step.template]
        built = build_gpu(module, step.task, step.config, target)
        library = kernel_library(built)
        kernel = f"kernels/{library.name}"
        shutil.copyfile(library, folder / kernel)
        # a movement's index operands are in its task; its one argument is the data
        present = [0] if isinstance(step.task, MoveTask) else \
            [i for i, v in enumerate(step.node.inputs) if v is not None]
        constants = [None if step.node.inputs[i].data is None else step.task.constant(step.node, i)
                     for i in present]
        args = kernel_arguments(module, step.task, step.config, constants)
        run_time = [step.node.inputs[i].name for i in present
                    if step.node.inputs[i].data is None]
        shapes = _arg_shapes(module, step.task)
        records.append({"node": step.node.name, "template": step.template, "config": step.config,
                        "task": step.task.key, "kernel": kernel, "sm": built.sm,
                        "sha256": sha256_file(folder / kernel),
                        "args": blob.refs(args, shapes[:-1], run_time, store),
                        "out": {"value": step.node.outputs[0].name, "shape": list(shapes[-1])}})
        if any(a is not c for a, c in zip(args, constants)):    # the library's own weights
            records[-1]["library_args"] = blob.refs(
                constants, [a.shape for a in step.task.random_inputs(0)], run_time, store)
        if step.engine == LIBRARY:
            records[-1]["engine"] = LIBRARY
        if step.node.op == CONVERT:          # the model's value itself, in its own layout
            records[-1]["layout_conversion"] = True
        if progress is not None:
            print(f"  GPU kernel {k + 1}/{len(steps)}: {step.node.name} on "
                  f"{step.template if step.engine != LIBRARY else LIBRARY}", file=progress)
    return _write(folder, graph, target, arena, aliases, records, blob.entries, blob.bytes,
                  nhwc, precision)


def _write(folder: Path, graph: Graph, target: Target, arena, aliases, records, weights,
           weight_bytes: int, nhwc: dict[str, bool], precision: str) -> Path:
    blob = bytearray(weight_bytes)
    for offset, a in weights:
        blob[offset:offset + a.nbytes] = a.tobytes()
    (folder / "weights.bin").write_bytes(bytes(blob))
    shutil.copyfile(cuda_runtime(target), folder / "runtime.so")
    def stored(v: Value) -> str:        # float tensors are half precision in an fp16 plan
        return "float16" if precision == "fp16" and v.dtype.name == "float32" else v.dtype.name

    values = {}
    for name, offset in arena.offsets.items():
        v = graph.values[name]
        values[name] = {"offset": offset, "dtype": stored(v), "nhwc": nhwc[name],
                        "shape": list(device_shape(v, nhwc[name]))}
    for v in graph.inputs:
        values[v.name] = {"input": True, "dtype": stored(v), "nhwc": nhwc[v.name],
                          "shape": list(device_shape(v, nhwc[v.name]))}
    for name, (whole, _, _) in aliases.items():
        v = graph.values[name]
        values[name] = {"alias": whole, "dtype": stored(v), "nhwc": False,
                        "shape": list(v.shape)}
    doc = {
        "format": FORMAT, "version": VERSION, "target": target.to_json(),
        "precision": precision,
        "runtime": {"file": "runtime.so", "sha256": sha256_file(folder / "runtime.so")},
        "weights": {"file": "weights.bin", "sha256": sha256_file(folder / "weights.bin"),
                    "bytes": weight_bytes,
                    "entries": [{"offset": o, "dtype": a.dtype.name, "shape": list(a.shape)}
                                for o, a in weights]},
        "arena_bytes": arena.size, "values": values, "steps": records,
        "inputs": [{"name": v.name, "dtype": v.dtype.name, "shape": list(v.shape),
                    "to_device": [0, 2, 3, 1] if nhwc[v.name] else None} for v in graph.inputs],
        "outputs": [{"name": v.name, "dtype": v.dtype.name, "shape": list(v.shape),
                     "from_device": [0, 3, 1, 2] if nhwc[v.name] else None}
                    for v in graph.outputs],
    }
    tmp = folder / f".plan.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, folder / "plan.json")
    return folder

