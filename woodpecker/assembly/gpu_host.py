"""A GPU plan run on this CPU: the device runner's own plan walk (runtime/gpu_plan.py) over a
numpy arena with the plan's offsets, each step's template and config built for the host with
the same loop nest (`HostMapping`, engines/halide/gpu/build.py). A machine without a GPU so
checks a GPU plan's layouts, offsets, views, weights and kernels against ONNX Runtime (issue
54's device-free CI); only the device itself can say how fast it runs. `host_kernel` does the
same for one candidate of a tuning batch (runtime/gpu_measure.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from woodpecker.assembly.gpu_steps import GPU_TEMPLATES
from woodpecker.engines.halide.gpu.build import build_host
from woodpecker.runtime.gpu_measure import stored_float
from woodpecker.tasks import task_from_key


class HostMemory:
    """runtime/gpu_plan.Memory on host memory: allocations are byte arrays, views numpy views
    at the plan's offsets (so two values the arena overlaps really share bytes here too)."""

    def alloc(self, nbytes: int) -> np.ndarray:
        return np.zeros(max(nbytes, 1), np.uint8)

    def view(self, memory: np.ndarray, offset: int, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return memory[offset:offset + nbytes].view(dtype).reshape(shape)

    def upload(self, view: np.ndarray, array: np.ndarray) -> None:
        view[...] = array

    def download(self, view: np.ndarray, out: np.ndarray) -> np.ndarray:
        out[...] = view
        return out

    def kernel(self, folder: Path, step: dict, views: list):
        module = GPU_TEMPLATES[step["template"]]
        run = build_host(module, task_from_key(step["task"]), step["config"])
        inputs, out = views[:-1], views[-1]

        def launch() -> None:
            run(*inputs, out=out)

        return launch

    def tensor(self, torch, view: np.ndarray):
        return torch.from_numpy(view)

    def timer(self) -> "WallTimer":
        return WallTimer()

    # streams and events: the host runs every step in turn, so ordering is given
    def stream(self) -> int:
        return 0

    current_stream = stream

    def event(self) -> None:
        return None

    def record(self, event, stream: int) -> None:
        pass

    def wait(self, stream: int, event) -> None:
        pass

    def use_stream(self, stream: int) -> None:
        pass

    def synchronize(self) -> None:
        pass


class WallTimer:
    """Wall-clock milliseconds around a host call: the host check's stand-in for events."""

    def start(self) -> None:
        self.t = time.perf_counter()

    def stop(self) -> float:
        return (time.perf_counter() - self.t) * 1e3


def host_kernel(folder: Path, candidate: dict, task, inputs):
    """A batch candidate (runtime/gpu_measure.py) built for this CPU with the same loop nest:
    (launch, fetch, timer) — a batch's own check without a device."""
    run = build_host(GPU_TEMPLATES[candidate["template"]], task, candidate["config"])
    out = np.empty(task.out_shape, stored_float(task))

    def launch() -> None:
        run(*inputs, out=out)

    return launch, (lambda: out), WallTimer()
