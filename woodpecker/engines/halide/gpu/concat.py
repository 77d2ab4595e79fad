"""Concat on a GPU (tasks/movement.ConcatTask): each output element read from the input
its index along the axis falls in, a select over the inputs' offsets (every read clamped
inside its own input, so bounds inference asks no input for more than it has).

Mapped as movement.py maps copies: the output's axes fused into one run (Halide's innermost
first: consecutive threads write consecutive addresses), blocks of `threads`. An NHWC concat
of channels selects per element along the innermost axis, so a warp reads two inputs at a
seam and one elsewhere.
"""

from __future__ import annotations

from woodpecker.engines.halide.gpu.movement import TYPES, fused_threads
from woodpecker.engines.halide.gpu.movement import space as space  # a copy's one knob
from woodpecker.tasks.movement import ConcatTask

KIND = "concat"


def supports(task: ConcatTask) -> bool:
    return task.dtype in TYPES and 1 <= len(task.out_shape) <= 6


def views(task: ConcatTask) -> list:
    return [None] * (len(task.shapes) + 1)


def define(hl, task: ConcatTask, config: dict, mapping):
    code, bits = TYPES[task.dtype]
    rank = len(task.out_shape)
    xs = [hl.ImageParam(getattr(hl, code)(bits), rank, f"x{i}") for i in range(len(task.shapes))]
    v = [hl.Var(f"d{d}") for d in range(rank)]            # Halide order: v[0] innermost
    along = rank - 1 - task.axis
    starts = [0]
    for s in task.shapes:
        starts.append(starts[-1] + s[task.axis])

    def read(i: int):
        at = list(v)
        at[along] = hl.clamp(v[along] - starts[i], 0, task.shapes[i][task.axis] - 1)
        return xs[i][at]

    value = read(len(xs) - 1)
    for i in reversed(range(len(xs) - 1)):
        value = hl.select(v[along] < starts[i + 1], read(i), value)
    out = hl.Func("out")
    out[v] = value
    fused_threads(hl, mapping, out, v, config["threads"])
    return out, xs
