"""Interleaved latency measurement: every round runs each runtime in rotating order, so drift
on a noisy machine hits all runtimes alike; medians, percentiles and paired ratios are reported.

With `block` > 1 each runtime runs `block` consecutive calls per round and the first of them is
discarded: a thread pool left spinning by the previous runtime (OpenMP's default wait policy)
then slows only the discarded call. Measured on the per-layer benchmark, where single-call
interleaving let torch's spinning threads halve the next kernel's speed."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np


def time_interleaved(runners: dict[str, Callable[[], object]], runs: int, warmup: int,
                     progress: Callable[[str], None] | None = None,
                     block: int = 1) -> dict[str, list[float]]:
    """`runs` timed calls per runtime, in ms."""
    for fn in runners.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {n: [] for n in runners}
    names = list(runners)
    per_round = max(1, block - 1) if block > 1 else 1
    rounds = -(-runs // per_round)
    for r in range(rounds):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            fn = runners[name]
            if block > 1:
                fn()  # absorbs the previous runtime's lingering threads
            for _ in range(per_round):
                if len(times[name]) >= runs:
                    break
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e3)
        if progress and (r + 1) % max(1, rounds // 10) == 0:
            progress(f"round {r + 1}/{rounds}")
    return times


def paired_ratio(times: dict[str, list[float]], base: str, other: str) -> float:
    """The median over `time_interleaved`'s calls of other's time / base's, call j of one
    against call j of the other: both ran in the same round, milliseconds apart. The machine's
    speed drifts by up to 2x within minutes (measured: ONNX Runtime's mobilenet_v2 median
    5.7-9.2 ms in one session), so two medians taken over the same minutes still differ by
    which runs a slow phase hit; a ratio of neighbours cancels the drift and the median
    discards the spikes."""
    return float(np.median([b / a for a, b in zip(times[base], times[other])]))
