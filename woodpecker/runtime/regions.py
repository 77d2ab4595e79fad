"""Library regions: a run of consecutive nodes that ONNX Runtime executes becomes one ORT
session instead of one session per node.

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

REGION_ENGINE = "onnxruntime"


def plan_steps(engines: Sequence[str], regions: bool) -> list[list[int]]:
    """Node indices per execution step: each maximal run of consecutive `REGION_ENGINE` nodes
    is one step when `regions`; every other node is a step of its own."""
    steps: list[list[int]] = []
    for i, engine in enumerate(engines):
        if regions and engine == REGION_ENGINE and steps and \
                engines[steps[-1][-1]] == REGION_ENGINE:
            steps[-1].append(i)
        else:
            steps.append([i])
    return steps
