"""SERENITY's dynamic-programming scheduler (thesis §3.4.1, Algorithm 2), with its two speed-ups:
divide-and-conquer at hourglass points (§3.4.2) and adaptive soft budgeting (Algorithm 3).

Signature. Algorithm 2 memoises on the zero-indegree set z_i. The set of scheduled nodes is an
equivalent key (a down-closed set and the minimal elements of its complement determine each
other) and is what we store, as one int bitset; the bytes live after a prefix depend only on
that set, so per key only the least peak matters (Theorem 1).

Divide-and-conquer. A node p is a cut when every other node is its ancestor or its descendant:
then every topological order runs the ancestors first, p, then the descendants, and the live
bytes at p depend on nothing but that split. The thesis cuts where one value separates the
graph; this condition also allows the values that skip over p (a ResNet shortcut), and stays
exact: each part is scheduled by the DP from the state the earlier parts leave, and the peak
of the whole is the max of the parts' peaks.

Soft budgeting. With a budget tau >= the optimum, pruning every prefix whose peak exceeds tau
keeps the optimum (Figure 3.8a). Algorithm 3 starts at Kahn's peak and binary-searches tau:
halve it on a step timeout, move half-way back up on "no solution". A solution at any tau is
optimal. Choices where the paper is silent: the hard budget is the better of Kahn's and the
input order's peaks, so no part ends worse than the order it came in; when the searches run
out of time without a solution, beam searches may still lower the peak, and the part keeps the
best order found, reported as not proven optimal.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

from woodpecker.config import MEMORY_PART_S, MEMORY_STEP_S
from woodpecker.schedule.problem import MemoryProblem, bits


class NoSolution(Exception):
    """No order of the part keeps its peak within the budget."""


class StepTimeout(Exception):
    """The DP step ran past its time limit."""


@dataclass
class Units:
    """What the DP orders: groups of nodes that run back to back (singletons for the exact DP).
    `preds[i]` is the node bitset unit i waits for, `succs[i]` the units waiting for it."""

    members: list[list[int]]
    preds: list[int]
    succs: list[list[int]]

    @classmethod
    def group(cls, p: MemoryProblem, groups: list[list[int]]) -> "Units":
        owner = {u: i for i, g in enumerate(groups) for u in g}
        preds, succs = [], [set() for _ in groups]
        for i, g in enumerate(groups):
            inside = sum(1 << u for u in g)
            need = 0
            for u in g:
                need |= p.preds[u]
            need &= ~inside
            preds.append(need)
            for q in bits(need):
                if q in owner:
                    succs[owner[q]].add(i)
        return cls(groups, preds, [sorted(x) for x in succs])


def singletons(p: MemoryProblem, nodes: int) -> Units:
    return Units.group(p, [[u] for u in bits(nodes)])


def in_trees(p: MemoryProblem, nodes: int) -> Units:
    """Coarsening (our choice, beyond the paper): a node read by exactly one other node of the
    part joins that reader's unit, so each unit is an in-tree computed just before its root is
    needed (a RandWire node's weighted sum, ReLU and separable conv become one unit). Exact
    for the coarse problem, not always for the original one."""
    root = {}
    for u in reversed(bits(nodes)):
        s = [v for v in p.succs[u] if nodes >> v & 1]
        only = len(s) == 1 and len(p.succs[u]) == 1 and not p.is_output[u]
        root[u] = root[s[0]] if only else u
    groups: dict[int, list[int]] = {}
    for u in bits(nodes):
        groups.setdefault(root[u], []).append(u)
    return Units.group(p, list(groups.values()))


def dp_schedule(p: MemoryProblem, nodes: int | None = None, mask: int = 0, mem: int = 0,
                budget: float | None = None, deadline: float | None = None,
                units: Units | None = None, width: int | None = None
                ) -> tuple[list[int], int, int]:
    """Algorithm 2 on the nodes in `nodes` (grouped into `units`, default one per node), from
    state (mask, mem): (order, peak, states explored).

    Prefixes whose peak exceeds `budget` are pruned (NoSolution when none is left);
    `deadline` (time.monotonic) raises StepTimeout. With `width`, each level keeps only its
    `width` best prefixes by (peak, live bytes): a beam search, fast but not exact."""
    nodes = (1 << p.n) - 1 if nodes is None else nodes
    units = units or singletons(p, nodes)
    members, upreds, usuccs, step = units.members, units.preds, units.succs, p.step
    frontier = 0
    for i, need in enumerate(upreds):
        if not need & ~mask:
            frontier |= 1 << i
    # level: mask -> (peak, mem, frontier); back: mask -> (parent mask, unit) per level
    level = {mask: (mem, mem, frontier)}
    back: list[dict[int, tuple[int, int]]] = []
    states = 1
    for _ in range(len(members)):
        nxt: dict[int, tuple[int, int, int]] = {}
        links: dict[int, tuple[int, int]] = {}
        for m, (peak, cur, front) in level.items():
            f = front
            while f:
                low = f & -f
                f ^= low
                i = low.bit_length() - 1
                top, after, after_mem = peak, m, cur
                for u in members[i]:
                    t, after_mem = step(after, after_mem, u)
                    after |= 1 << u
                    if t > top:
                        top = t
                if budget is not None and top > budget:
                    continue
                old = nxt.get(after)
                if old is not None and old[0] <= top:
                    continue
                new_front = front ^ low
                for w in usuccs[i]:
                    if not upreds[w] & ~after:
                        new_front |= 1 << w
                nxt[after] = (top, after_mem, new_front)
                links[after] = (m, i)
            states += 1
            if not states & 4095 and deadline is not None and time.monotonic() > deadline:
                raise StepTimeout
        if not nxt:
            raise NoSolution
        if width is not None and len(nxt) > width:
            nxt = dict(heapq.nsmallest(width, nxt.items(), key=lambda kv: kv[1][:2]))
        back.append(links)
        level = nxt
    (end, (peak, _, _)), = level.items()
    order = []
    for links in reversed(back):
        end, i = links[end]
        order += reversed(members[i])
    order.reverse()
    return order, peak, states


@dataclass
class PartReport:
    nodes: int
    peak: int
    optimal: bool               # proven least peak for this part
    method: str = "dp"          # "dp", "dp-coarse" (in-tree units) or "kahn" (fallback)
    states: int = 0
    lower: int = 0              # proven lower bound on the part's least peak
    budgets: list[int] = field(default_factory=list)   # the soft budgets tried, in order


def lower_bound(p: MemoryProblem, nodes: int, mem: int) -> int:
    """No order of the part peaks below this: the bytes live at the start, or any node's
    outputs together with the activations it reads."""
    lb = mem
    for u in bits(nodes):
        lb = max(lb, p.alloc[u] + sum(size for size, _ in p.reads[u]))
    return lb


def soft_budget_schedule(p: MemoryProblem, nodes: int, mask: int, mem: int, hard: int,
                         units: Units | None = None, step_seconds: float = MEMORY_STEP_S,
                         total_seconds: float = MEMORY_PART_S,
                         ) -> tuple[list[int] | None, PartReport]:
    """Algorithm 3 on one part: the DP under a soft budget tau found by binary search below the
    hard budget `hard`, the peak of an order already known (schedule_part picks it), so the
    search starts just under it, looking for a better order. A timeout lowers tau, "no
    solution" raises it; we keep the bracket (highest tau without a solution, lowest that timed
    out) and bisect it, which is Algorithm 3's update with its bounds remembered. The order is
    None when no solution turned up within `total_seconds`; `report.lower` is then what was
    proven."""
    report = PartReport(bin(nodes).count("1"), hard, False, "kahn")
    tau = hard - 1
    lo, hi = lower_bound(p, nodes, mem) - 1, None
    stop = time.monotonic() + total_seconds
    while tau > lo and time.monotonic() < stop:
        report.budgets.append(tau)
        try:
            order, peak, states = dp_schedule(p, nodes, mask, mem, tau,
                                              min(stop, time.monotonic() + step_seconds), units)
        except StepTimeout:
            hi = tau
        except NoSolution:
            lo = tau
        else:
            report.peak, report.optimal, report.states = peak, units is None, states
            report.method, report.lower = ("dp", peak) if units is None else ("dp-coarse", lo + 1)
            return order, report
        tau = (lo + (hard if hi is None else hi)) // 2
        if hi is not None and tau <= lo:
            break
    report.lower = lo + 1
    return None, report


def proven_floor(p: MemoryProblem, nodes: int, mask: int, mem: int, lower: int, upper: int,
                 seconds: float) -> tuple[int, list[int] | None, int]:
    """Bisect the part's least peak between `lower` (no order peaks below it) and `upper` (an
    order reaches it) with the exact DP pruned at each trial budget: "no solution" raises the
    proven floor, a solution is a better order, a timeout moves the next trial down (a low
    budget prunes more, so it is proven faster). Returns (floor, order or None, its peak) —
    how far from optimal a schedule the time-limited search returned can be."""
    best, stop = None, time.monotonic() + seconds
    lo, hi, tau = lower - 1, upper, (lower - 1 + upper) // 2
    while lo < tau < hi and time.monotonic() < stop:
        try:
            order, peak, _ = dp_schedule(p, nodes, mask, mem, tau,
                                         min(stop, time.monotonic() + seconds / 2))
        except NoSolution:
            lo = tau
            tau = (lo + hi) // 2
        except StepTimeout:
            tau = (lo + tau) // 2
        else:
            best, hi = order, peak
            tau = (lo + hi) // 2
    return lo + 1, best, hi


def least_peak_floor(p: MemoryProblem, report: "ScheduleReport", seconds_per_part: float
                     ) -> int:
    """A proven lower bound on the least peak of any order of the whole graph, for a report of
    memory_schedule with divide-and-conquer: the largest of its parts' floors (every order
    enters a part from the same state), proven_floor on the parts not proven optimal whose
    peak is above the floor so far (below it, they cannot raise it)."""
    floor = mask = mem = 0
    for nodes, rep in zip(parts(p), report.parts, strict=True):
        if rep.optimal:
            part_floor = rep.peak
        elif rep.peak <= floor:
            part_floor = rep.lower
        else:
            part_floor = proven_floor(p, nodes, mask, mem, rep.lower, rep.peak,
                                      seconds_per_part)[0]
        floor = max(floor, part_floor)
        for u in bits(nodes):   # node indices are a topological order
            _, mem = p.step(mask, mem, u)
            mask |= 1 << u
    return floor


def cut_points(p: MemoryProblem, nodes: int | None = None) -> list[int]:
    """Nodes of which every other node is an ancestor or a descendant (hourglass points), in
    order. Ancestor/descendant sets are bitsets built in one pass each way."""
    n = p.n
    everything = (1 << n) - 1 if nodes is None else nodes
    anc = [0] * n
    for u in range(n):
        a = 0
        for q in bits(p.preds[u]):
            a |= anc[q] | 1 << q
        anc[u] = a
    desc = [0] * n
    for u in range(n - 1, -1, -1):
        d = 0
        for v in p.succs[u]:
            d |= desc[v] | 1 << v
        desc[u] = d
    return [u for u in bits(everything)
            if (anc[u] | desc[u] | 1 << u) & everything == everything]


def parts(p: MemoryProblem) -> list[int]:
    """The graph split at its cut points: a list of node bitsets in execution order."""
    out, done = [], 0
    for c in cut_points(p):
        part = _closure_upto(p, c) & ~done   # c and whatever of its ancestors is not placed
        out.append(part)
        done |= part
    rest = (1 << p.n) - 1 & ~done
    return out + [rest] if rest else out


def _closure_upto(p: MemoryProblem, c: int) -> int:
    """c and its ancestors."""
    seen, stack = 1 << c, [c]
    while stack:
        u = stack.pop()
        for q in bits(p.preds[u] & ~seen):
            seen |= 1 << q
            stack.append(q)
    return seen


@dataclass
class ScheduleReport:
    peak: int
    optimal: bool
    seconds: float
    parts: list[PartReport]


def beam_order(p: MemoryProblem, nodes: int, mask: int, mem: int, floor: int,
               seconds: float = 1.0) -> tuple[list[int], int] | None:
    """The best of beam searches (Algorithm 2 keeping each level's best prefixes; our addition
    for parts the exact search cannot finish): the beam starts 32 wide and doubles while its
    peak is above `floor`, it may still have cut a level (it explored more states than its
    width) and `seconds` last. On RandWire's 180-node stages 128–256 wide beams find peaks
    6–20 % below what the time-limited exact search returns. None if no beam finished."""
    best, stop, width = None, time.monotonic() + seconds, 32
    while best is None or best[1] > floor:
        try:
            order, peak, states = dp_schedule(p, nodes, mask, mem, deadline=stop, width=width)
        except StepTimeout:
            break
        if best is None or peak < best[1]:
            best = (order, peak)
        if states <= width:
            break
        width *= 2
    return best


def schedule_part(p: MemoryProblem, nodes: int, mask: int, mem: int, soft_budget: bool = True,
                  step_seconds: float = MEMORY_STEP_S, total_seconds: float = MEMORY_PART_S,
                  deadline: float | None = None) -> tuple[list[int], PartReport]:
    """One part. Without soft budgeting: the plain exact DP. With it: the better of the input
    order and Kahn's is the hard budget (Algorithm 3 takes Kahn's; a lower feasible one only
    narrows the search, and the schedule is never worse than the order the graph came in) of
    the DP over in-tree units (in_trees, fast), whose peak, when lower, then serves as the
    hard budget of the exact DP's soft budgeting. The exact DP either finds a better order or
    shows that none exists below the best peak so far (proving it optimal); if it does
    neither, beam searches (beam_order) may still improve the order. Within `total_seconds`
    of each search; the plain DP raises StepTimeout past `deadline`."""
    if not soft_budget:
        order, peak, states = dp_schedule(p, nodes, mask, mem, deadline=deadline)
        return order, PartReport(bin(nodes).count("1"), peak, True, "dp", states, peak)
    best = min((p.simulate(order, mask, mem)[0], method, order)
               for method, order in (("input", bits(nodes)), ("kahn", p.kahn(nodes, mask))))
    coarse, rep = soft_budget_schedule(p, nodes, mask, mem, best[0], in_trees(p, nodes),
                                       step_seconds, total_seconds)
    if coarse is not None:
        best = (rep.peak, rep.method, coarse)
    exact, rep2 = soft_budget_schedule(p, nodes, mask, mem, best[0], None, step_seconds,
                                       total_seconds)
    rep2.budgets = rep.budgets + rep2.budgets
    rep2.states += rep.states
    if exact is not None:
        return exact, rep2
    if rep2.lower < best[0]:
        beam = beam_order(p, nodes, mask, mem, rep2.lower, total_seconds)
        if beam is not None and beam[1] < best[0]:
            best = (beam[1], "beam", beam[0])
    rep2.peak, rep2.method = best[0], best[1]
    rep2.optimal = rep2.lower >= best[0]
    return best[2], rep2


def memory_schedule(p: MemoryProblem, divide: bool = True, soft_budget: bool = True,
                    step_seconds: float = MEMORY_STEP_S, total_seconds: float = MEMORY_PART_S,
                    budget: int | None = None, time_limit: float | None = None
                    ) -> tuple[list[int], ScheduleReport]:
    """The least-peak order of all nodes (SERENITY): per part (divide-and-conquer) the DP with
    soft budgeting. With `budget` (bytes), NoSolution when no order fits it. `time_limit`
    bounds the plain DP (without soft budgeting) for benchmarks: StepTimeout past it."""
    start = time.monotonic()
    deadline = None if time_limit is None else start + time_limit
    groups = parts(p) if divide else [(1 << p.n) - 1]
    order: list[int] = []
    reports: list[PartReport] = []
    mask = mem = peak = 0
    for g in groups:
        sub, rep = schedule_part(p, g, mask, mem, soft_budget, step_seconds, total_seconds,
                                 deadline)
        if budget is not None and rep.peak > budget:
            if not rep.optimal:   # settle it: the exact DP pruned at the budget
                sub, rep.peak, rep.states = dp_schedule(p, g, mask, mem, budget)
                rep.optimal, rep.method = True, "dp"
            if rep.peak > budget:
                raise NoSolution(f"the least peak is {rep.peak} bytes")
        reports.append(rep)
        order += sub
        for u in sub:
            top, mem = p.step(mask, mem, u)
            mask |= 1 << u
            peak = max(peak, top)
    return order, ScheduleReport(peak, all(r.optimal for r in reports),
                                 time.monotonic() - start, reports)
