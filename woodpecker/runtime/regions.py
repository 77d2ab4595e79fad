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


def absorb_movement(engines: Sequence[str], movable: Sequence[bool]) -> list[str]:
    """Engines with cheap data-movement nodes moved into adjacent library regions.

    The fixed preference gives Reshape/Concat/Slice… to numpy (views, no copy), but a numpy
    node between two ORT nodes splits their region: squeezenet's Concat after every fire
    module, shufflenet's channel shuffle, the transformer's reshapes each cost a session
    boundary — ORT's call overhead and a lost cross-node fusion — for a copy worth far less.
    Each maximal run of numpy nodes that ORT can run (`movable`) goes to ORT when an ORT node
    precedes or follows it; runs between other engines (Halide kernels) stay numpy views."""
    out = list(engines)
    i = 0
    while i < len(out):
        if out[i] != "numpy" or not movable[i]:
            i += 1
            continue
        j = i
        while j < len(out) and out[j] == "numpy" and movable[j]:
            j += 1
        if (i > 0 and out[i - 1] == REGION_ENGINE) or (j < len(out) and out[j] == REGION_ENGINE):
            out[i:j] = [REGION_ENGINE] * (j - i)
        i = j
    return out
