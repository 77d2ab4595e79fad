"""Steps: a run of consecutive nodes whose engine builds multi-node kernels
(`Capabilities.multi_node`: ONNX Runtime) becomes one step — a library region, one session —
instead of one step per node.

Why: per-node sessions pay ORT's call overhead, an allocator and an initializer copy per node
(a plan of small ops ran several times slower than ORT's whole graph, and held more memory),
and ORT cannot fuse or pick layouts across node boundaries. System-level exploration
(Woodpecker-DL §2.5) picks an engine per node; the nodes the library wins are then best run by
the library as the largest subgraphs it can see. Generated (Halide) kernels and other engines
split regions, and so do the stages of a parallel schedule (each stage is one step whose
operators run at the same time). In a memory-scheduled plan a region writes every value it
produces into the arena (`every`: ORT allocates only its own scratch, whatever order it runs
the nodes in, since each of those values has arena space of its own for the whole step), and
regions start where the plan says (`starts`), so that none lifts the peak of the memory order
(selection/ is not involved: assembly/regions.arena_region_starts).
"""

from __future__ import annotations

from collections.abc import Sequence

from woodpecker.engines.registry import get_engine


def multi_node(engine: str) -> bool:
    """Whether `engine` builds one kernel for a run of consecutive nodes."""
    return get_engine(engine).caps.multi_node


def plan_steps(engines: Sequence[str], regions: bool,
               stages: Sequence[Sequence[int]] = (),
               starts: Sequence[int] = ()) -> list[list[int]]:
    """Node indices per execution step: each stage of a parallel schedule (`stages`: runs of
    consecutive node indices, runtime/stages.py) is one step; each maximal run of consecutive
    nodes of one multi-node engine outside them is one step when `regions`, a node in
    `starts` beginning a new one; every other node is a step of its own."""
    starts = set(starts)
    grouping = {e for e in set(engines) if multi_node(e)} if regions else set()
    stage_of = {i: k for k, stage in enumerate(stages) for i in stage}
    steps: list[list[int]] = []
    for i, engine in enumerate(engines):
        k = stage_of.get(i)
        last = steps[-1][-1] if steps else None
        if k is not None:
            joins = last is not None and stage_of.get(last) == k
        else:
            joins = (engine in grouping and last is not None and last not in stage_of
                     and engines[last] == engine and i not in starts)
        if joins:
            steps[-1].append(i)
        else:
            steps.append([i])
    return steps
