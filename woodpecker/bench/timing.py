"""Interleaved latency measurement: every round runs each runtime once, so drift on a noisy
machine hits all runtimes alike; medians, percentiles and paired ratios are reported.

Each round's order is chosen so that each runtime follows each other one about equally often
(`round_orders`). A plain rotation always put the same runtime after torch, whose OpenMP
threads spin on after a call: measured on darts_cifar (1.5-2 ms a run) with Woodpecker's plan
being one ONNX Runtime session, whichever of the two ran after torch lost 5-10 % (paired
ratios 0.91 and 1.03, and 0.99 with torch left out).

With `block` > 1 each runtime runs `block` consecutive calls per round and the first of them is
discarded: a thread pool left spinning by the previous runtime (OpenMP's default wait policy)
then slows only the discarded call. Measured on the per-layer benchmark, where single-call
interleaving let torch's spinning threads halve the next kernel's speed.

Discarding one call is not enough after torch: its OpenMP workers spin for 5-10 ms after a
call (GOMP_SPINCOUNT's default), longer than a kernel's block. `settle` gives such a runtime a
pause, untimed, after each of its blocks (see engines/torch_engine.settle_threads)."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable

import numpy as np

from woodpecker.config import MIN_RUNS
from woodpecker.deadline import Deadline


def time_interleaved(runners: dict[str, Callable[[], object]], runs: int, warmup: int,
                     progress: Callable[[int, int], None] | None = None,
                     block: int = 1,
                     settle: dict[str, Callable[[], object]] | None = None,
                     deadline: Deadline = Deadline.NONE, min_runs: int = MIN_RUNS,
                     ) -> dict[str, list[float]]:
    """`runs` timed calls per runtime, in ms; `settle[name]()`, when given, runs untimed after
    each of that runtime's blocks. Past `deadline` no new round starts once every runtime has
    `min_runs` calls (fewer runs, same pairing: the rounds are whole). `progress(done,
    rounds)` after each round."""
    for fn in runners.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {n: [] for n in runners}
    names = list(runners)
    per_round = max(1, block - 1) if block > 1 else 1
    rounds = -(-runs // per_round)
    for r, order in enumerate(round_orders(names, rounds)):
        for name in order:
            fn = runners[name]
            if block > 1:
                fn()  # absorbs the previous runtime's lingering threads
            for _ in range(per_round):
                if len(times[name]) >= runs:
                    break
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e3)
            if settle and name in settle:
                settle[name]()
        if progress:
            progress(r + 1, rounds)
        if deadline.passed() and all(len(t) >= min_runs for t in times.values()):
            break
    return times


def round_orders(names: list[str], rounds: int) -> list[tuple[str, ...]]:
    """An order of `names` per round such that, counting the pairs across round boundaries
    too, each runtime runs right after each other one about equally often: each round takes
    the permutation that keeps the most frequent such pair least frequent (then the
    squares of the counts least), the first of equals in lexicographic order. Three runtimes
    get every ordered pair once per two rounds; beyond six runtimes, plain rotations."""
    if len(names) > 6:
        return [tuple(names[r % len(names):] + names[:r % len(names)]) for r in range(rounds)]
    counts: Counter = Counter()
    orders: list[tuple[str, ...]] = []
    for _ in range(rounds):
        last = orders[-1][-1:] if orders else ()

        def cost(order, last=last):
            after = counts + Counter(_follows(last + order))
            return max(after.values(), default=0), sum(v * v for v in after.values())
        best = min(itertools.permutations(names), key=cost)
        counts.update(_follows(last + best))
        orders.append(best)
    return orders


def _follows(sequence: tuple[str, ...]):
    """The (runtime, the runtime right after it) pairs of `sequence`, repeats left out."""
    return ((a, b) for a, b in zip(sequence, sequence[1:]) if a != b)


def paired_ratio(times: dict[str, list[float]], base: str, other: str) -> float:
    """The median over `time_interleaved`'s calls of other's time / base's, call j of one
    against call j of the other: both ran in the same round, milliseconds apart. The machine's
    speed drifts by up to 2x within minutes (measured: ONNX Runtime's mobilenet_v2 median
    5.7-9.2 ms in one session), so two medians taken over the same minutes still differ by
    which runs a slow phase hit; a ratio of neighbours cancels the drift and the median
    discards the spikes."""
    return float(np.median(paired_ratios(times, base, other)))


def paired_ratios(times: dict[str, list[float]], base: str, other: str) -> list[float]:
    """Call j of `other` over call j of `base`, for every j (`paired_ratio` takes their
    median)."""
    return [b / a for a, b in zip(times[base], times[other])]
