"""Graph rewrites that keep the math. `optimize` runs the default pipeline in order.

Two kinds live here, both rewrites of a `Graph` in place: the pipeline's passes (`PASSES`,
named in `DEFAULT`, `MEMORY`, `AGO`; run by `optimize`), and `unfuse.py`, the inverse of the
composite fusions, which is not a pipeline pass — selection (selection/fusion.py) and tuning
(tune/extract.py) apply it to the nodes they choose. It sits beside the fusions it undoes: it
rebuilds a chain's parts with `fuse_separable`, so no lower layer could hold it.
"""

from __future__ import annotations

from collections.abc import Callable

from woodpecker.ir.graph import Graph
from woodpecker.options import ScheduleKind
from woodpecker.passes.constant_fold import fold_constants
from woodpecker.passes.dce import eliminate_dead_code
from woodpecker.passes.expose_epilogues import expose_epilogues
from woodpecker.passes.fold_batchnorm import fold_batchnorm
from woodpecker.passes.fold_dynamic_matmul import fold_dynamic_matmul
from woodpecker.passes.fold_qdq import fold_qdq
from woodpecker.passes.fuse_attention import fuse_attention
from woodpecker.passes.fuse_chain import fuse_chains
from woodpecker.passes.fuse_elementwise import (
    fuse_elementwise,
    fuse_float_rows,
    fuse_row_elementwise,
)
from woodpecker.passes.fuse_epilogue import fuse_epilogues
from woodpecker.passes.fuse_prologue import fuse_prologues
from woodpecker.passes.fuse_qconv_program import fuse_qconv_programs
from woodpecker.passes.fuse_qdense_program import fuse_qdense_programs
from woodpecker.passes.fuse_separable import fuse_separable
from woodpecker.passes.gelu import fuse_gelu
from woodpecker.passes.global_pool import reduce_mean_to_pool
from woodpecker.passes.remove_identity import remove_identities
from woodpecker.passes.rmsnorm import fuse_rmsnorm
from woodpecker.passes.simplify_reshapes import simplify_reshapes
from woodpecker.passes.split_concat import split_copied_concats

PASSES: dict[str, Callable[[Graph], int]] = {
    "fold_qdq": fold_qdq,              # before constant folding dequantizes the weights
    "fold_dynamic_matmul": fold_dynamic_matmul,
    "fold_constants": fold_constants,
    "remove_identities": remove_identities,
    "simplify_reshapes": simplify_reshapes,
    "fold_batchnorm": fold_batchnorm,
    "reduce_mean_to_pool": reduce_mean_to_pool,
    "fuse_gelu": fuse_gelu,
    "fuse_rmsnorm": fuse_rmsnorm,
    "expose_epilogues": expose_epilogues,
    "fuse_epilogues": fuse_epilogues,
    "fuse_elementwise": fuse_elementwise,
    "fuse_qconv_programs": fuse_qconv_programs,    # after fuse_elementwise
    "fuse_qdense_programs": fuse_qdense_programs,  # after fold_constants
    "fuse_row_elementwise": fuse_row_elementwise,  # after fuse_qdense_programs
    "fuse_float_rows": fuse_float_rows,            # GPU plans only, after fuse_row_elementwise
    "fuse_prologues": fuse_prologues,
    "split_copied_concats": split_copied_concats,
    "fuse_chains": fuse_chains,
    "fuse_attention": fuse_attention,
    "fuse_separable": fuse_separable,
    "dce": eliminate_dead_code,
}
# AGO's intensive fusion of conv chains (passes/fuse_chain.py, before the separable pairs) and
# of attention (passes/fuse_attention.py).
INTENSIVE = ("fuse_chains", "fuse_attention")
# GPU plans' own passes (compiler_gpu.GPU_PASSES): no CPU pipeline runs them
GPU_ONLY = ("fuse_float_rows",)
AGO = tuple(p for p in PASSES if p not in GPU_ONLY)
DEFAULT = tuple(p for p in AGO if p not in INTENSIVE)
# The memory schedule's pipeline: its identity rewriting (passes/split_concat.py) splits
# depthwise convs along their input Concats, which a separable conv would hide.
MEMORY = tuple(p for p in DEFAULT if p != "fuse_separable")


def optimize(graph: Graph, passes: tuple[str, ...] = DEFAULT) -> dict[str, int]:
    """Run `passes` in order; returns how many rewrites each made."""
    return {name: PASSES[name](graph) for name in passes}


def pipeline(fusion: str = "default",
             schedule: ScheduleKind = ScheduleKind.FILE) -> tuple[str, ...] | None:
    """The passes `compile --fusion F --schedule S` runs: None for the default (the compiler's
    DEFAULT, or MEMORY for the memory schedule); with `ago`, those and the INTENSIVE ones."""
    if fusion != "ago":
        return None
    base = MEMORY if ScheduleKind(schedule) is ScheduleKind.MEMORY else DEFAULT
    return tuple(p for p in AGO if p in base or p in INTENSIVE)
