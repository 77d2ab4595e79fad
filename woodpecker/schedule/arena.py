"""Arena planning: one offset in one buffer for every activation, from the execution order.

Lifetimes follow the executor and the memory model (schedule/problem.py): a value lives from
the step of its producer to the step of its last reader; graph outputs to the end. Offsets come
from TFLite's greedy planners (values taken largest first, or by the breadth of the steps they
live in; each placed in a gap beside the already placed values whose lifetimes overlap) plus the
execution order and a largest-area-first order, each with best-fit and first-fit gaps; the
smallest arena wins. The lower bound is the most bytes live at once. Parts of a Concat written
in place (schedule/aliases.py) get no place of their own: they live inside the whole, which is
live from the first part's step; a reshape's view lives in its input, which lives until the
view's last reader.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from woodpecker.ir.graph import Graph
from woodpecker.schedule.aliases import alias_problem, is_view, view_root
from woodpecker.schedule.problem import value_bytes

ALIGNMENT = 64   # a cache line, and enough for AVX-512 loads


@dataclass
class Arena:
    size: int
    offsets: dict[str, int]     # value name -> byte offset
    lower_bound: int
    alignment: int = ALIGNMENT
    method: str = ""
    aliases: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # inplace.Alias

    def to_json(self) -> dict:
        return {"size": self.size, "lower_bound": self.lower_bound,
                "alignment": self.alignment, "method": self.method, "offsets": self.offsets,
                **({"aliases": self.aliases} if self.aliases else {})}

    @classmethod
    def from_json(cls, d: dict) -> "Arena":
        aliases = {k: (str(w), int(a), int(s)) for k, (w, a, s) in d.get("aliases", {}).items()}
        return cls(int(d["size"]), {k: int(v) for k, v in d["offsets"].items()},
                   int(d["lower_bound"]), int(d["alignment"]), str(d.get("method", "")),
                   aliases)


Steps = list[list[int]] | None   # node indices per execution step


def _aligned(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def lifetimes(graph: Graph, steps: Steps = None, aliases: dict | None = None,
              every: bool = False, nbytes=value_bytes) -> list[tuple[str, int, int, int]]:
    """(value name, aligned bytes, first step, last step) for every activation, in order.

    `steps`: node indices per execution step (default one node each). A multi-node step (a
    library region, runtime/steps.py) runs as one call: its inputs stay live until it ends,
    its outputs are live from its start, and values produced and read only inside it never
    reach the arena — with `every`, they do, live for the whole step (a region whose
    activations all live in the arena, runtime/steps.py). `aliases`: parts written in place
    into a whole (schedule/aliases.py). `nbytes(value)`: a value's size (default its type's;
    an fp16 GPU plan stores float32 values in half the bytes)."""
    steps = steps or [[i] for i in range(len(graph.nodes))]
    aliases = aliases or {}
    at = {id(graph.nodes[i]): k for k, step in enumerate(steps) for i in step}
    end = len(steps)
    outputs = {id(v) for v in graph.outputs}
    first_part: dict[str, int] = {}
    last_view: dict[str, int] = {}   # a whole's last step: its views' and its parts' readers
    for name, (whole, axis, _) in aliases.items():
        v = graph.values[name]
        k = at[id(v.producer)]
        last = end if id(v) in outputs else max((at[id(c)] for c in v.consumers), default=k)
        whole = view_root(aliases, whole)
        last_view[whole] = max(last, last_view.get(whole, last))
        if not is_view(axis):
            first_part[whole] = min(k, first_part.get(whole, k))
    out = []
    for node in graph.nodes:
        k = at[id(node)]
        for v in dict.fromkeys(node.outputs):
            readers = [at[id(c)] for c in v.consumers]
            if v.name in aliases or (len(steps[k]) > 1 and id(v) not in outputs and not every
                                     and all(r == k for r in readers)):
                continue
            last = end if id(v) in outputs else max(readers, default=k)
            last = max(last, last_view.get(v.name, last))
            out.append((v.name, _aligned(max(nbytes(v), 1), ALIGNMENT),
                        min(k, first_part.get(v.name, k)), last))
    return out


def live_peak(life: list[tuple[str, int, int, int]]) -> int:
    """The most bytes live at one step: no arena can be smaller."""
    if not life:
        return 0
    n = max(last for *_, last in life) + 2
    delta = [0] * n
    for _, size, first, last in life:
        delta[first] += size
        delta[last + 1] -= size
    peak = cur = 0
    for d in delta:
        cur += d
        peak = max(peak, cur)
    return peak


def _place(items, best_fit: bool) -> tuple[int, dict[str, int]]:
    """Place values in the given order, each at the lowest (first-fit) or tightest (best-fit)
    gap beside the placed values whose lifetimes overlap, else on top of them."""
    placed: list[tuple[int, int, int, int]] = []   # offset, size, first, last
    offsets = {}
    for name, size, first, last in items:
        busy = sorted((o, s) for o, s, f, la in placed if f <= last and first <= la)
        best, at = None, 0
        for o, s in busy:
            gap = o - at
            if gap >= size and (best is None or gap < best[0]):
                best = (gap, at)
                if not best_fit:
                    break
            at = max(at, o + s)
        offset = best[1] if best is not None else at
        offsets[name] = offset
        placed.append((offset, size, first, last))
    return max((o + s for o, s, _, _ in placed), default=0), offsets


def _by_breadth(life):
    """TFLite's greedy-by-breadth order: steps by decreasing live bytes, at each step its live
    values largest first (each value once)."""
    steps: dict[int, list] = {}
    for t in life:
        for i in range(t[2], t[3] + 1):
            steps.setdefault(i, []).append(t)
    seen, out = set(), []
    for _, vals in sorted(steps.items(), key=lambda kv: -sum(t[1] for t in kv[1])):
        for t in sorted(vals, key=lambda t: -t[1]):
            if t[0] not in seen:
                seen.add(t[0])
                out.append(t)
    return out


ORDERS = {
    "greedy-by-size": lambda life: sorted(life, key=lambda t: (-t[1], t[2] - t[3], t[0])),
    "greedy-by-breadth": _by_breadth,
    "in-order": lambda life: sorted(life, key=lambda t: (t[2], -t[1], t[0])),
    "greedy-by-area": lambda life: sorted(life, key=lambda t: (-t[1] * (t[3] - t[2] + 1), t[0])),
}


def _exact(life, upper: int, bound: int, seconds: float) -> tuple[int, dict[str, int]] | None:
    """The least arena for these lifetimes as a mixed-integer program (scipy's HiGHS), in
    units of the sizes' greatest common divisor: an offset per value, for each two values
    alive together a binary choosing which lies above the other, the arena above every value
    and at least the live bound. None without scipy, past `seconds` with nothing better than
    `upper`, or when the solver fails."""
    try:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import lil_matrix
    except ImportError:
        return None
    unit = math.gcd(*[t[1] for t in life])
    sizes = [t[1] // unit for t in life]
    top, low = upper // unit, -(-bound // unit)
    pairs = [(i, j) for i in range(len(life)) for j in range(i + 1, len(life))
             if life[i][2] <= life[j][3] and life[j][2] <= life[i][3]]
    n, m = len(life), len(pairs)
    a = lil_matrix((2 * m + n, n + m + 1))
    hi = []
    for k, (i, j) in enumerate(pairs):    # b = 1: i below j; b = 0: j below i
        a[2 * k, i], a[2 * k, j], a[2 * k, n + k] = 1, -1, top
        a[2 * k + 1, j], a[2 * k + 1, i], a[2 * k + 1, n + k] = 1, -1, -top
        hi += [top - sizes[i], -sizes[j]]
    for i in range(n):
        a[2 * m + i, i], a[2 * m + i, n + m] = 1, -1
        hi.append(-sizes[i])
    cost = np.zeros(n + m + 1)
    cost[-1] = 1
    res = milp(cost, constraints=LinearConstraint(a.tocsr(), -np.inf, np.array(hi)),
               integrality=np.ones(n + m + 1),
               bounds=Bounds(np.r_[np.zeros(n + m), low], np.r_[np.full(n, top), np.ones(m), top]),
               options={"time_limit": seconds})
    if res.x is None or round(res.x[-1]) * unit >= upper:
        return None
    offsets = {t[0]: int(round(res.x[i])) * unit for i, t in enumerate(life)}
    return max(offsets[t[0]] + t[1] for t in life), offsets


def plan_arena(graph: Graph, steps: Steps = None, aliases: dict | None = None,
               exact_s: float = 0.0, every: bool = False, nbytes=value_bytes) -> Arena:
    """Offsets for the activations of `graph` in its current node order (grouped into `steps`,
    see `lifetimes`, with `aliases` placed inside their wholes): every placement order in
    ORDERS with best-fit and first-fit gaps; the smallest arena wins. With `exact_s`, an arena
    still above the live bound is then solved exactly (`_exact`) for up to that many
    seconds: the least arena for this order where the solver finishes."""
    life = lifetimes(graph, steps, aliases, every, nbytes)
    bound = live_peak(life)
    best = None
    for name, order in ORDERS.items():
        items = order(life)
        for fit in ("best-fit", "first-fit"):
            size, offsets = _place(items, fit == "best-fit")
            if best is None or size < best.size:
                best = Arena(size, offsets, bound, ALIGNMENT, f"{name} {fit}",
                             dict(aliases or {}))
            if best.size == bound:
                return best
    # Still above the bound: seeded restarts of greedy-by-size with jittered sizes (a fixed
    # number, scaled to the graph, so the plan is reproducible).
    rng = random.Random(0)
    for _ in range(min(64, 20000 // max(len(life), 1))):
        jitter = {t[0]: t[1] * rng.uniform(0.6, 1.4) for t in life}
        size, offsets = _place(sorted(life, key=lambda t: -jitter[t[0]]), True)
        if size < best.size:
            best = Arena(size, offsets, bound, ALIGNMENT, "greedy-by-size, jittered",
                         dict(aliases or {}))
            if size == bound:
                break
    if exact_s > 0 and best.size > bound:
        exact = _exact(life, best.size, bound, exact_s)
        if exact is not None:
            best = Arena(exact[0], exact[1], bound, ALIGNMENT, "exact (MILP)",
                         dict(aliases or {}))
    return best


def check_arena(graph: Graph, arena: Arena, steps: Steps = None,
                every: bool = False) -> str | None:
    """Why `arena` cannot hold `graph`'s activations in its node order and `steps` (None when
    it can): a value without an offset, out of bounds, misaligned, or overlapping a value
    alive at the same time, or an alias that does not fit its whole."""
    problem = alias_problem(graph, arena.aliases, arena.offsets)
    if problem:
        return problem
    spans = []
    for name, size, first, last in lifetimes(graph, steps, arena.aliases, every):
        if name not in arena.offsets:
            return f"value {name!r} has no offset"
        o = arena.offsets[name]
        if o < 0 or o + size > arena.size or o % arena.alignment:
            return f"value {name!r} at offset {o} does not fit an arena of {arena.size} bytes"
        spans.append((first, last, o, o + size, name))
    spans.sort()
    for i, (_, last, lo, hi, name) in enumerate(spans):
        for f2, _, lo2, hi2, name2 in spans[i + 1:]:
            if f2 > last:
                break
            if lo < hi2 and lo2 < hi:
                return f"values {name!r} and {name2!r} overlap while both are alive"
    return None
