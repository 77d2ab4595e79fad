"""Assembling a GPU plan (issue 54: build here, run there): a graph after the passes becomes a
folder the device runs with numpy and ctypes alone (runtime/gpu_plan.py).

Contract: `assemble_gpu_plan(graph, target, folder, configs)` maps every node to a GPU
template of engines/halide/gpu (`GPU_TEMPLATES`, the first that supports its task) with its
tuned config from `configs` (task key → config) or the template's first valid seed, builds
each kernel for `target` (PTX of the device's capability in a shared library), and writes:
`plan.json` (last, under a temporary name moved into place), `runtime.so` (Halide's CUDA
runtime and cuda_glue.c), `kernels/<digest>.so`, `weights.bin`. A node no GPU template
computes is one WoodpeckerError naming every such node.

Device layout: 4-d activations are NHWC on the device (the templates' layout), other values
as they are; a model input read only by convs that read NCHW (a stem conv) stays NCHW, any
other 4-d input is transposed on the host before its copy, and a 4-d output after its copy —
so the only transfers are the plan's inputs and outputs. A Flatten, Reshape, Squeeze or
Unsqueeze is a view of its input's bytes (no kernel) where those bytes mean the same in both
layouts (not 4-d, or one pixel: after a global pool); else it is refused.

Activations share one device allocation at offsets from SERENITY's arena planner
(schedule/arena.py, the CPU plans' own), with views as aliases; weights lie in a second one,
copied once at load.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from woodpecker.engines.halide.gpu import conv, dense, depthwise, elementwise, pool
from woodpecker.engines.halide.gpu.build import build_gpu
from woodpecker.engines.halide.gpu.runtime_build import cuda_runtime, kernel_library
from woodpecker.errors import WoodpeckerError
from woodpecker.files import sha256_file
from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.schedule.aliases import VIEW
from woodpecker.schedule.arena import plan_arena
from woodpecker.target import Target
from woodpecker.tasks import Task, task_from_node
from woodpecker.tasks.conv import ConvTask

FORMAT, VERSION = "woodpecker-gpu-plan", 1
GPU_TEMPLATES = {"conv": conv, "depthwise": depthwise, "dense": dense, "pool": pool,
                 "elementwise": elementwise}
VIEW_OPS = frozenset({"Flatten", "Reshape", "Squeeze", "Unsqueeze"})
WEIGHT_ALIGN = 256        # cudaMalloc's alignment: every weight starts on one


@dataclass(frozen=True)
class GpuStep:
    node: Node
    task: Task
    template: str
    config: dict


def gpu_steps(graph: Graph, target: Target, configs: dict | None = None) -> list[GpuStep]:
    """Each computing node's task, template and config; one WoodpeckerError naming every node
    no GPU template computes."""
    configs = configs or {}
    steps, missing = [], []
    for node in graph.nodes:
        if node.op in VIEW_OPS:
            continue
        task = task_from_node(node)
        choice = None if task is None else _choice(task, target, configs.get(task.key))
        if choice is None:
            missing.append(f"{node.name} ({node.op})")
        else:
            steps.append(GpuStep(node, task, *choice))
    if missing:
        raise WoodpeckerError(f"no GPU kernel computes {len(missing)} node(s): "
                              f"{', '.join(missing[:8])}{' …' if len(missing) > 8 else ''}")
    return steps


def _choice(task: Task, target: Target, tuned: dict | None) -> tuple[str, dict] | None:
    for name, module in GPU_TEMPLATES.items():
        if task.kind != module.KIND or not module.supports(task):
            continue
        space = module.space(task, target.device)
        if tuned is not None and space.is_valid(tuned):
            return name, dict(tuned)
        if space.seeds:
            return name, dict(space.seeds[0])
        first = next(iter(space.valid_configs()), None)
        if first is not None:
            return name, first
    return None


def device_shape(v: Value, nchw: bool = False) -> tuple[int, ...]:
    """The shape `v` has on the device: NHWC for 4-d values (unless `nchw`)."""
    shape = tuple(int(d) for d in v.shape)
    if len(shape) == 4 and not nchw:
        return (shape[0], shape[2], shape[3], shape[1])
    return shape


def _views(graph: Graph) -> dict[str, tuple]:
    """Reshape-like nodes as aliases of their input's bytes; refused where the layouts differ."""
    aliases = {}
    for node in graph.nodes:
        if node.op not in VIEW_OPS:
            continue
        src, out = node.inputs[0], node.outputs[0]
        if src.data is not None or src.producer is None:
            raise WoodpeckerError(f"node {node.name} ({node.op}): a view of a constant or a "
                                  "model input is not planned on the GPU")
        if len(src.shape) == 4 and (src.shape[2], src.shape[3]) != (1, 1) or len(out.shape) == 4:
            raise WoodpeckerError(f"node {node.name} ({node.op}) reshapes a 4-d value whose "
                                  "NHWC bytes differ from NCHW's; no GPU kernel transposes yet")
        aliases[out.name] = (src.name, VIEW, 0)
    return aliases


def _arg_shapes(module, task: Task) -> list[tuple[int, ...]]:
    """Each kernel argument's shape as the kernel reads it, then the output's."""
    shapes = [a.shape for a in task.random_inputs(0)] + [tuple(task.out_shape)]
    views = module.views(task) or [None] * len(shapes)
    return [tuple(v) if v is not None else s for s, v in zip(shapes, views, strict=True)]


def assemble_gpu_plan(graph: Graph, target: Target, folder: "str | Path",
                      configs: dict | None = None, progress=None) -> Path:
    """Write the GPU plan of `graph` for `target` to `folder` (see the module contract)."""
    if target.device is None:
        raise WoodpeckerError("a GPU plan needs a cuda target")
    folder = Path(folder)
    steps = gpu_steps(graph, target, configs)
    aliases = _views(graph)
    arena = plan_arena(graph, None, aliases)
    nchw_inputs = {v.name for v in graph.inputs
                   if v.consumers and all(isinstance(t, ConvTask) and t.reads_nchw
                                          for t in (s.task for s in steps if v in s.node.inputs))}
    (folder / "kernels").mkdir(parents=True, exist_ok=True)
    weights, weight_bytes, records = [], 0, []
    for k, step in enumerate(steps):
        module = GPU_TEMPLATES[step.template]
        built = build_gpu(module, step.task, step.config, target)
        library = kernel_library(built)
        kernel = f"kernels/{library.name}"
        shutil.copyfile(library, folder / kernel)
        present = [i for i, v in enumerate(step.node.inputs) if v is not None]
        constants = [None if step.node.inputs[i].data is None else step.task.constant(step.node, i)
                     for i in present]
        args = module.arguments(step.task, step.config, constants)
        shapes = _arg_shapes(module, step.task)
        run_time = iter(step.node.inputs[i] for i in present if step.node.inputs[i].data is None)
        refs = []
        for a, shape in zip(args, shapes[:-1], strict=True):
            if a is None:
                refs.append({"value": next(run_time).name, "shape": list(shape)})
                continue
            a = np.ascontiguousarray(a)
            if tuple(a.shape) != shape and a.size == int(np.prod(shape)):
                a = a.reshape(shape)
            refs.append({"weight": len(weights), "shape": list(a.shape)})
            weights.append((weight_bytes, a))
            weight_bytes += -(-a.nbytes // WEIGHT_ALIGN) * WEIGHT_ALIGN
        records.append({"node": step.node.name, "template": step.template, "config": step.config,
                        "task": step.task.key, "kernel": kernel, "sm": built.sm,
                        "sha256": sha256_file(folder / kernel), "args": refs,
                        "out": {"value": step.node.outputs[0].name, "shape": list(shapes[-1])}})
        if progress is not None:
            print(f"  GPU kernel {k + 1}/{len(steps)}: {step.node.name} on {step.template}",
                  file=progress)
    return _write(folder, graph, target, arena, aliases, records, weights, weight_bytes,
                  nchw_inputs)


def _write(folder: Path, graph: Graph, target: Target, arena, aliases, records, weights,
           weight_bytes: int, nchw_inputs: set[str]) -> Path:
    blob = bytearray(weight_bytes)
    for offset, a in weights:
        blob[offset:offset + a.nbytes] = a.tobytes()
    (folder / "weights.bin").write_bytes(bytes(blob))
    shutil.copyfile(cuda_runtime(target), folder / "runtime.so")
    values = {}
    for name, offset in arena.offsets.items():
        v = graph.values[name]
        values[name] = {"offset": offset, "dtype": v.dtype.name, "shape": list(device_shape(v))}
    for v in graph.inputs:
        values[v.name] = {"input": True, "dtype": v.dtype.name,
                          "shape": list(device_shape(v, v.name in nchw_inputs))}
    for name, (whole, _, _) in aliases.items():
        v = graph.values[name]
        values[name] = {"alias": whole, "dtype": v.dtype.name, "shape": list(v.shape)}
    doc = {
        "format": FORMAT, "version": VERSION, "target": target.to_json(),
        "runtime": {"file": "runtime.so", "sha256": sha256_file(folder / "runtime.so")},
        "weights": {"file": "weights.bin", "sha256": sha256_file(folder / "weights.bin"),
                    "bytes": weight_bytes,
                    "entries": [{"offset": o, "dtype": a.dtype.name, "shape": list(a.shape)}
                                for o, a in weights]},
        "arena_bytes": arena.size, "values": values, "steps": records,
        "inputs": [{"name": v.name, "dtype": v.dtype.name, "shape": list(v.shape),
                    "to_device": [0, 2, 3, 1] if len(v.shape) == 4 and v.name not in
                    nchw_inputs else None} for v in graph.inputs],
        "outputs": [{"name": v.name, "dtype": v.dtype.name, "shape": list(v.shape),
                     "from_device": [0, 3, 1, 2] if v.name in values and len(v.shape) == 4
                     and "alias" not in values[v.name] else None} for v in graph.outputs],
    }
    tmp = folder / f".plan.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, folder / "plan.json")
    return folder


def plan_digest(folder: "str | Path") -> str:
    """A digest of a plan's JSON (what the device script checks it ran)."""
    return hashlib.sha256((Path(folder) / "plan.json").read_bytes()).hexdigest()[:16]
