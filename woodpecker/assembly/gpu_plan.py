"""Assembling a GPU plan (issue 54: build here, run there): a graph after the passes becomes a
folder the device runs with numpy and ctypes alone (runtime/gpu_plan.py).

Contract: `assemble_gpu_plan(graph, target, folder, configs)` takes each node's step
(assembly/gpu_steps.py: its template and config, or the library), converts layouts where a
value is read in the other one and places every value (assembly/gpu_layouts.py), builds each
kernel for `target` (PTX of the device's capability in a shared library), and writes:
`plan.json` (last; signed under this user's plan key as a CPU plan is, runtime/trust.py),
`runtime.so` (Halide's CUDA runtime and cuda_glue.c), `kernels/<digest>.so`, `weights.bin` —
each through an exclusive temporary moved into place, never through a planted link
(files.py). A node no GPU template
computes is one WoodpeckerError naming every such node. A model input a stem conv reads stays
NCHW; an NHWC input is transposed on the host before its copy, an NHWC output after it — so
the only transfers are the plan's inputs and outputs.

Library steps (`library`: task keys, or EVERY_TASK): a step whose task is listed runs on
torch (cuDNN, cuBLAS: runtime/gpu_torch.py) over the same argument views, recorded as
`"engine": "library"`; its kernel is built and kept too, so the plan stays checkable on the
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
from collections.abc import Collection
from pathlib import Path

import numpy as np

from woodpecker.assembly.gpu_layouts import convert_layouts, device_layouts, device_shape, views
from woodpecker.assembly.gpu_steps import (
    CONVERT,
    GPU_TEMPLATES,
    HOST,
    LIBRARY,
    GpuStep,
    gpu_steps,
    kernel_arguments,
)
from woodpecker.engines.halide.gpu.build import build_gpu
from woodpecker.engines.halide.gpu.runtime_build import cuda_runtime, kernel_library
from woodpecker.errors import WoodpeckerError
from woodpecker.files import install, sha256_file, write_bytes
from woodpecker.ir.graph import Graph, Value
from woodpecker.runtime.gpu_host_ops import encode_attrs
from woodpecker.runtime.gpu_plan import FORMAT, VERSION
from woodpecker.runtime.trust import SIGNATURE_FIELD, signature, unsigned_bytes
from woodpecker.schedule.arena import plan_arena
from woodpecker.target import Target
from woodpecker.tasks import Task
from woodpecker.tasks.movement import MoveTask

WEIGHT_ALIGN = 256        # cudaMalloc's alignment: every weight starts on one


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
            a = np.ascontiguousarray(a, store if a.dtype == np.float32 and store is not None
                                     else a.dtype)
            if tuple(a.shape) != shape and a.size == int(np.prod(shape)):
                a = a.reshape(shape)
            refs.append({"weight": len(self.entries), "shape": list(a.shape)})
            self.entries.append((self.bytes, a))
            self.bytes += -(-a.nbytes // WEIGHT_ALIGN) * WEIGHT_ALIGN
        return refs


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
    aliases = views(graph, nhwc)
    arena = plan_arena(graph, None, aliases, nbytes=lambda v: _stored_bytes(v, precision))
    (folder / "kernels").mkdir(parents=True, exist_ok=True)
    blob, records = _Weights(), []
    for k, step in enumerate(steps):
        if step.engine == HOST:
            records.append(_host_record(step, blob, nhwc))
            if progress is not None:
                print(f"  GPU step {k + 1}/{len(steps)}: {step.node.name} ({step.node.op}) on "
                      "the host (no GPU kernel computes it: two copies)", file=progress)
            continue
        module = GPU_TEMPLATES[step.template]
        built = build_gpu(module, step.task, step.config, target)
        shared = kernel_library(built)
        kernel = f"kernels/{shared.name}"
        install(shared, folder / kernel, folder)
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


def _host_record(step: GpuStep, blob: "_Weights", nhwc: dict[str, bool]) -> dict:
    """A host step (runtime/gpu_host_ops.py): its op, attributes, arguments (constants in
    their own types) and outputs, all in the model's layout."""
    node = step.node
    try:
        attrs = encode_attrs(node.attrs)
    except ValueError as e:
        raise WoodpeckerError(f"node {node.name} ({node.op}) runs on the host, but its {e} "
                              "cannot be written into the plan") from None
    args = []
    for v in node.inputs:
        if v is None:
            args.append({"none": True})
        elif v.data is not None:
            args.extend(blob.refs([np.asarray(v.data)], [v.data.shape], [], None))
        else:
            assert not nhwc[v.name], v.name      # convert_layouts moved it to its own layout
            args.append({"value": v.name, "shape": list(v.shape)})
    outs = [{"value": v.name, "shape": list(v.shape)} for v in node.outputs]
    return {"node": node.name, "template": HOST, "engine": HOST, "task": step.task.key,
            "op": node.op, "attrs": attrs, "args": args, "out": outs[0], "outs": outs}


def _write(folder: Path, graph: Graph, target: Target, arena, aliases, records, weights,
           weight_bytes: int, nhwc: dict[str, bool], precision: str) -> Path:
    blob = bytearray(weight_bytes)
    for offset, a in weights:
        blob[offset:offset + a.nbytes] = a.tobytes()
    write_bytes(folder / "weights.bin", bytes(blob), folder)
    install(cuda_runtime(target), folder / "runtime.so", folder)
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
    # signed as a CPU plan is (runtime/trust.py): this user's GPU plans load as they are
    doc[SIGNATURE_FIELD] = signature(unsigned_bytes(doc))
    write_bytes(folder / "plan.json", json.dumps(doc, indent=1).encode(), folder)
    return folder

