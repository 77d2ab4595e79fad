"""TensorFlow Lite's arena as a baseline (issue 33): the size of the buffer TFLite's
`ArenaPlanner` with its `SimpleMemoryArena` gives a graph's activations when run in a given
order — the "simple memory arena" of the thesis's §3.5 footnote, against which SERENITY's
1.68× / 1.86× footprint reductions are stated.

Contract: `tflite_arena(graph)` → `TfliteArena(size, offsets)` for the graph's current node
order. The policy, as read in TensorFlow Lite's public sources (`tensorflow/lite/
arena_planner.cc`, `simple_memory_arena.cc`; re-implemented, not copied):
- Lifetimes in node indices: a value is allocated at its producer (graph inputs at 0) and
  released at the node whose read drops its reference count to zero; graph outputs, and values
  nobody reads, are never released. Intervals are inclusive: a value released at node i and one
  allocated at node i overlap (no in-place reuse).
- Order of placement: values live for the whole run (allocated at 0, never released) first, by
  index; then by size, largest first; equal sizes by allocation node.
- Placement: among the values already placed whose intervals overlap, in offset order, the
  smallest gap that fits (aligned to `alignment`) — TFLite's best fit, including its quirk of
  measuring a gap from the unaligned end of the value before it — else after the last of them.
  The arena is the highest end.
Choices where this is not TFLite: graph inputs are left out by default (`inputs=False`), as
Woodpecker's arena leaves them out (they are the caller's arrays), so both count the same
values; every value is its own tensor (no Concat written in place: TFLite has none).
"""

from __future__ import annotations

from dataclasses import dataclass

from woodpecker.ir.graph import Graph
from woodpecker.schedule.problem import value_bytes

TFLITE_ALIGNMENT = 64    # kDefaultTensorAlignment


@dataclass(frozen=True)
class TfliteArena:
    size: int
    offsets: dict[str, int]


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def tflite_lifetimes(graph: Graph, inputs: bool = False) -> list[tuple[str, int, int, int]]:
    """(value name, bytes, first node, last node) for every activation, in value order."""
    n = len(graph.nodes)
    never = n          # "not released": past the last node
    refs: dict[str, int] = {}
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None and not v.is_const:
                refs[v.name] = refs.get(v.name, 0) + 1
    for v in graph.outputs:
        refs[v.name] = refs.get(v.name, 0) + 1
    first: dict[str, int] = {}
    sizes: dict[str, int] = {}
    if inputs:
        for v in graph.inputs:
            first[v.name], sizes[v.name] = 0, value_bytes(v)
    last: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            first.setdefault(v.name, i)
            sizes[v.name] = value_bytes(v)
        for v in node.inputs:
            if v is None or v.is_const or v.name not in first:
                continue
            refs[v.name] -= 1
            if refs[v.name] == 0:
                last[v.name] = i
    return [(name, sizes[name], first[name], last.get(name, never)) for name in first]


def tflite_arena(graph: Graph, alignment: int = TFLITE_ALIGNMENT,
                 inputs: bool = False) -> TfliteArena:
    """TFLite's arena for `graph` in its current node order (see the module docstring)."""
    life = tflite_lifetimes(graph, inputs)
    end = len(graph.nodes)
    index = {name: k for k, (name, _, _, _) in enumerate(life)}

    def key(t):
        name, size, first, last = t
        whole = first == 0 and last == end
        return (0, index[name], 0) if whole else (1, -size, first)

    placed: list[tuple[int, int, int, int]] = []     # (offset, size, first, last) by offset
    offsets: dict[str, int] = {}
    high = 0
    for name, size, first, last in sorted(life, key=key):
        if size == 0:
            offsets[name] = 0
            continue
        best, best_fit, current = None, None, 0
        for off, sz, f, la in placed:
            if la < first or f > last:
                continue
            aligned = _align(current, alignment)
            if aligned + size <= off and (best_fit is None or off - aligned < best_fit):
                best, best_fit = aligned, off - current
            current = max(current, off + sz)
            if best_fit == 0:
                break
        if best is None:
            best = _align(current, alignment)
        offsets[name] = best
        high = max(high, best + size)
        k = 0
        while k < len(placed) and placed[k][0] <= best:
            k += 1
        placed.insert(k, (best, size, first, last))
    return TfliteArena(high, offsets)
