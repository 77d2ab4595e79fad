"""Running GPU kernels from Python with numpy and ctypes only: the plan's runtime library
(Halide's CUDA runtime and cuda_glue.c, engines/halide/gpu/runtime_build.py), device memory,
kernels, copies at a plan's inputs and outputs, and CUDA events.

Contract: `CudaRuntime(library)` loads the runtime once per process (RTLD_GLOBAL: kernel
libraries resolve Halide's symbols from it) and binds the device's primary context;
`alloc(bytes)` is device memory; `view(memory, offset, shape, dtype)` a device-only
halide_buffer_t over part of it (an arena value, a weight, as one kernel argument reads it):
kernels find their inputs on the device and leave their outputs there; `upload(view, array)`
/ `download(view, array)` are the only copies, each setting the dirty flag it needs;
`GpuKernel(library)` is one kernel, called with views; `Timer` CUDA events around a run.
Every failure is a `DeviceError` of one line naming the call and Halide's or the driver's
message.

This is SERENITY's arena on device memory (issue 54): a plan's activations live in one
allocation at planned offsets, weights in another, and only inputs and outputs cross the bus.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from woodpecker.halide_abi import DEVICE_DIRTY, HOST_DIRTY, Buffer, device_buffer

NO_DRIVER = 100000      # cuda_glue.c: libcuda could not be opened (+1: a symbol is missing)


class DeviceError(Exception):
    """A GPU call failed; the message says which, in one line."""


_messages: list[str] = []


@ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)
def _record(_user_context, message):
    _messages[:] = [message.decode(errors="replace").strip().replace("\n", " ")]


@dataclass
class Allocation:
    """One device allocation (cuMemAlloc): a CUdeviceptr and its size."""

    pointer: int            # CUdeviceptr
    bytes: int


@dataclass
class View:
    """A halide_buffer_t over device memory (its dims kept alive beside it)."""

    buffer: Buffer
    dims: object
    shape: tuple[int, ...]
    dtype: np.dtype
    host: list = field(default_factory=list)     # the host array of an upload in flight

    @property
    def address(self) -> int:
        return ctypes.addressof(self.buffer)


class CudaRuntime:
    _loaded: dict[str, "CudaRuntime"] = {}

    def __new__(cls, library: "str | Path", ordinal: int = 0) -> "CudaRuntime":
        """The process's runtime: the first one loaded serves every plan (Halide's runtime
        state — its context hooks, its module cache — is per process)."""
        key = str(library)      # (a sealed copy's /proc/self/fd path: not resolved)
        if cls._loaded:
            return next(iter(cls._loaded.values()))
        self = super().__new__(cls)
        self.key = key
        lib = ctypes.CDLL(key, mode=ctypes.RTLD_GLOBAL)
        lib.halide_set_error_handler.restype = ctypes.c_void_p
        lib.halide_set_error_handler(_record)
        rc = lib.wp_cuda_init(int(ordinal))
        if rc == NO_DRIVER:
            raise DeviceError("no CUDA driver on this host (libcuda.so.1 cannot be opened)")
        if rc:
            raise DeviceError(f"cannot bind CUDA device {ordinal} (CUresult {rc})")
        lib.halide_cuda_device_interface.restype = ctypes.c_void_p
        self.lib, self.interface = lib, lib.halide_cuda_device_interface()
        self._memory: list[Allocation] = []
        cls._loaded[key] = self
        return self

    def _check(self, rc: int, what: str) -> None:
        if rc:
            why = _messages[0] if _messages else f"error {rc}"
            _messages.clear()
            raise DeviceError(f"{what} failed: {why}")

    def bind_thread(self) -> None:
        """Make the runtime's context current on the calling thread (a new thread's first)."""
        self._check(self.lib.wp_cuda_bind_thread(), "binding the CUDA context")

    def alloc(self, nbytes: int) -> Allocation:
        ptr = ctypes.c_uint64(0)
        self._check(self.lib.wp_cuda_alloc(ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 1))),
                    f"allocating {nbytes} bytes of device memory")
        memory = Allocation(ptr.value, nbytes)
        self._memory.append(memory)
        return memory

    def free(self, memory: Allocation) -> None:
        if memory in self._memory:
            self._memory.remove(memory)
            self._check(self.lib.wp_cuda_free(ctypes.c_uint64(memory.pointer)),
                        "freeing device memory")

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory."""
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        self._check(self.lib.wp_cuda_mem_info(ctypes.byref(free), ctypes.byref(total)),
                    "reading device memory")
        return free.value, total.value

    def view(self, memory: Allocation, offset: int, shape, dtype) -> View:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset < 0 or offset + nbytes > memory.bytes:
            raise DeviceError(f"a view of {nbytes} bytes at {offset} leaves its allocation "
                              f"of {memory.bytes}")
        buf, dims = device_buffer(memory.pointer + offset, self.interface, shape, dtype)
        return View(buf, dims, tuple(shape), dtype)

    def upload(self, view: View, array: np.ndarray) -> None:
        a = np.ascontiguousarray(array, dtype=view.dtype)
        if a.shape != view.shape:
            raise DeviceError(f"uploading an array of shape {a.shape} into {view.shape}")
        view.host[:] = [a]
        view.buffer.host = a.ctypes.data
        view.buffer.flags = HOST_DIRTY
        try:
            self._check(self.lib.halide_copy_to_device(None, ctypes.byref(view.buffer),
                                                       ctypes.c_void_p(self.interface)),
                        "copying to the device")
        finally:
            view.buffer.host, view.buffer.flags = None, 0
            view.host.clear()

    def download(self, view: View, out: np.ndarray) -> np.ndarray:
        if out.shape != view.shape or out.dtype != view.dtype or not out.flags.c_contiguous:
            raise DeviceError(f"downloading {view.shape} {view.dtype} into {out.shape} "
                              f"{out.dtype}")
        view.buffer.host = out.ctypes.data
        view.buffer.flags = DEVICE_DIRTY
        try:
            self._check(self.lib.halide_copy_to_host(None, ctypes.byref(view.buffer)),
                        "copying from the device")
        finally:
            view.buffer.host, view.buffer.flags = None, 0
        return out

    def synchronize(self) -> None:
        self._check(self.lib.wp_cuda_synchronize(), "synchronizing the device")

    def use_stream(self, stream: int) -> None:
        """Launch kernels and record events on CUDA stream `stream` (0: the legacy default
        stream, where torch's default work goes too)."""
        self.lib.wp_cuda_use_stream(ctypes.c_void_p(stream or None))

    def current_stream(self) -> int:
        self.lib.wp_cuda_current_stream.restype = ctypes.c_void_p
        return int(self.lib.wp_cuda_current_stream() or 0)

    def stream(self) -> int:
        """A new non-blocking stream (DOS stages: ordered only by the events put between)."""
        s = ctypes.c_void_p()
        self._check(self.lib.wp_cuda_stream_new(ctypes.byref(s)), "creating a stream")
        return int(s.value)

    def event(self) -> ctypes.c_void_p:
        e = ctypes.c_void_p()
        self._check(self.lib.wp_cuda_event_new(ctypes.byref(e)), "creating an event")
        return e

    def record(self, event: ctypes.c_void_p, stream: int) -> None:
        self._check(self.lib.wp_cuda_record_on(event, ctypes.c_void_p(stream or None)),
                    "recording an event")

    def wait(self, stream: int, event: ctypes.c_void_p) -> None:
        """Work later put on `stream` waits for `event`."""
        self._check(self.lib.wp_cuda_wait(ctypes.c_void_p(stream or None), event),
                    "waiting on an event")


class GpuKernel:
    """One kernel library's `wp_kernel(buffers...)`: its launches go on the runtime's stream."""

    def __init__(self, runtime: CudaRuntime, library: "str | Path", n_buffers: int,
                 name: str | None = None) -> None:
        name = name or Path(library).name
        try:
            lib = ctypes.CDLL(str(library))
        except OSError as e:
            raise DeviceError(f"cannot load GPU kernel {name}: {e}") from None
        self.runtime, self.name, self._lib = runtime, name, lib
        self._fn = lib.wp_kernel
        self._fn.argtypes = [ctypes.c_void_p] * n_buffers
        self._fn.restype = ctypes.c_int
        self.n_buffers = n_buffers

    def bind(self, views: list[View]):
        """A call of no arguments launching the kernel on `views` (inputs, then the output)."""
        if len(views) != self.n_buffers:
            raise DeviceError(f"GPU kernel {self.name} takes {self.n_buffers} buffers, "
                              f"got {len(views)}")
        addresses = [v.address for v in views]

        def launch() -> None:
            self.runtime._check(self._fn(*addresses), f"GPU kernel {self.name}")

        launch.views = views      # keep the buffers alive
        return launch


class Timer:
    """CUDA events around a region of the runtime's stream: milliseconds of device time."""

    def __init__(self, runtime: CudaRuntime) -> None:
        self.runtime = runtime
        self._events = [ctypes.c_void_p(), ctypes.c_void_p()]
        for e in self._events:
            runtime._check(runtime.lib.wp_cuda_event_new(ctypes.byref(e)), "creating an event")

    def start(self) -> None:
        self.runtime._check(self.runtime.lib.wp_cuda_record(self._events[0]), "recording")

    def stop(self) -> float:
        rt = self.runtime
        rt._check(rt.lib.wp_cuda_record(self._events[1]), "recording")
        ms = ctypes.c_float(0)
        rt._check(rt.lib.wp_cuda_elapsed(ctypes.byref(ms), self._events[0], self._events[1]),
                  "timing with events")
        return float(ms.value)


def timed(launch, timer, runs: int, warmup: int = 1) -> list[float]:
    """Milliseconds of each of `runs` calls of `launch` by `timer` (start()/stop(): CUDA
    events, or a host stand-in), after `warmup` untimed ones."""
    for _ in range(warmup):
        launch()
    times = []
    for _ in range(runs):
        timer.start()
        launch()
        times.append(timer.stop())
    return times
