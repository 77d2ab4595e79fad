"""Facts about the host that Halide schedules depend on, and the one permission AMX kernels
need from the kernel."""

from __future__ import annotations

import ctypes
import functools
import sys

from woodpecker.target import cpu_info, host_extensions

# Linux (5.16+) gives a process the AMX tile state only when it asks: arch_prctl(
# ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); a tile instruction before that faults (SIGILL).
SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18


def host_vector_registers(isa: tuple[str, ...]) -> int:
    """Vector registers per core: 32 with AVX-512, else 16 (AVX2) — a register-blocking tile
    needs one accumulator register per (channel vector, pixel) pair."""
    return 32 if "avx512f" in isa else 16


@functools.cache
def request_amx() -> bool:
    """Ask Linux for the AMX tile state (idempotent; once per process). False where the CPU
    has no AMX or the request is refused (an older kernel, another OS)."""
    if "amx_tile" not in cpu_info()[1] or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


@functools.cache
def host_has_amx() -> bool:
    """AMX int8 tiles usable here: the CPU has them (every CPU with `amx_tile` so far has
    `amx_int8` too), Halide's host target emits them (AVX512_SapphireRapids) and this process
    holds the tile state (`request_amx`)."""
    from woodpecker.engines.halide.aot import halide_module

    hl = halide_module()
    return hl.get_host_target().has_feature(hl.TargetFeature.AVX512_SapphireRapids) and \
        request_amx()


@functools.cache
def host_has_amx_bf16() -> bool:
    """AMX bf16 tiles (`tdpbf16ps`) usable here: `host_has_amx` and the CPU's `amx_bf16`."""
    return "amx_bf16" in host_extensions() and host_has_amx()

