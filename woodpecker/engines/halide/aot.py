"""Ahead-of-time Halide kernels: each compiled once to a shared object in the kernel cache and
called through ctypes.

Why not the JIT: a shared object loads in milliseconds (a plan of 15 kernels loads without
compiling anything), and ctypes releases the GIL during the call, which Halide's Python
`Callable` does not. Every kernel is compiled without the Halide runtime and links against one
shared runtime library, which also holds Woodpecker's thread pool (spin_pool.c), so the whole
process has one pool, pinned to the thread count given.

Kernels are cached on disk by (template, config, task, target, Halide version): the tuner's
measurements and later plans reuse the same object.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import weakref
from pathlib import Path

import numpy as np

from woodpecker.cache import cache_dir
from woodpecker.config import HALIDE_SPIN_US
from woodpecker.engines.halide.host import request_amx
from woodpecker.errors import EngineError, KernelFailure
from woodpecker.halide_abi import host_buffer as _buffer

FUNCTION = "wp_kernel"

def halide_module():
    import halide as hl

    return hl


def target_string() -> str:
    return str(halide_module().get_host_target())


def halide_version() -> str:
    """The installed Halide release (read from its package metadata, without importing it)."""
    import importlib.metadata

    return importlib.metadata.version("halide")


def _kernel_dir() -> Path:
    return cache_dir() / "halide" / f"{halide_version()}-{target_string()}"


def _cc(args: list[str], what: str) -> None:
    """Run the C compiler with `args`; a failure is an EngineError naming `what`."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise EngineError("Halide ahead-of-time kernels need a C compiler to build them: "
                          "install gcc (apt-get install gcc)")
    proc = subprocess.run([cc, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise EngineError(f"{what} failed: {proc.stderr.strip()[:300]}")


def _link(objects: list[Path], output: Path, libs: tuple[str, ...] = ()) -> None:
    """Link objects into a shared library, written to a temporary name and moved into place so
    a concurrent or interrupted build never leaves a half-written library."""
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        _cc(["-shared", "-o", str(tmp), *map(str, objects), *libs], f"linking {output.name}")
    except EngineError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, output)


_last_error: list[str] = []


@ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)
def _on_error(_user_context, message):
    _last_error[:] = [message.decode(errors="replace").strip()]


RUNTIME_NAME = "libwoodpecker_halide_runtime.so"
# Linked into the runtime: Woodpecker's thread pool, the kernel-chain runner and data movement
# (compiled for this host, like the kernels).
_C_SOURCES = tuple(Path(__file__).with_name(name)
                   for name in ("spin_pool.c", "chain.c", "movement.c"))
_C_HEADER = Path(__file__).with_name("wp_runtime.h")   # what they declare for one another
_runtime_lib: list[ctypes.CDLL] = []

# Why Woodpecker runs Halide's parallel loops on its own pool (spin_pool.c): Halide's workers
# sleep as soon as a loop ends, and a plan calls its kernels one after another with Python in
# between, so each one found the worker asleep. The pool's workers spin this long (µs, see
# config.HALIDE_SPIN_US) for the next loop before they sleep, as ONNX Runtime's do.
SPIN_US = int(os.environ.get("WOODPECKER_HALIDE_SPIN_US", str(HALIDE_SPIN_US)))


def runtime_path() -> Path:
    """The shared Halide runtime library of this Halide version and host with Woodpecker's
    C sources (`_C_SOURCES`) linked in; built if missing, named by those sources so a changed
    one is rebuilt."""
    digest = hashlib.sha256(b"".join(src.read_bytes()
                                     for src in (*_C_SOURCES, _C_HEADER))).hexdigest()
    path = _kernel_dir() / RUNTIME_NAME.replace(".so", f"-{digest[:12]}.so")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            runtime = Path(tmp) / "runtime.o"
            hl = halide_module()
            hl.compile_standalone_runtime(str(runtime), hl.get_host_target())
            objects = [runtime]
            for src in _C_SOURCES:
                objects.append(Path(tmp) / f"{src.stem}.o")
                _cc(["-O3", "-march=native", "-fPIC", "-c", str(src), "-o", str(objects[-1])],
                    f"compiling {src.name}")
            _link(objects, path, ("-lpthread", "-ldl", "-lm"))
    return path


# A loaded plan's own copy of the runtime (HalideEngine.load_artifacts): used when the first
# runtime is needed without a path, so running a saved plan never imports Halide's compiler
# (the `halide` module, ~100 MiB resident) to find or build the cached one.
_preferred_runtime: list[Path] = []


def prefer_runtime(path: Path) -> None:
    """Use `path` (a checked copy of this build's runtime) if no runtime is loaded yet."""
    if not _preferred_runtime:
        _preferred_runtime.append(Path(path))


def _runtime(path: "Path | None" = None) -> ctypes.CDLL:
    """The one Halide runtime (thread pool, allocator, error handler) of this process: the
    first one loaded — a plan's own copy, or the cached build — serves every kernel."""
    if not _runtime_lib:
        path = path or (_preferred_runtime[0] if _preferred_runtime else runtime_path())
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        lib.halide_set_error_handler.restype = ctypes.c_void_p
        lib.halide_set_error_handler(_on_error)
        _runtime_lib.append(lib)
    return _runtime_lib[0]


def resting_hook():
    """A function sending the pool's spinning workers to sleep at once (None with a plan's
    runtime built before the pool could): called before a library step, whose own threads
    would otherwise share the cores with a worker spinning for the next Halide loop. Measured
    on mobilenet_v2: a plan with 24 Halide nodes amid ONNX Runtime regions ran 11.9 ms against
    6.0 ms for the library plan."""
    return getattr(_runtime(), "wp_spin_pool_rest", None)


def _viewed(a: np.ndarray, shape) -> np.ndarray:
    """`a` seen as `shape` without a copy (a copy of the output would be written and lost)."""
    view = a.view()
    try:
        view.shape = shape
    except AttributeError:
        raise EngineError(f"cannot view an array of shape {a.shape}, strides {a.strides} as "
                          f"{tuple(shape)} without copying it") from None
    return view


# The thread count the process's one pool runs parallel loops on now (set_threads).
_pool_threads: list[int] = [0]


def set_threads(threads: int, runtime: "Path | None" = None) -> None:
    """Run every kernel's parallel loops on `threads` threads: Woodpecker's pool where the
    runtime has it (a plan saved before it existed carries a runtime without), else Halide's
    (which cannot shrink once started)."""
    lib = _runtime(runtime)
    lib.halide_set_num_threads(int(threads))
    if hasattr(lib, "wp_spin_pool_install"):
        rc = lib.wp_spin_pool_install(int(threads), SPIN_US)
        if rc != 0:
            raise EngineError(f"cannot start Halide worker threads: {os.strerror(rc)}")
    _pool_threads[0] = int(threads)


def use_threads(threads: int) -> None:
    """`set_threads` unless the pool already runs on `threads`: called before each run of a
    model (HalideEngine.activate), so a model built or run after another with a different
    count does not leave it the other's."""
    if _pool_threads[0] != threads:
        set_threads(threads)


def pool_threads() -> int | None:
    """The thread count parallel loops run on now (None with a runtime that cannot say)."""
    fn = getattr(_runtime(), "wp_spin_pool_threads", None)
    return None if fn is None else int(fn())


def pool_used(reset: bool = False) -> int | None:
    """The most threads that ran iterations of one parallel loop since the last reset (None
    with a runtime that does not count them)."""
    fn = getattr(_runtime(), "wp_spin_pool_used", None)
    return None if fn is None else int(fn(int(reset)))


def pool_join_stats(reset: bool = False) -> tuple[float, int] | None:
    """(milliseconds callers waited at parallel loops' ends for workers still finishing an
    iteration, how many such waits exceeded 50 us — a worker the host preempted) since the
    last reset; None with a runtime that does not count them."""
    fn = getattr(_runtime(), "wp_spin_pool_join_stats", None)
    if fn is None:
        return None
    ns, count = ctypes.c_long(), ctypes.c_long()
    fn(ctypes.byref(ns), ctypes.byref(count), int(reset))
    return ns.value / 1e6, int(count.value)


def kernel_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return cached_kernel(f"{digest}.so")


def cached_kernel(file: str) -> Path:
    """The kernel cache's compiled kernel of file name `file`."""
    return _kernel_dir() / "kernels" / file


def compile_kernel(out, params, key: dict) -> Path:
    """Compile Func `out` over `params` (then the output buffer) to a cached shared object."""
    path = kernel_path(key)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    hl = halide_module()
    target = hl.get_host_target().with_feature(hl.TargetFeature.NoRuntime)
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "kernel.o"
        out.compile_to_object(str(obj), params, FUNCTION, target)
        _link([obj], path)
    return path


class AotKernel:
    """A compiled kernel: `kernel(*arrays)` → a new output array of `out_shape` (float32
    unless `out_dtype` says otherwise).

    The `halide_buffer_t` of each argument is built once and reused while the array's shape
    and strides stay the same (only its data pointer is refreshed): building them in Python
    cost about 25 µs per call, a fifth of a small layer's run time (mobilenet_v2's depthwise
    and pointwise kernels run 70-300 µs). When the very array of the last call comes again —
    the executor's arena views and the bound weights, every run — nothing is refreshed:
    reading a data pointer (`ndarray.ctypes.data`) costs ~2 µs, and the refresh path still
    cost ~20 µs per call against 1.4 µs for the bare call (the last array is held by a weak
    reference, so a plan without an arena frees its activations as before). The reused buffers
    are per thread, so concurrent calls of one kernel stay safe."""

    def __init__(self, path: "str | os.PathLike", n_inputs: int, out_shape: tuple[int, ...],
                 threads: int, runtime: "Path | None" = None, views=None,
                 out_dtype=np.float32, name: str | None = None) -> None:
        """`views`: per input (then the output) None, or the shape Halide sees that array as
        (a reshape of the C-contiguous array, so no copy); `out_dtype`: the output's type
        (int8 kernels write 8-bit outputs); `name`: what errors call it (its file name in
        the plan, where `path` is a sealed copy's)."""
        request_amx()             # before any kernel runs: an AMX one needs the tile state
        set_threads(threads, runtime)
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise EngineError(f"cannot load Halide kernel {path}: {e}") from None
        self.path = Path(path)
        self.name = name or self.path.name
        self._fn = getattr(lib, FUNCTION)
        self._fn.argtypes = [ctypes.c_void_p] * (n_inputs + 1)
        self._fn.restype = ctypes.c_int
        self._lib, self.n_inputs, self.out_shape = lib, n_inputs, tuple(out_shape)
        self.out_dtype = np.dtype(out_dtype)
        self.views = list(views) if views is not None else [None] * (n_inputs + 1)
        self._local = threading.local()

    def __call__(self, *arrays: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Run on C-contiguous float32 arrays; into `out` (of out_shape, its innermost axis
        contiguous: a channel slice of a larger NHWC array is fine) if given."""
        if len(arrays) != self.n_inputs:
            raise EngineError(f"Halide kernel {self.name} takes {self.n_inputs} arrays, "
                              f"got {len(arrays)}")
        if out is None:
            out = np.empty(self.out_shape, self.out_dtype)
        slots = getattr(self._local, "slots", None)
        if slots is None:
            slots = self._local.slots = [None] * (self.n_inputs + 1)
        addresses = []
        for i, (given, v) in enumerate(zip((*arrays, out), self.views, strict=True)):
            slot = slots[i]
            if slot is not None and slot[4]() is given:
                addresses.append(slot[3])
                continue
            a = given if v is None else _viewed(given, v)
            form = (a.shape, a.strides, a.dtype.char)
            if slot is None or slot[0] != form:
                buf, dims = _buffer(a)
                slot = (form, buf, dims, ctypes.addressof(buf))
            else:
                slot[1].host = a.ctypes.data
            slots[i] = (*slot[:4], weakref.ref(given))
            addresses.append(slot[3])
        self._check(self._fn(*addresses))
        return out

    def bind(self, *arrays: np.ndarray, out: np.ndarray):
        """A call of no arguments computing `out` from `arrays`, these very arrays every time
        (their contents may change): the executor's arena views. It makes nothing but the
        foreign call, about 1.3 µs, against 4 µs through `__call__` (mobilenet_v2's plan
        makes 55 per run)."""
        if len(arrays) != self.n_inputs:
            raise EngineError(f"Halide kernel {self.name} takes {self.n_inputs} arrays, "
                              f"got {len(arrays)}")
        held = [_buffer(a if v is None else _viewed(a, v))
                for a, v in zip((*arrays, out), self.views, strict=True)]
        return BoundCall(self, held, (arrays, out))

    def _check(self, rc: int) -> None:
        if rc != 0:
            raise KernelFailure(f"Halide kernel {self.name} failed ({rc}): "
                                f"{_last_error[0] if _last_error else 'no message'}",
                                self.name)


# chain.c calls kernels of at most this many buffers (inputs and the output). A kernel of more
# is called on its own: a conv whose epilogue sums many inputs (RandWire's nodes) has 10.
CHAIN_MAX_BUFFERS = 8


class BoundCall:
    """A kernel bound to fixed buffers (`AotKernel.bind`); `chain` joins several into one
    (those that are `chainable`)."""

    def __init__(self, kernel: AotKernel, held: list, arrays) -> None:
        self.kernel, self._held, self._arrays = kernel, held, arrays   # keep the memory alive
        self.addresses = [ctypes.addressof(buf) for buf, _ in held]
        self.chainable = len(self.addresses) <= CHAIN_MAX_BUFFERS

    def __call__(self) -> None:
        self.kernel._check(self.kernel._fn(*self.addresses))

    def entries(self) -> list:
        """What chain.c reads of this call: (function, buffer count, buffers, owner)."""
        return [(ctypes.cast(self.kernel._fn, ctypes.c_void_p).value, len(self.addresses),
                 self.addresses, self)]

    @staticmethod
    def chain(calls: "list[BoundCall | StageCall]"):
        """One call of no arguments running `calls` in order through the runtime's
        `wp_run_chain` (chain.c): a plan's run of consecutive Halide steps — kernels, and
        stages of kernels run at the same time — costs one ctypes call instead of one each.
        None when the runtime lacks it (a plan saved before)."""
        if not all(c.chainable for c in calls):
            raise ValueError(f"chain.c calls kernels of at most {CHAIN_MAX_BUFFERS} buffers")
        return _packed_call("wp_run_chain", [e for c in calls for e in c.entries()])

    @staticmethod
    def stage(calls: "list[BoundCall]") -> "StageCall | None":
        """`calls` run at the same time, each on one thread of the pool with its parallel
        loops serial (`wp_run_stage`, spin_pool.c: a concurrent stage of a parallel
        schedule); one call alone runs on the calling thread only. None when the runtime
        lacks it (a plan saved before) or a kernel takes more buffers than chain.c passes."""
        if not all(c.chainable for c in calls):
            return None
        run = _packed_call("wp_run_stage", [e for c in calls for e in c.entries()])
        return None if run is None else StageCall(calls, run)


class StageCall:
    """Bound kernels run at the same time (`BoundCall.stage`); chains like a `BoundCall` where
    the runtime's chains take stages."""

    def __init__(self, calls: list[BoundCall], run) -> None:
        self.calls, self._run = calls, run
        self.chainable = hasattr(_runtime(), "wp_chain_stages")

    def __call__(self) -> None:
        self._run()

    def entries(self) -> list:
        """A stage marker (no function, minus the member count), then each member's entry."""
        return [(None, -len(self.calls), [], None)] + [e for c in self.calls
                                                       for e in c.entries()]


def _packed_call(symbol: str, entries: list):
    """A call of no arguments passing `entries` (`BoundCall.entries`) to the runtime's
    `symbol` (n, functions, argument counts, the arguments in one array, the failing index);
    None when the runtime lacks it."""
    run = getattr(_runtime(), symbol, None)
    if run is None:
        return None
    n = len(entries)
    fns = (ctypes.c_void_p * n)(*[fn for fn, _, _, _ in entries])
    nargs = (ctypes.c_int * n)(*[k for _, k, _, _ in entries])
    flat = [a for _, _, addresses, _ in entries for a in addresses]
    args = (ctypes.c_void_p * max(len(flat), 1))(*flat)
    failed = ctypes.c_int(0)

    def call() -> None:
        rc = run(n, fns, nargs, args, ctypes.byref(failed))
        if rc != 0:
            owner = entries[failed.value][3] if 0 <= failed.value < n else None
            if owner is None:
                raise EngineError(f"Halide runtime call {symbol} failed ({rc})")
            owner.kernel._check(rc)

    call.parts = (entries, fns, nargs, args)   # keep the buffers and arrays alive
    return call
