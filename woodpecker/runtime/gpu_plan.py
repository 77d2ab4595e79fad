"""Loading and running a GPU plan (assembly/gpu_plan.py writes it) with numpy and ctypes
alone: no Halide, onnx or compiler on the device (issue 54: build here, run there).

Contract: `GpuPlan.open(folder, digest=None, trust=False)` reads and checks a plan without
touching a device — its format, every file against its sha256, each kernel's PTX capability
against the target's, every offset and shape within its allocation — and raises one PlanError
line for anything missing, edited or inconsistent. A GPU plan is native code (its runtime and
kernels are shared libraries): as a CPU plan with kernels (runtime/trust.py), it opens only
pinned by `digest` (the sha256 of plan.json, read once), signed by this user's plan key, or
with `trust`. Every file it names lies inside its folder; the runtime and each kernel are
loaded from a sealed private copy of the very bytes whose sha256 was checked (files.py), and
weights.bin is read once and checked as read, so a writer racing the load changes nothing.
`plan.session()` refuses a host without the plan's device
(Target.incompatibility), then binds it: one allocation for the activations (the arena), one
for the weights (copied once), one per input; each step's kernel bound to its buffer views.
`session.run(feeds)` copies the inputs in (transposed on the host where the device layout
differs), launches every step on the runtime's stream, copies the outputs back; `time(feeds,
runs)` is CUDA-event milliseconds of the launches alone, per run.

Host steps (`"engine": "host"`, runtime/gpu_host_ops.py) run a node no GPU template computes by
its numpy reference between copies. Library steps (`"engine": "library"`) run on torch
(runtime/gpu_torch.py) over the same views; torch is imported only for a plan that has them, or
for `session.choose(feeds)`, which times every step both ways on this device and keeps the
faster (WPK §2.5's per-operator choice at load). `session.graph()` captures the walk as one
CUDA graph (through torch's graph API, so library steps' temporaries live in its private pool)
and returns its replay.

`session(memory=...)` takes another `Memory` (the Protocol below): assembly/gpu_host.py runs
the very same plan walk on this CPU, with the same offsets in a numpy arena and each step's
template built for the host, so a plan's layout, offsets, views and weights are checked
against ONNX Runtime on a machine without a GPU.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from woodpecker.config import DOS_RUNS, GPU_STREAMS
from woodpecker.errors import PlanError, WoodpeckerError
from woodpecker.files import inside, sealed_copy, verified, verified_bytes
from woodpecker.gpu.runtime import timed
from woodpecker.runtime.trust import signed_here, wanted_digest
from woodpecker.target import Target

if TYPE_CHECKING:
    from woodpecker.schedule.dos import Schedule

FORMAT, VERSION = "woodpecker-gpu-plan", 1
# a step's "engine": its generated kernel (the default, absent), the library (torch: cuDNN,
# cuBLAS; runtime/gpu_torch.py) or the host (its numpy reference; runtime/gpu_host_ops.py)
GENERATED, LIBRARY, HOST = "generated", "library", "host"
DTYPES = frozenset({"float32", "float16", "uint8", "int8", "int32", "int64"})


class Memory(Protocol):
    def alloc(self, nbytes: int) -> Any: ...

    def view(self, memory: Any, offset: int, shape, dtype) -> Any: ...

    def upload(self, view: Any, array: np.ndarray) -> None: ...

    def download(self, view: Any, out: np.ndarray) -> np.ndarray: ...

    def kernel(self, folder: Path, step: dict, views: list) -> Any: ...

    def tensor(self, torch, view: Any) -> Any: ...

    def timer(self) -> Any: ...

    def synchronize(self) -> None: ...


class DeviceMemory:
    """The device: CudaRuntime (gpu/runtime.py) and the plan's kernel libraries."""

    def __init__(self, plan: "GpuPlan") -> None:
        from woodpecker.gpu.runtime import CudaRuntime, DeviceError, GpuKernel, Timer

        self._kernel, self._timer, self.error = GpuKernel, Timer, DeviceError
        self._plan = plan
        try:
            self.rt = CudaRuntime(plan.native(plan.doc["runtime"]))
        except DeviceError as e:
            raise PlanError(f"cannot run this GPU plan here: {e}") from None
        self.alloc, self.view, self.upload = self.rt.alloc, self.rt.view, self.rt.upload
        self.download, self.synchronize = self.rt.download, self.rt.synchronize
        self.use_stream, self.current_stream = self.rt.use_stream, self.rt.current_stream
        self.stream, self.event = self.rt.stream, self.rt.event
        self.record, self.wait = self.rt.record, self.rt.wait

    def kernel(self, folder: Path, step: dict, views: list):
        library = self._plan.native({"file": step["kernel"], "sha256": step["sha256"]})
        return self._kernel(self.rt, library, len(views), name=step["kernel"]).bind(views)

    def tensor(self, torch, view):
        """A torch CUDA tensor over a view's device memory (no copy; the plan's launches and
        torch's both go on the legacy default stream, so they are ordered)."""
        return torch.as_tensor(_CudaArray(view), device="cuda")

    def timer(self):
        return self._timer(self.rt)


class _CudaArray:
    """A device view as `__cuda_array_interface__` (what torch.as_tensor wraps)."""

    def __init__(self, view) -> None:
        self.__cuda_array_interface__ = {
            "shape": tuple(view.shape), "typestr": view.dtype.str, "version": 3,
            "data": (int(view.buffer.device), False), "strides": None}


def _fail(why: str) -> PlanError:
    return PlanError(f"GPU plan: {why}")


def _nbytes(shape, dtype: str) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _torch():
    try:
        import torch
    except ImportError:
        raise PlanError("this GPU plan runs library steps on torch, which is not "
                        "installed here") from None
    return torch


class GpuPlan:
    def __init__(self, folder: Path, doc: dict) -> None:
        self.folder, self.doc = folder, doc
        self.target = Target.from_json(doc["target"])

    @classmethod
    def open(cls, folder: "str | Path", digest: str | None = None,
             trust: bool = False) -> "GpuPlan":
        folder = Path(folder)
        want = None if digest is None else wanted_digest(digest)
        try:
            data = inside(folder, "plan.json", "file").read_bytes()
        except OSError as e:
            raise _fail(f"cannot read {folder / 'plan.json'}: {e.strerror}") from None
        found = "sha256:" + hashlib.sha256(data).hexdigest()
        if want is not None and found != want:
            raise _fail(f"{folder} is not the plan you trusted: its digest is {found}, "
                        f"expected {want}")
        try:
            doc = json.loads(data)
        except ValueError as e:
            raise _fail(f"plan.json is not JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise _fail(f"{folder} holds no GPU plan")
        if doc.get("version") != VERSION:
            raise _fail(f"plan version {doc.get('version')!r}; this Woodpecker reads {VERSION}")
        try:
            plan = cls(folder, doc)
            plan._check()
        except (KeyError, TypeError, ValueError) as e:
            raise _fail(f"plan.json is malformed ({type(e).__name__}: {e})") from None
        if want is None and not trust:
            ok, why = signed_here(doc)
            if not ok:
                raise _fail(f"{folder} holds native code (its CUDA runtime and kernels) and "
                            f"{why}: a plan is a program — open it only if you trust where it "
                            f"came from, pinned by its digest ({found}: "
                            "GpuPlan.open(…, digest=)) or with trust=True")
        return plan

    def native(self, entry: dict) -> Path:
        """A path to a sealed private copy of the plan file `entry` names ({file, sha256}),
        made from the bytes checked against its sha256: what dlopen maps."""
        path = inside(self.folder, entry["file"], "file")
        return sealed_copy(verified_bytes(path, entry["sha256"], entry["file"]), path.name)

    def _file(self, entry: dict) -> Path:
        return verified(inside(self.folder, entry["file"], "file"), entry["sha256"],
                        entry["file"])

    def _check(self) -> None:
        doc = self.doc
        if self.target.device is None:
            raise _fail("its target has no GPU")
        self._file(doc["runtime"])
        weights = doc["weights"]
        if self._file(weights).stat().st_size != weights["bytes"]:
            raise _fail("weights.bin does not hold the bytes the plan says")
        for w in weights["entries"]:
            if w["offset"] < 0 or w["offset"] + _nbytes(w["shape"], w["dtype"]) > weights["bytes"]:
                raise _fail("a weight lies outside weights.bin")
        for name, v in doc["values"].items():
            if v["dtype"] not in DTYPES or any(int(d) < 1 for d in v["shape"]):
                raise _fail(f"value {name!r} has a bad type or shape")
            if "offset" in v and (v["offset"] < 0 or v["offset"] + _nbytes(v["shape"], v["dtype"])
                                  > doc["arena_bytes"]):
                raise _fail(f"value {name!r} lies outside the arena")
            if "alias" in v and doc["values"].get(v["alias"], {}).get("shape") is None:
                raise _fail(f"value {name!r} is a view of an unknown value")
        from woodpecker.gpu.devices import halide_capability

        sm = halide_capability(self.target.device.capability)
        for step in doc["steps"]:
            if step.get("engine") != HOST:
                self._file({"file": step["kernel"], "sha256": step["sha256"]})
                if step["sm"] != sm:
                    raise _fail(f"kernel {step['kernel']} is PTX for sm_{step['sm']}, the "
                                f"target's is sm_{sm}")
            for ref in (*step["args"], *step.get("library_args", ()), step["out"],
                        *step.get("outs", ())):
                if "none" in ref:
                    continue
                if "weight" in ref and not 0 <= ref["weight"] < len(weights["entries"]):
                    raise _fail(f"step {step['node']!r} reads a weight the plan lacks")
                name = ref.get("value")
                if name is not None and name not in doc["values"]:
                    raise _fail(f"step {step['node']!r} reads unknown value {name!r}")

    @property
    def device(self):
        return self.target.device

    def session(self, memory: "Memory | None" = None) -> "GpuSession":
        """The plan bound to this host's device (or to `memory`); PlanError without one."""
        if memory is None:
            why = self.target.incompatibility()
            if why is not None:
                raise PlanError(f"cannot load this GPU plan here: {why}")
            memory = DeviceMemory(self)
        return GpuSession(self, memory)


@dataclass(frozen=True)
class StepChoice:
    """One step's engine chosen on the device (`GpuSession.choose`)."""

    node: str
    task: str
    generated_ms: float
    library_ms: float
    engine: str


class GpuSession:
    def __init__(self, plan: GpuPlan, memory: Memory) -> None:
        doc, self.plan, self.memory = plan.doc, plan, memory
        self._arena = memory.alloc(doc["arena_bytes"])
        weights = doc["weights"]
        blob = np.frombuffer(verified_bytes(inside(plan.folder, weights["file"], "file"),
                                            weights["sha256"], weights["file"]), np.uint8)
        self._weights = memory.alloc(weights["bytes"])
        for w in weights["entries"]:
            data = blob[w["offset"]:w["offset"] + _nbytes(w["shape"], w["dtype"])]
            memory.upload(memory.view(self._weights, w["offset"], w["shape"], w["dtype"]),
                          data.view(w["dtype"]).reshape(w["shape"]))
        self._inputs = {}
        for spec in doc["inputs"]:
            v = doc["values"][spec["name"]]
            mem = memory.alloc(_nbytes(v["shape"], v["dtype"]))
            self._inputs[spec["name"]] = (spec, memory.view(mem, 0, v["shape"], v["dtype"]),
                                          mem)
        torch = _torch() if any(s.get("engine") == LIBRARY for s in doc["steps"]) else None
        self.launches = [self._host(step) if step.get("engine") == HOST else
                         self._library(torch, step) if step.get("engine") == LIBRARY else
                         memory.kernel(plan.folder, step, self._views(step))
                         for step in doc["steps"]]
        self._outputs = [(spec, self._value_view(spec["name"], None)) for spec in doc["outputs"]]
        self.walk = None            # a staged walk (schedule()), else the steps in turn
        self._streams: dict[int, Any] = {}

    def _value_view(self, name: str, shape):
        """A view of value `name` (a view value: of the value it aliases) as `shape`."""
        values = self.plan.doc["values"]
        v, root = values[name], name
        while "alias" in values[root]:
            root = values[root]["alias"]
        shape = v["shape"] if shape is None else shape
        if "input" in values[root]:
            return self.memory.view(self._inputs[root][2], 0, shape, v["dtype"])
        return self.memory.view(self._arena, values[root]["offset"], shape, v["dtype"])

    def _host(self, step: dict):
        """A host step (runtime/gpu_host_ops.py): the op's numpy reference between copies."""
        from woodpecker.runtime.gpu_host_ops import HostStep

        ins = [None if "none" in ref else self._ref_view(ref) for ref in step["args"]]
        outs = [self._value_view(ref["value"], ref["shape"]) for ref in step["outs"]]
        return HostStep(self.memory, step["op"], step["attrs"], ins, outs)

    def _library(self, torch, step: dict):
        """A library step (runtime/gpu_torch.py): torch on the kernel's own views."""
        from woodpecker.runtime.gpu_torch import TorchKernel
        from woodpecker.tasks import task_from_key

        *ins, out = (self.memory.tensor(torch, v) for v in self._views(step, library=True))
        return TorchKernel(torch, task_from_key(step["task"]), ins, out)

    def _views(self, step: dict, library: bool = False) -> list:
        """The step's argument and output views: its kernel's, or with `library` the
        library's (a template that transforms its weights keeps the raw ones beside them)."""
        args = step.get("library_args", step["args"]) if library else step["args"]
        return [self._ref_view(ref) for ref in (*args, step["out"])]

    def _ref_view(self, ref: dict):
        """The view an argument reference names: a weight, or a value."""
        if "weight" in ref:
            w = self.plan.doc["weights"]["entries"][ref["weight"]]
            return self.memory.view(self._weights, w["offset"], ref["shape"], w["dtype"])
        return self._value_view(ref["value"], ref["shape"])

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.feed(feeds)
        self.launch()
        return self.fetch()

    def feed(self, feeds: dict[str, np.ndarray]) -> None:
        """Copy the inputs to the device (transposed on the host where its layout differs)."""
        for name, (spec, view, _) in self._inputs.items():
            if name not in feeds:
                raise WoodpeckerError(f"missing input {name!r}")
            x = np.asarray(feeds[name])
            if list(x.shape) != spec["shape"] or x.dtype.name != spec["dtype"]:
                raise WoodpeckerError(f"input {name!r} must be {spec['dtype']} of shape "
                                      f"{spec['shape']}, got {x.dtype.name} {list(x.shape)}")
            if spec["to_device"] is not None:
                x = x.transpose(spec["to_device"])
            self.memory.upload(view, x)      # in the view's type: an fp16 plan's float16

    def launch(self) -> None:
        if self.walk is not None:
            self.walk()
            return
        for launch in self.launches:
            launch()

    def on_stream(self, step: int, stream: int) -> None:
        """Step `step`'s next launches go on `stream` (a library step's torch calls; the
        generated kernels follow the memory's current stream)."""
        launch = self.launches[step]
        if hasattr(launch, "stream"):
            launch.stream = None if not stream else self._torch_stream(stream)

    def _torch_stream(self, stream: int):
        if stream not in self._streams:
            self._streams[stream] = _torch().cuda.ExternalStream(stream)
        return self._streams[stream]

    def schedule(self, feeds: dict[str, np.ndarray], streams: int = GPU_STREAMS,
                 runs: int = DOS_RUNS) -> "Schedule":
        """DOS on this device (runtime/gpu_stages.py): the steps' times alone and candidate
        stages' together measured on `streams` streams, the least-cost stages of consecutive
        steps (schedule/dos_steps.contiguous_schedule: the arena holds the steps in plan
        order); later launches run the stages (a schedule without a concurrent stage leaves
        the walk in turn)."""
        from woodpecker.runtime.gpu_stages import StreamCosts, staged_walk, step_edges
        from woodpecker.schedule.dos_steps import contiguous_schedule

        self.walk = None
        self.feed(feeds)
        self.launch()
        handles = [self.memory.stream() for _ in range(streams)]
        costs = StreamCosts(self, handles, runs)
        found = contiguous_schedule(len(self.launches), step_edges(self.plan.doc), costs)
        if any(len(stage.nodes) > 1 for stage in found.stages):
            self.walk = staged_walk(self, found, handles)
        return found

    def fetch(self) -> dict[str, np.ndarray]:
        """Copy the outputs back (transposed to the model's layout where they differ)."""
        out = {}
        for spec, view in self._outputs:
            v = self.plan.doc["values"][spec["name"]]
            host = self.memory.download(view, np.empty(v["shape"], v["dtype"]))
            host = host.astype(spec["dtype"], copy=False)    # an fp16 plan's, to the model's
            out[spec["name"]] = np.ascontiguousarray(host.transpose(spec["from_device"])) \
                if spec["from_device"] is not None else host.reshape(spec["shape"])
        return out

    def choose(self, feeds: dict[str, np.ndarray], runs: int = 10) -> list[StepChoice]:
        """WPK §2.5's per-operator choice made at load, on this device: every step timed as
        its generated kernel and as its library call (torch: cuDNN, cuBLAS) on the plan's
        own views (`runs` each, medians by the memory's timer), the faster kept for later
        launches. The inputs are fed and the plan run once first, so every step reads
        values of the right kind (timings do not depend on the values)."""
        from woodpecker.runtime.gpu_torch import TorchKernel

        torch = _torch()
        self.feed(feeds)
        self.launch()
        timer, report = self.memory.timer(), []
        for i, step in enumerate(self.plan.doc["steps"]):
            if step.get("engine") == HOST:        # no GPU kernel, no torch form: as it is
                continue
            # the step's current launch is one of the two; only the other is bound here
            current = self.launches[i]
            on_library = isinstance(current, TorchKernel)
            generated = self.memory.kernel(self.plan.folder, step, self._views(step)) \
                if on_library else current
            library = current if on_library else self._library(torch, step)
            ms = [float(np.median(timed(launch, timer, runs))) for launch in (generated, library)]
            self.launches[i] = library if ms[1] < ms[0] else generated
            report.append(StepChoice(step["node"], step["task"], ms[0], ms[1],
                                     LIBRARY if ms[1] < ms[0] else GENERATED))
        return report

    def graph(self):
        """The plan's launches captured once as a CUDA graph (torch.cuda.CUDAGraph: library
        steps' temporaries then live in its private pool), returned as a call replaying it on
        the default stream — one launch of the graph for the whole walk instead of one per
        step. Needs torch with CUDA and a device (PlanError otherwise)."""
        torch = _torch()
        if any(step.get("engine") == HOST for step in self.plan.doc["steps"]):
            raise PlanError("this GPU plan has host steps (copies off the device): no CUDA "
                            "graph captures them")
        if not hasattr(self.memory, "use_stream") or not torch.cuda.is_available():
            raise PlanError("CUDA graphs need the plan on a CUDA device, with torch")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(side):      # warm up off the default stream, as torch asks
                self.memory.use_stream(side.cuda_stream)
                self.launch()
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.memory.use_stream(torch.cuda.current_stream().cuda_stream)
                self.launch()
        finally:
            self.memory.use_stream(0)
        return graph.replay

    def time(self, feeds: dict[str, np.ndarray], runs: int = 30, warmup: int = 5) -> list[float]:
        """Milliseconds of device time per run of the launches (CUDA events; the inputs
        copied once before)."""
        self.feed(feeds)
        return timed(self.launch, self.memory.timer(), runs, warmup)
