"""Compiling a model into a GPU plan (issue 54): import, the graph passes CPU plans take (less the
depthwise + pointwise pairing, `GPU_PASSES`), then
assembly/gpu_plan.py for a `cuda` target — kernels built here, to run on the device
(runtime/gpu_plan.py; build here, run there).

Contract: `compile_gpu(model, folder, target="cuda:h100", configs=None, precision="fp32")`
writes the plan folder and returns it; `configs` maps task keys to a config (for the first
template it is valid for) or a GpuChoice (a template and its config; none: the first
template's first seed); `precision="fp16"` stores every float tensor in half precision.
`tuning_log`: a log the device's batch timings were read into (tune/gpu_batch.py): each
task's fastest candidate — a generated kernel's config, or the library (torch: cuDNN,
cuBLAS), whose tasks join `library` (task keys, or assembly/gpu_steps.EVERY_TASK) and run as
library steps. `check_on_host(folder, feeds)` runs the plan's walk on this CPU
(assembly/gpu_host.py) and returns its outputs — what the tests compare with ONNX Runtime.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from woodpecker.assembly.gpu_host import HostMemory
from woodpecker.assembly.gpu_plan import assemble_gpu_plan
from woodpecker.assembly.gpu_steps import EVERY_TASK
from woodpecker.errors import WoodpeckerError
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.passes import DEFAULT, optimize
from woodpecker.runtime.gpu_plan import GpuPlan
from woodpecker.target import Target
from woodpecker.tune.gpu_batch import tuned_choices
from woodpecker.tune.records import TuningLog

# The CPU plans' default passes without the depthwise + pointwise pairing (its conv chains and
# attention fusions are not in DEFAULT either): the GPU templates compute single convs; and
# with every float element-wise group of rank other than 4 (a transformer's residual sums),
# which the GPU element-wise template computes in the tensors' own layout.
GPU_PASSES = tuple(q for p in DEFAULT if p != "fuse_separable"
                   for q in ((p, "fuse_float_rows") if p == "fuse_row_elementwise" else (p,)))


def compile_gpu(model: Any, folder: "str | Path", target: "str | Target" = "cuda:h100",
                configs: dict | None = None, input_shapes: dict | None = None,
                progress: TextIO | None = None, precision: str = "fp32",
                tuning_log: "str | Path | None" = None,
                library: Collection[str] = ()) -> Path:
    tgt = Target.parse(target)
    if tgt.device is None:
        raise WoodpeckerError(f"a GPU plan needs a cuda target, not {target!r}")
    if tuning_log is not None:
        choices = tuned_choices(TuningLog(tuning_log, tgt.record_key))
        configs = {**{k: c for k, c in choices.items() if not c.library}, **(configs or {})}
        if library is not EVERY_TASK:
            library = {*library, *(k for k, c in choices.items() if c.library)}
    return assemble_gpu_plan(gpu_graph(model, input_shapes), tgt, folder, configs, progress,
                             precision, library)


def gpu_graph(model: Any, input_shapes: dict | None = None):
    """The model imported and through `GPU_PASSES`: what GPU plans and batches are built from."""
    graph = import_onnx(load_model_proto(model), input_shapes, None)
    optimize(graph, GPU_PASSES)
    return graph


def check_on_host(folder: "str | Path", feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The plan's outputs for `feeds`, computed on this CPU by the same walk."""
    return GpuPlan.open(folder).session(HostMemory()).run(feeds)
