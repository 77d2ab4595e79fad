"""Halide JIT set-up: the runtime's thread count is read from HL_NUM_THREADS when its thread
pool starts, so it must be pinned before the first kernel runs (the Python bindings expose no
setter; ahead-of-time kernels will call halide_set_num_threads instead)."""

from __future__ import annotations

import os


def halide(threads: int):
    """Import halide with its thread pool pinned to `threads` (first caller wins)."""
    os.environ.setdefault("HL_NUM_THREADS", str(threads))
    import halide as hl

    return hl


def host_vector_registers(isa: tuple[str, ...]) -> int:
    """Vector registers per core: 32 with AVX-512, else 16 (AVX2) — a register-blocking tile
    needs one accumulator register per (channel vector, pixel) pair."""
    return 32 if "avx512f" in isa else 16
