"""Cheap data-movement nodes join adjacent library regions (runtime/regions.py)."""

from __future__ import annotations

from collections.abc import Sequence


def absorb_movement(engines: Sequence[str], movable: Sequence[bool], region: str,
                    views: str) -> list[str]:
    """Engines with cheap data-movement nodes moved into adjacent library regions.

    `region`: the multi-node engine whose steps absorb; `views`: the engine that runs data
    movement as views (numpy). The fixed preference gives Reshape/Concat/Slice… to numpy (views,
    no copy), but a numpy node between two ORT nodes splits their region: squeezenet's Concat
    after every fire module, shufflenet's channel shuffle, the transformer's reshapes each cost
    a session boundary — ORT's call overhead and a lost cross-node fusion — for a copy worth far
    less. Each maximal run of numpy nodes that ORT can run (`movable`) goes to ORT when an ORT
    node precedes or follows it; runs between other engines (Halide kernels) stay numpy views."""
    out = list(engines)
    i = 0
    while i < len(out):
        if out[i] != views or not movable[i]:
            i += 1
            continue
        j = i
        while j < len(out) and out[j] == views and movable[j]:
            j += 1
        if (i > 0 and out[i - 1] == region) or (j < len(out) and out[j] == region):
            out[i:j] = [region] * (j - i)
        i = j
    return out
