"""Measuring a batch of built GPU kernel candidates on the machine with the device (issue 54:
the tuner's remote runner; AutoTVM's RPC Runner, with the batch as the unit of transfer).

Contract: a batch folder (tune/gpu_batch.py writes it on the build machine) holds `batch.json`
— the target, the runtime library and per candidate its task key, template, config, kernel
library and sha256, and the transforms its template applies to constants (a Winograd kernel's
weights: tasks/transforms.py, applied here to the same seeded inputs) — and the files.
`measure_batch(folder)` checks every file, runs each candidate on the task's seeded random
inputs, compares its output with the task's reference (numpy, on this host's CPU: within
`TOLERANCE` of the output's scale for float32, ten times that for float16 storage) and times it
by CUDA events (median of `runs` after `warmup`); results go to `timings.json` beside the
batch, one entry per candidate — milliseconds, or the error that disqualifies it. numpy, ctypes
and the plan runtime only: the device needs no Halide. A candidate of engine "library" (no file)
is the task computed by the library (runtime/gpu_torch.py: cuDNN, cuBLAS), checked and timed
the same way, so the per-node choice between it and the generated kernels is made on
measurements of the one device; without torch it is reported as an error, never chosen. `python
-m woodpecker.runtime.gpu_measure BATCH` is the command a remote runner runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from woodpecker.errors import PlanError
from woodpecker.files import inside, verified
from woodpecker.gpu.runtime import timed
from woodpecker.runtime.gpu_plan import LIBRARY
from woodpecker.tasks import task_from_key, transforms
from woodpecker.tasks.transforms import Transform

FORMAT = "woodpecker-gpu-batch"
TOLERANCE = 1e-4


def stored_float(task) -> type:
    """The type a task stores its float tensors in: float16 in an fp16 GPU plan."""
    return np.float16 if getattr(task, "dtype", "") == "float16" else np.float32


def task_inputs(task) -> list[np.ndarray]:
    """The task's seeded inputs, float ones in the type the task stores them in."""
    return [a.astype(stored_float(task)) if a.dtype == np.float32 else a
            for a in task.random_inputs(0)]


def device_kernel(folder: Path, library: Path, task, inputs):
    """A kernel library on the device with `inputs` uploaded: (launch, fetch, timer)."""
    from woodpecker.gpu.runtime import CudaRuntime, GpuKernel, Timer

    runtime = CudaRuntime(folder / "runtime.so")
    out = np.empty(task.out_shape, stored_float(task))
    views = []
    for a in [*inputs, out]:
        view = runtime.view(runtime.alloc(a.nbytes), 0, a.shape, a.dtype)
        if a is not out:
            runtime.upload(view, a)
        views.append(view)
    launch = GpuKernel(runtime, library, len(views)).bind(views)

    def fetch() -> np.ndarray:
        runtime.synchronize()
        return runtime.download(views[-1], out)
    return launch, fetch, Timer(runtime)


def open_batch(folder: "str | Path") -> dict:
    folder = Path(folder)
    try:
        batch = json.loads((folder / "batch.json").read_text())
    except (OSError, ValueError) as e:
        raise PlanError(f"GPU batch: cannot read {folder / 'batch.json'}: {e}") from None
    if batch.get("format") != FORMAT:
        raise PlanError(f"GPU batch: {folder} holds no batch of GPU kernels")
    verified(inside(folder, batch["runtime"]["file"], "runtime"), batch["runtime"]["sha256"],
             "runtime")
    for c in batch["candidates"]:
        if c.get("engine") == LIBRARY:
            continue
        verified(inside(folder, c["file"], "kernel"), c["sha256"], c["file"])
        for spec in c.get("transforms", {}).values():
            try:
                Transform.from_json(spec)
            except ValueError as e:
                raise PlanError(f"GPU batch: {e}") from None
    return batch


def measure_batch(folder: "str | Path", runs: int = 20, warmup: int = 3, kernel=None,
                  progress=None, library_device: str = "cuda") -> list[dict]:
    """Check and time every candidate of the batch at `folder` (see the module contract);
    `kernel(folder, candidate, task, inputs) -> (launch, fetch, timer)` runs one elsewhere
    than on the device (a host check; default: `device_kernel`), `library_device` the torch
    candidates ("cpu" for a host check)."""
    folder = Path(folder)
    batch = open_batch(folder)
    results, cache = [], {}
    for k, cand in enumerate(batch["candidates"]):
        if cand["task"] not in cache:
            task = task_from_key(cand["task"])
            inputs = task_inputs(task)
            cache[cand["task"]] = (task, inputs, task.reference(
                [a.astype(np.float32) if a.dtype == np.float16 else a for a in inputs]))
        task, inputs, ref = cache[cand["task"]]
        row = {key: cand[key] for key in ("task", "template", "config")}
        try:
            if cand.get("engine") == LIBRARY:
                from woodpecker.runtime.gpu_torch import library_candidate

                launch, fetch, timer = library_candidate(task, inputs, library_device)
            else:
                launch, fetch, timer = (kernel or _device)(folder, cand, task,
                                                           _arguments(cand, inputs))
            launch()
            got = fetch().astype(np.float32)
            err = float(np.max(np.abs(got - ref)))
            bar = TOLERANCE * (10 if stored_float(task) is np.float16 else 1) \
                * max(1.0, float(np.max(np.abs(ref))))
            row["max_abs"] = err
            if not err <= bar:
                row["error"] = f"output off the reference by {err:.3g} (bar {bar:.3g})"
            else:
                row["ms"] = float(np.median(timed(launch, timer, runs, warmup)))
        except Exception as e:            # noqa: BLE001 - a crashing candidate is reported
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        results.append(row)
        if progress is not None:
            print(f"  candidate {k + 1}/{len(batch['candidates'])}: "
                  f"{row.get('ms', row.get('error'))}", file=progress, flush=True)
    (folder / "timings.json").write_text(json.dumps(
        {"format": FORMAT + "-timings", "batch": batch["id"], "results": results}, indent=1))
    return results


def _arguments(cand: dict, inputs: list) -> list:
    """The task's inputs with those the candidate's template transforms (a Winograd
    kernel's weights: tasks/transforms.py) transformed."""
    args = list(inputs)
    for i, spec in cand.get("transforms", {}).items():
        args[int(i)] = transforms.apply(Transform.from_json(spec), args[int(i)])
    return args


def _device(folder: Path, cand: dict, task, inputs):
    return device_kernel(folder, inside(folder, cand["file"], "kernel"), task, inputs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="check and time a batch of GPU kernels")
    ap.add_argument("batch")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args(argv)
    results = measure_batch(args.batch, args.runs, progress=sys.stdout)
    ok = sum(1 for r in results if "ms" in r)
    print(f"{ok} of {len(results)} candidates correct and timed -> "
          f"{Path(args.batch) / 'timings.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
