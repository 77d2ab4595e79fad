"""Cheap data-movement nodes join adjacent library regions (runtime/steps.py); where a
memory-scheduled plan's regions must begin so that none lifts its peak."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from woodpecker.ir.graph import Graph
from woodpecker.runtime.steps import plan_steps
from woodpecker.schedule.arena import lifetimes, live_peak


def absorb_movement(engines: Sequence[str], movable: Callable[[int, str], bool],
                    regions: Sequence[str], views: str) -> list[str]:
    """Engines with cheap data-movement nodes moved into adjacent library regions.

    `regions`: the multi-node engines whose steps absorb, in order; `movable(i, region)`:
    whether `region` can run node i as data movement (asked only of regions the plan uses, for
    numpy nodes: a library answers by building the node); `views`: the engine
    that runs data movement as views (numpy). The fixed preference gives Reshape/Concat/Slice…
    to numpy (views, no copy), but a numpy node between two ORT nodes splits their region:
    squeezenet's Concat after every fire module, shufflenet's channel shuffle, the
    transformer's reshapes each cost a session boundary — the library's call overhead and a
    lost cross-node fusion — for a copy worth far less. For each region engine in turn, each
    maximal run of numpy nodes it can run goes to it when a node of it precedes or follows
    the run; runs between other engines (Halide kernels) stay numpy views."""
    out = list(engines)
    for region in [r for r in regions if r in out]:
        i = 0
        while i < len(out):
            if out[i] != views or not movable(i, region):
                i += 1
                continue
            j = i
            while j < len(out) and out[j] == views and movable(j, region):
                j += 1
            if (i > 0 and out[i - 1] == region) or (j < len(out) and out[j] == region):
                out[i:j] = [region] * (j - i)
            i = j
    return out


def arena_region_starts(graph: Graph, engines: Sequence[str],
                        limit: int | None = None) -> list[int]:
    """Node indices where a region of a memory-scheduled plan must begin, so that no region
    holds more bytes than the most the node order ever holds (its live peak), or than `limit`
    where that is more (a memory budget above the peak buys fewer, larger regions).

    Such a region writes every value it produces into the arena (runtime/steps.py), so during
    the region every value alive at any of its nodes is alive at once: the values live when it
    starts and each one born inside. Each region is cut greedily, a new one started at the node
    whose value would lift that sum above the peak. The regions then cost the order nothing in
    memory, and a region of one node is no worse than the plan without regions."""
    life = lifetimes(graph)
    peak = max(live_peak(life), limit or 0)
    born: dict[int, int] = {}
    for _, size, first, _ in life:
        born[first] = born.get(first, 0) + size
    starts = []
    for step in plan_steps(engines, True):
        if len(step) < 2:
            continue
        start = step[0]
        held = sum(size for _, size, first, last in life if first <= start <= last)
        for k in step[1:]:
            held += born.get(k, 0)
            if held > peak:
                starts.append(k)
                start = k
                held = sum(size for _, size, first, last in life if first <= k <= last)
    return starts
