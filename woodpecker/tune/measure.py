"""Measure candidates in an isolated worker process with a time limit (Woodpecker-DL §2.3
Step 2: compile just in time, run, time). A crash, hang, build error or wrong output makes the
candidate invalid and the worker is restarted; the search goes on."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from woodpecker.config import CANDIDATE_TIMEOUT_S, MEASURE_REPEATS
from woodpecker.tasks import Task
from woodpecker.tune.records import TuningRecord


def spawn_worker(threads: int, stderr) -> subprocess.Popen:
    """A worker process (tune/worker.py) running kernels on `threads` threads, speaking JSON
    lines on its stdin and stdout; its stderr goes to file `stderr`."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    return subprocess.Popen([sys.executable, "-m", "woodpecker.tune.worker", str(threads)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            env=env, text=True, bufsize=1)


def stop_worker(proc: subprocess.Popen) -> None:
    """End a worker: its input closed, it exits; killed if it has not within 5 s."""
    proc.stdin.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def exit_error(code: int) -> str:
    """The invalid candidate's error for a worker that ended with exit status `code`."""
    how = f"signal {-code}" if code < 0 else f"exit status {code}"
    return f"worker crashed ({how})"


def request(task: Task, template: str, config: dict, **fields) -> dict:
    """The worker's request for one candidate (see tune/worker.py), plus `fields`."""
    return {"template": template, "kind": task.kind, "task": task.to_json(), "config": config,
            **fields}


@dataclass(frozen=True)
class Measurement:
    cost_s: float | None
    error: str | None = None
    compile_s: float | None = None
    ratio: float | None = None   # median time over the reference's, when timed paired

    @property
    def ok(self) -> bool:
        return self.cost_s is not None


class Measurer:
    """A worker process pinned to `threads`; `measure` returns within `timeout_s`."""

    def __init__(self, threads: int = 2, timeout_s: float = CANDIDATE_TIMEOUT_S,
                 repeats: int = MEASURE_REPEATS,
                 seed: int = 0) -> None:
        self.threads, self.timeout_s, self.repeats, self.seed = threads, timeout_s, repeats, seed
        self._proc: subprocess.Popen | None = None
        self._stderr = tempfile.TemporaryFile()

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = spawn_worker(self.threads, self._stderr)
        return self._proc

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def measure(self, template: str, task: Task, config: dict,
                reference: TuningRecord | None = None) -> Measurement:
        """Build, check and time one candidate; with `reference` (a record of `task`, its
        best so far) it is timed paired with that record's kernel (see tune/worker.py)."""
        proc = self._start()
        req = request(task, template, config, repeats=self.repeats, seed=self.seed)
        if reference is not None:
            req["reference"] = {"template": reference.template, "config": dict(reference.config)}
        try:
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            return self._died(proc)
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout_s)
        if not ready:
            self._kill()
            return Measurement(None, f"timed out after {self.timeout_s:g}s")
        line = proc.stdout.readline()
        if not line:
            return self._died(proc)
        reply = json.loads(line)
        if not reply["ok"]:
            return Measurement(None, reply["error"])
        return Measurement(reply["cost_s"], None, reply["compile_s"], reply.get("ratio"))

    def _died(self, proc: subprocess.Popen) -> Measurement:
        code = proc.wait()
        self._proc = None
        return Measurement(None, exit_error(code))

    def close(self) -> None:
        if self._proc is not None:
            stop_worker(self._proc)
            self._proc = None
        self._stderr.close()

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
