"""Facts about the host that Halide schedules depend on."""

from __future__ import annotations


def host_vector_registers(isa: tuple[str, ...]) -> int:
    """Vector registers per core: 32 with AVX-512, else 16 (AVX2) — a register-blocking tile
    needs one accumulator register per (channel vector, pixel) pair."""
    return 32 if "avx512f" in isa else 16
