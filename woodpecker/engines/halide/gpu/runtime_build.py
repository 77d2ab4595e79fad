"""The GPU runtime library and kernel libraries a GPU plan ships, built here for the device.

Contract: `cuda_runtime(target)` is the shared library of Halide's runtime for the target's
Halide string (its CUDA module loads PTX through the driver it dlopens) linked with
`cuda_glue.c` (the primary context, the stream, device memory and events; gpu/runtime.py
calls it); `kernel_library(build)` links one GPU kernel's object (compiled without a runtime)
into a shared library resolving the runtime's symbols from the process, as CPU kernels do
(aot.py). Both are cached and written under temporary names moved into place.

Choice: the host side of GPU kernels and the runtime is compiled for baseline x86-64 (SSE4.1,
no -march=native): it only launches kernels, and the device's host CPU is not this one.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from woodpecker.cache import cache_dir
from woodpecker.engines.halide.aot import _cc, _link, halide_module, halide_version
from woodpecker.engines.halide.gpu.build import GpuBuild
from woodpecker.target import Target

GLUE = Path(__file__).with_name("cuda_glue.c")
RUNTIME_NAME = "libwoodpecker_cuda_runtime"


def cuda_runtime(target: Target) -> Path:
    """The runtime library for `target` (a cuda one), built if missing."""
    hl = halide_module()
    hl_target = hl.Target(target.halide_target)
    digest = hashlib.sha256(GLUE.read_bytes() + str(hl_target).encode()).hexdigest()[:12]
    path = cache_dir() / "halide-gpu" / f"{halide_version()}-{hl_target}" / \
        f"{RUNTIME_NAME}-{digest}.so"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        runtime, glue = Path(tmp) / "runtime.o", Path(tmp) / "glue.o"
        hl.compile_standalone_runtime(str(runtime), hl_target)
        _cc(["-O2", "-fPIC", "-c", str(GLUE), "-o", str(glue)], "compiling cuda_glue.c")
        _link([runtime, glue], path, ("-lpthread", "-ldl", "-lm"))
    return path


def kernel_library(build: GpuBuild) -> Path:
    """`build`'s object linked into a shared library beside it."""
    path = build.path.with_suffix(".so")
    if not path.exists():
        _link([build.path], path)
    return path
