"""How a GPU template's loops are mapped: onto CUDA blocks, threads and shared memory
(`CudaMapping`), or, for checking a template on a machine without a GPU, onto plain serial
loops of the same splits and tiles (`HostMapping`); and the validity constraints a GPU config
must meet before it is built (WPK Step 1: threads per block ≤ the device's limit; shared
memory and registers per block).

Contract: a template calls `mapping.blocks(stage, *vars)`, `mapping.threads(stage, *vars)`,
`mapping.shared(func)` and `mapping.vectorize(stage, var, lanes)` where a CUDA schedule would
say gpu_blocks, gpu_threads, store_in(GPUShared) and vectorize. `gpu_constraints(device,
threads, shared, registers)` turns the template's per-config counts into Constraints.

Choice: the register estimate is the accumulators plus the operands one reduction step loads
plus `REGISTER_OVERHEAD` for indices and addresses; ptxas's allocation is only known on a
machine with the CUDA toolkit, so a config the estimate admits may still spill (the tuner then
measures it slow; it is never wrong).
"""

from __future__ import annotations

from typing import Protocol

from woodpecker.gpu.devices import GpuDevice
from woodpecker.tasks.space import Constraint

# the element types GPU templates store floats in: float16 plans keep every float tensor in
# half precision on the device and compute in float32 (template_parts.stored / narrowed)
FLOATS = ("float32", "float16")

# registers per thread beyond a template's named values: loop indices, addresses, predicates
REGISTER_OVERHEAD = 24
MAX_REGISTERS_PER_THREAD = 255


class Mapping(Protocol):
    device_api: str

    def blocks(self, stage, *axes) -> None: ...

    def threads(self, stage, *axes) -> None: ...

    def shared(self, func) -> None: ...

    def vectorize(self, stage, axis, lanes: int) -> None: ...


class CudaMapping:
    """The CUDA schedule: blocks and threads are GPU loops, staged inputs live in shared
    memory, vectorized loops are vector loads and stores (ld.global.v4 …)."""

    device_api = "cuda"

    def __init__(self, hl) -> None:
        self.hl = hl

    def blocks(self, stage, *axes) -> None:
        stage.gpu_blocks(*axes)

    def threads(self, stage, *axes) -> None:
        stage.gpu_threads(*axes)

    def shared(self, func) -> None:
        func.store_in(self.hl.MemoryType.GPUShared)

    def vectorize(self, stage, axis, lanes: int) -> None:
        if lanes > 1:
            stage.vectorize(axis, lanes)


class HostMapping:
    """The same loop nest on this CPU: blocks and threads run serially, staged inputs are
    ordinary buffers at the same loop level; so the splits, tiles, tails and staging regions a
    config makes are checked against the reference without a GPU."""

    device_api = "host"

    def __init__(self, hl) -> None:
        self.hl = hl

    def blocks(self, stage, *axes) -> None:
        pass

    def threads(self, stage, *axes) -> None:
        pass

    def shared(self, func) -> None:
        pass

    def vectorize(self, stage, axis, lanes: int) -> None:
        if lanes > 1:
            stage.vectorize(axis, lanes)


def gpu_constraints(device: GpuDevice, threads, shared=None, registers=None) -> list[Constraint]:
    """The constraints of a GPU config on `device`, from the template's counts per config:
    `threads(c)` per block (at most the device's limit; a block of part of a warp is valid, the
tiny layers' only choice, and slow elsewhere, which the tuner measures), `shared(c)` bytes of
    shared memory per block, `registers(c)` per thread (estimated; see the module notes)."""
    out = [Constraint(f"at most {device.max_threads_per_block} threads per block",
                      lambda c: threads(c) <= device.max_threads_per_block)]
    if shared is not None:
        out.append(Constraint(f"at most {device.shared_per_block} bytes of shared memory per "
                              "block", lambda c: shared(c) <= device.shared_per_block))
    if registers is not None:
        def fits(c) -> bool:
            per_thread = registers(c) + REGISTER_OVERHEAD
            return per_thread <= MAX_REGISTERS_PER_THREAD and \
                per_thread * threads(c) <= device.registers_per_block
        out.append(Constraint("registers within the thread's and the block's", fits))
    return out


def register_tiles(hl, mapping, out, acc, axes, block: tuple[int, int], regs: tuple[int, int],
                   reduce):
    """The register-tiled product both conv.py and dense.py map: `out` over `axes` (x, y, and
    the outer axes fused into blocks) cut into blocks of `block` (x, y) elements and threads of
    `regs` register tiles (vectorized along x), `acc` computed per thread, its pure and update
    stages unrolled over the tile; `reduce(update)` splits and orders the reduction first
    (Halide's vectorize splits the variable it names, so it comes after). Returns the block's
    x variable (for staging). Tiles shift inwards at the edges (ShiftInwards: the block must lie
    within the output)."""
    x, y, *outer = axes
    (bx, by), (rx, ry) = block, regs
    xo, yo, xt, yt, xr, yr = (hl.Var(v) for v in ("xo", "yo", "xt", "yt", "xr", "yr"))
    shift = hl.TailStrategy.ShiftInwards
    out.tile(x, y, xo, yo, xt, yt, bx, by, shift).tile(xt, yt, xt, yt, xr, yr, rx, ry, shift)
    out.reorder(xr, yr, xt, yt, xo, yo, *outer)
    if len(outer) > 1:                   # rows × images: the grid's third dimension
        out.fuse(outer[0], outer[1], outer[0])
    mapping.blocks(out, xo, yo, *outer[:1])
    mapping.threads(out, xt, yt)
    mapping.vectorize(out, xr, rx)
    out.unroll(yr)
    acc.compute_at(out, xt)
    acc_x, acc_y = acc.args()[0], acc.args()[1]
    mapping.vectorize(acc, acc_x, rx)
    acc.unroll(acc_y)
    upd = acc.update()
    reduce(upd)
    mapping.vectorize(upd, acc_x, rx)
    upd.unroll(acc_y)
    return xo


def stage_shared(hl, mapping, f, out, block, threads: tuple[int, int]) -> None:
    """`f`'s slab for one block of `out` (computed at `block`) in shared memory, loaded by the
    block's `threads` (x, y) together."""
    f.compute_at(out, block)
    mapping.shared(f)
    x, y = f.args()[0], f.args()[1]
    xo, yo, xi, yi = hl.Var("xo"), hl.Var("yo"), hl.Var("xi"), hl.Var("yi")
    f.tile(x, y, xo, yo, xi, yi, threads[0], threads[1], hl.TailStrategy.GuardWithIf)
    mapping.threads(f, xi, yi)
