"""Movement on a GPU (tasks/movement.py): Transpose, Gather of one constant index, Slice —
each output element read from the input through the task's affine index map.

Every output element is one thread's: the output's axes fused into one run (Halide's
innermost first, so a warp writes consecutive addresses), cut into blocks of `threads`;
reads follow the map (strided for a transposition, through the cache). Knob: `threads`.
"""

from __future__ import annotations

from woodpecker.engines.halide.gpu.mapping import gpu_constraints
from woodpecker.gpu.devices import GpuDevice
from woodpecker.tasks.movement import MoveTask
from woodpecker.tasks.space import Knob, KnobSpace

KIND = "move"
SEEDS = ({"threads": 256},)
TYPES = {"float32": ("Float", 32), "float16": ("Float", 16), "int64": ("Int", 64),
          "int32": ("Int", 32), "uint8": ("UInt", 8), "int8": ("Int", 8)}


def supports(task: MoveTask) -> bool:
    return task.dtype in TYPES and 1 <= len(task.shape) <= 6


def space(task: MoveTask, device: GpuDevice) -> KnobSpace:
    return KnobSpace([Knob("threads", (64, 128, 256, 512, 1024))],
                     gpu_constraints(device, lambda c: c["threads"]), SEEDS)


def views(task: MoveTask) -> list:
    return [None, None]



def define(hl, task: MoveTask, config: dict, mapping):
    code, bits = TYPES[task.dtype]
    x = hl.ImageParam(getattr(hl, code)(bits), len(task.in_shape), "x")
    rank = len(task.shape)
    v = [hl.Var(f"d{d}") for d in range(rank)]            # Halide order: v[0] innermost
    at = [k if o < 0 else k + st * v[rank - 1 - o] for o, k, st in task.axes]
    out = hl.Func("out")
    out[v] = x[list(reversed(at))]
    fused_threads(hl, mapping, out, v, config["threads"])
    return out, [x]


def fused_threads(hl, mapping, out, v: list, threads: int) -> None:
    """`out`'s axes `v` (innermost first) fused into one run, blocks of `threads` threads."""
    run = v[0]
    for d in range(1, len(v)):
        fused = hl.Var(f"f{d}")
        out.fuse(run, v[d], fused)
        run = fused
    bo, ti = hl.Var("bo"), hl.Var("ti")
    out.split(run, bo, ti, threads, hl.TailStrategy.GuardWithIf)
    mapping.blocks(out, bo)
    mapping.threads(out, ti)
