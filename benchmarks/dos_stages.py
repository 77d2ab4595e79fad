"""DOS on this machine, measured before a runtime exists (issue 32, first evidence): what would
running independent Halide steps of a tuned plan side by side gain over running them one after
another, each on all cores?

For a saved plan: each Halide step bound to the plan's arena (its inputs and outputs fixed
views) is timed alone on the plan's threads; each pair of such steps with no path between them
(within `--window` steps of each other in plan order) is timed run concurrently — one on the
calling thread, one on a helper thread, each with its parallel loops run alone on its own core
(aot.serial_loops) — interleaved with the pair run in turn. DOS's dynamic program
(schedule/dos.py, stages of at most two steps, in blocks of `--block` steps in plan order)
then schedules the plan's steps with those costs; every other step (library, numpy,
movement) is a stage of its own at its profiled time.
Reported: the sequential total, the greedy and DOS schedules' totals and their ratios, the
pairs that run faster together. The concurrent times include the Python hand-off to the helper
thread (a runtime in C would pay less).

    python benchmarks/dos_stages.py --plan /tmp/e2e/shufflenet_v2_x1_0-fago.wpk \\
        --json benchmarks/results/dos_stages_shufflenet_v2_x1_0_zen3.json
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import numpy as np

import woodpecker
from woodpecker.bench.compare import write_json
from woodpecker.bench.runners import versions
from woodpecker.engines.halide.aot import resting_hook, serial_loops
from woodpecker.schedule.dos import (
    Schedule,
    blocks,
    greedy_schedule,
    optimal_schedule,
    sequential_schedule,
)
from woodpecker.target import Target


class Helper:
    """A thread that runs one call when told to, spinning between calls."""

    def __init__(self) -> None:
        self.call, self.go, self.done = None, False, True
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        serial_loops(True)
        while True:
            while not self.go:
                time.sleep(0)
            self.go = False
            self.call()
            self.done = True

    def run_with(self, mine, theirs) -> None:
        self.call, self.done = theirs, False
        serial_loops(True)
        self.go = True
        mine()
        serial_loops(False)
        while not self.done:
            time.sleep(0)


def step_dag(model) -> tuple[list[int], list[tuple[int, int]]]:
    graph, steps = model.plan.graph, model.steps
    owner = {}
    for s, idx in enumerate(steps):
        for i in idx:
            for v in graph.nodes[i].outputs:
                owner[v.name] = s
    edges = set()
    for s, idx in enumerate(steps):
        for i in idx:
            for v in graph.nodes[i].inputs:
                if v is not None and v.name in owner and owner[v.name] != s:
                    edges.add((owner[v.name], s))
    return list(range(len(steps))), sorted(edges)


def reachable(n: int, edges) -> list[int]:
    """Per step, the bitmask of the steps after it on some path."""
    succ = [[] for _ in range(n)]
    for u, v in edges:
        succ[u].append(v)
    reach = [0] * n
    for u in reversed(range(n)):
        for v in succ[u]:
            reach[u] |= (1 << v) | reach[v]
    return reach


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True)
    p.add_argument("--window", type=int, default=12)
    p.add_argument("--block", type=int, default=16, help="steps per block the DP schedules")
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--json")
    args = p.parse_args()
    model = woodpecker.load(args.plan)
    if not serial_loops(False):
        print("this plan's Halide runtime cannot run loops alone on a thread (saved before "
              "wp_spin_pool_serial): recompile it", file=sys.stderr)
        return 1
    x = {name: np.random.default_rng(0).standard_normal(shape).astype(dtype)
         for name, shape, dtype in model.inputs}
    profile = model.profile(x, runs=10)          # also activates the engines (threads)
    steps = model._executor._steps
    bound = {i: s.bound.call for i, s in enumerate(steps) if s.bound is not None}
    nodes, edges = step_dag(model)
    reach = reachable(len(nodes), edges)
    alone = {i: median_ms(bound[i], args.runs) for i in bound}
    helper = Helper()
    rest = resting_hook() or (lambda: None)   # the pool's spinning workers would hold a core
    pairs = {}
    for i in sorted(bound):
        for j in sorted(bound):
            if not i < j <= i + args.window or reach[i] >> j & 1 or reach[j] >> i & 1:
                continue
            a, b = bound[i], bound[j]
            together, in_turn = [], []
            for _ in range(args.runs):
                rest()
                t0 = time.perf_counter()
                helper.run_with(a, b)
                t1 = time.perf_counter()
                a()
                b()
                t2 = time.perf_counter()
                together.append(t1 - t0)
                in_turn.append(t2 - t1)
            pairs[(i, j)] = (1e3 * float(np.median(together)),
                             1e3 * float(np.median(in_turn)))

    def cost(stage: frozenset) -> tuple[float, str]:
        if len(stage) == 1:
            (i,) = stage
            return alone.get(i, profile[i]), "sequential"
        i, j = sorted(stage)
        conc, seq = pairs.get((i, j), (float("inf"), float("inf")))
        # the paired ratio (same rounds) applied to the steps' own times
        own = cost(frozenset([i]))[0] + cost(frozenset([j]))[0]
        return (own * conc / seq, "concurrent") if conc < seq else (float("inf"), "sequential")

    seq = sequential_schedule(nodes, cost)
    def in_turn_or_pair(stage: frozenset) -> tuple[float, str]:
        """A greedy stage: its pair's concurrent cost where timed and faster, else its
        nodes in turn (wider stages are not timed)."""
        c = cost(stage) if len(stage) <= 2 else (float("inf"), "")
        if c[0] < float("inf"):
            return c
        return sum(cost(frozenset([n]))[0] for n in stage), "sequential"

    greedy = greedy_schedule(nodes, edges, in_turn_or_pair)
    # DOS §4.2: a large graph scheduled in blocks (the DP's states grow with the width)
    stages = []
    for block in blocks(nodes, args.block):
        inside = set(block)
        stages += optimal_schedule(block, [(u, v) for u, v in edges
                                           if u in inside and v in inside],
                                   cost, max_stage=2).stages
    best = Schedule(tuple(stages))
    wins = sorted(((k, v) for k, v in pairs.items() if v[0] < v[1]),
                  key=lambda kv: kv[1][0] / kv[1][1])
    t = Target.parse("cpu", model.plan.target.run_threads)
    print(f"{args.plan}: {len(nodes)} steps, {len(bound)} bound Halide steps, "
          f"{len(pairs)} independent pairs timed, {len(wins)} faster together")
    for (i, j), (c, s) in wins[:10]:
        print(f"  {steps[i].label[:40]:<40} + {steps[j].label[:40]:<40} "
              f"together {c:.3f} ms, in turn {s:.3f} ms ({c / s:.2f}x)")
    print(f"sequential {seq.cost:.3f} ms; greedy {greedy.cost:.3f} ms; DOS {best.cost:.3f} ms "
          f"({best.cost / seq.cost:.3f}x of sequential, "
          f"{sum(1 for s in best.stages if len(s.nodes) > 1)} concurrent stages)")
    if args.json:
        write_json(args.json, {
            "machine": {"cpu": t.cpu, "isa": list(t.isa)}, "versions": versions(),
            "plan": args.plan, "steps": len(nodes), "bound_steps": len(bound),
            "pairs": [{"steps": [steps[i].label, steps[j].label], "together_ms": c,
                       "in_turn_ms": s} for (i, j), (c, s) in pairs.items()],
            "sequential_ms": seq.cost, "greedy_ms": greedy.cost, "dos_ms": best.cost,
            "dos_stages": [sorted(steps[i].label for i in s.nodes) for s in best.stages
                           if len(s.nodes) > 1]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
