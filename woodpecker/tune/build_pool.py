"""Compile candidates in parallel, one per core, before they are timed one by one.

Contract: `BuildPool(workers, timeout_s).build(task, template, configs)` compiles
each config into the kernel cache (engines/halide/aot.py, keyed by template, config, task and
engine source) in up to `workers` worker processes at once (tune/worker.py, "build_only"
requests) and returns one `Built` per config: its compile time, or the error that makes it
invalid — a build error, a crashed worker, or a build still running after `timeout_s` (its
worker is killed). The measurement worker then finds each kernel in the cache and only checks
and times it. Building and timing never overlap: the pool is idle while the measurer times,
and the measurer waits while the pool builds, so no timing shares the cores with a compile.

Why (Woodpecker-DL §2.3 Step 2 compiles each candidate just in time; the paper leaves how to
pay for it open): compiling a candidate (Halide lowering and LLVM, 0.3-0.6 s, one core) took
206 s of the 5-minute tuning of MobileNetV3-Small on 2 cores, 647 candidates — the second core
idled for most of the tuning. The tuner hands the pool one candidate per worker at a time
(tune/tuner.py), then times them.
"""

from __future__ import annotations

import json
import select
import subprocess
import tempfile
import time
from dataclasses import dataclass

from woodpecker.config import CANDIDATE_TIMEOUT_S
from woodpecker.tasks import Task
from woodpecker.tune.measure import exit_error, request, spawn_worker, stop_worker


@dataclass(frozen=True)
class Built:
    compile_s: float | None
    error: str | None = None


class BuildPool:
    """`workers` build processes, started when first needed and kept across batches."""

    def __init__(self, workers: int, timeout_s: float = CANDIDATE_TIMEOUT_S) -> None:
        self.workers, self.timeout_s = max(1, workers), timeout_s
        self._procs: list[subprocess.Popen | None] = [None] * self.workers
        self._stderr = tempfile.TemporaryFile()

    def _proc(self, slot: int) -> subprocess.Popen:
        proc = self._procs[slot]
        if proc is None or proc.poll() is not None:
            proc = self._procs[slot] = spawn_worker(1, self._stderr)
        return proc

    def _drop(self, slot: int, kill: bool) -> str:
        """Forget slot's worker (killing it first if `kill`); returns how it ended."""
        proc = self._procs[slot]
        self._procs[slot] = None
        if kill:
            proc.kill()
        return exit_error(proc.wait())

    def build(self, task: Task, template: str, configs: list[dict]) -> list[Built]:
        """One `Built` per config, in order."""
        results: list[Built | None] = [None] * len(configs)
        queue = list(enumerate(configs))
        busy: dict[int, tuple[int, float]] = {}   # slot -> (config index, start)
        while queue or busy:
            for slot in range(self.workers):
                if slot in busy or not queue:
                    continue
                i, config = queue.pop(0)
                proc = self._proc(slot)
                try:
                    proc.stdin.write(json.dumps(request(task, template, config,
                                                        build_only=True)) + "\n")
                    proc.stdin.flush()
                except BrokenPipeError:
                    results[i] = Built(None, self._drop(slot, kill=False))
                    continue
                busy[slot] = (i, time.monotonic())
            if not busy:
                continue
            wait = min(start for _, start in busy.values()) + self.timeout_s - time.monotonic()
            ready, _, _ = select.select([self._procs[s].stdout for s in busy], [], [],
                                        max(0.0, wait))
            for slot, (i, start) in list(busy.items()):
                proc = self._procs[slot]
                if proc.stdout in ready:
                    line = proc.stdout.readline()
                    if line:
                        reply = json.loads(line)
                        results[i] = Built(reply.get("compile_s"), reply.get("error"))
                    else:
                        results[i] = Built(None, self._drop(slot, kill=False))
                elif time.monotonic() - start >= self.timeout_s:
                    self._drop(slot, kill=True)
                    results[i] = Built(None, f"timed out after {self.timeout_s:g}s")
                else:
                    continue
                del busy[slot]
        return results

    def close(self) -> None:
        for slot, proc in enumerate(self._procs):
            if proc is not None:
                stop_worker(proc)
                self._procs[slot] = None
        self._stderr.close()

    def __enter__(self) -> "BuildPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
