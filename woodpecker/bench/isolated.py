"""Time runtimes each in its own process, interleaved in blocks from one driver.

Why: in one process the runtimes disturb each other — measured, a tuned Halide kernel ran 88.8
GFLOP/s alone, 47.2 right after a torch call and 68.8 even 50 ms later (torch's OpenMP pool,
allocator and cache state). A process per runtime keeps each one's threads, heap and warm state
its own; the driver still interleaves blocks of calls (first call of a block discarded, see
timing.py) so machine drift hits every runtime alike. Only one process runs at a time.

A runtime is given as `builder` (a `lazy.Lazy` of a function) and keyword arguments; the
function runs in the child and returns the zero-argument callable to time.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np

from woodpecker.lazy import Lazy


def _serve(conn, builder: Lazy, kwargs: dict) -> None:
    try:
        fn = builder.load()(**kwargs)
        conn.send(("ready", None))
    except Exception as e:  # noqa: BLE001 - reported to the driver
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    while True:
        n = conn.recv()
        if n is None:
            return
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        conn.send(("times", times))


class IsolatedRuntime:
    def __init__(self, builder: Lazy, **kwargs) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, builder, kwargs), daemon=True)
        self._proc.start()
        kind, msg = self._conn.recv()
        if kind == "error":
            self.close()
            raise RuntimeError(f"{builder}: {msg}")

    def calls(self, n: int) -> list[float]:
        """Run `n` calls in the child; their times in ms."""
        self._conn.send(n)
        return self._conn.recv()[1]

    def close(self) -> None:
        try:
            self._conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()


def time_isolated(runtimes: dict[str, IsolatedRuntime], runs: int, warmup: int = 3,
                  block: int = 5) -> dict[str, list[float]]:
    """`runs` timed calls per runtime (ms): rounds of one block per runtime, rotating order."""
    for r in runtimes.values():
        r.calls(warmup)
    times: dict[str, list[float]] = {n: [] for n in runtimes}
    names = list(runtimes)
    per_round = max(1, block - 1)
    for rnd in range(-(-runs // per_round)):
        for k in range(len(names)):
            name = names[(rnd + k) % len(names)]
            need = min(per_round, runs - len(times[name]))
            if need > 0:
                times[name] += runtimes[name].calls(need + 1)[1:]
    return times


def isolated_medians(runtimes: dict[str, IsolatedRuntime], runs: int, warmup: int = 3,
                     block: int = 5) -> dict[str, float]:
    """The median ms per runtime of `time_isolated`; every runtime's process ended after,
    whatever happens."""
    try:
        times = time_isolated(runtimes, runs, warmup, block)
    finally:
        for r in runtimes.values():
            r.close()
    return {k: float(np.median(v)) for k, v in times.items()}
