"""Steps: a run of consecutive nodes whose engine builds multi-node kernels
(`Capabilities.multi_node`: ONNX Runtime) becomes one step — a library region, one session —
instead of one step per node.

Why: per-node sessions pay ORT's call overhead, an allocator and an initializer copy per node
(a plan of small ops ran several times slower than ORT's whole graph, and held more memory),
and ORT cannot fuse or pick layouts across node boundaries. System-level exploration
(Woodpecker-DL §2.5) picks an engine per node; the nodes the library wins are then best run by
the library as the largest subgraphs it can see. Generated (Halide) kernels and other engines
split regions. Memory-scheduled plans keep one step per node: inside a session ORT orders and
allocates by itself, which would undo the memory order and the arena.
"""

from __future__ import annotations

from collections.abc import Sequence

from woodpecker.engines.registry import get_engine


def multi_node(engine: str) -> bool:
    """Whether `engine` builds one kernel for a run of consecutive nodes."""
    return get_engine(engine).caps.multi_node


def plan_steps(engines: Sequence[str], regions: bool) -> list[list[int]]:
    """Node indices per execution step: each maximal run of consecutive nodes of one
    multi-node engine is one step when `regions`; every other node is a step of its own."""
    grouping = {e for e in set(engines) if multi_node(e)} if regions else set()
    steps: list[list[int]] = []
    for i, engine in enumerate(engines):
        if engine in grouping and steps and engines[steps[-1][-1]] == engine:
            steps[-1].append(i)
        else:
            steps.append([i])
    return steps
