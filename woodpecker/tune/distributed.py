"""Tuning spread over a Ray cluster of identical machines: `woodpecker tune MODEL --workers
ray[:ADDRESS]` (the local process pool stays the default).

Unit of work — a tuning task, not a candidate: each worker (a Ray actor per `--threads` cores
of the cluster, keeping its measuring and build processes from one task to the next) runs one
tuning task's whole search (its templates, its searcher) at a time, and streams each record
back as it is measured. Why tasks: a search is sequential
(each batch of candidates comes from what the last batch measured), so spreading candidates
would put a network round trip between every batch and the next and mix the timings of several
machines into one search, where small differences between "identical" machines look like
differences between configs; tasks are independent, a model has tens of them, and one machine
per search keeps its timings comparable. The cost: a model with fewer tasks than workers leaves
workers idle.

Budget: with W workers (the cluster's CPUs ÷ the tuning target's threads) the wall-clock budget
B buys W × B of tuning. Tasks start largest first whenever a worker frees up, none past the
deadline; each gets, when it starts, its part by work (tune/driver.py's weights) of the
capacity left — every worker's time to the deadline less what running tasks still hold — among
itself and the tasks waiting, at most the time to the deadline, so every task gets a turn.

The log: the driver appends every streamed record to the one tuning log at once (same format,
fsynced, stamped with the target), so a worker that dies loses only the candidate it was
measuring; a new worker takes its place, and its task is started again once with the time its
share has left, seeded from the records already in the log (the search goes on from them).
Workers get the driver's records, so searches that learn across tasks (xgb, glimpse) see the
whole log.
"""

from __future__ import annotations

import queue
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from woodpecker.config import RAY_TASK_OVERRUN_S
from woodpecker.deadline import Deadline
from woodpecker.errors import WoodpeckerError, first_line
from woodpecker.ir.graph import Graph
from woodpecker.options import TuneOptions
from woodpecker.progress import Progress
from woodpecker.target import Target
from woodpecker.tune.extract import TaskGroup, extract_tasks
from woodpecker.tune.records import TuningLog, TuningRecord


def connect(address: str | None, threads: int) -> int:
    """Join the Ray cluster at `address` (None: start a local one on 127.0.0.1); the number of
    tasks that can tune at once (its CPUs ÷ `threads`)."""
    try:
        import ray
    except ImportError:
        raise WoodpeckerError("--workers ray needs Ray (pip install 'woodpecker[ray]')") from None
    if not ray.is_initialized():
        kw = {"address": address} if address else {"_node_ip_address": "127.0.0.1"}
        ray.init(include_dashboard=False, log_to_driver=False, **kw)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if cpus < threads:
        raise WoodpeckerError(f"the Ray cluster has {cpus} CPU(s); tuning needs {threads} per "
                              "task (--threads)")
    return cpus // threads


class _Tuner:
    """A Ray actor per worker: its measuring process and build processes stay up from one
    tuning task to the next (starting them took a good part of a small task's share)."""

    def __init__(self, target: Target, options: TuneOptions) -> None:
        from woodpecker.target import default_threads
        from woodpecker.tune.build_pool import BuildPool
        from woodpecker.tune.measure import Measurer

        self.target, self.options = target, options
        self.measurer = Measurer(threads=target.threads, timeout_s=options.timeout_s)
        workers = options.build_workers or default_threads()
        self.pool = BuildPool(workers, options.timeout_s) if workers > 1 else None
        # what searchers derive from the records, kept from one task to the next: the records'
        # feature rows and the pre-trained cost model (its digest hashes the whole database)
        self.derived: dict = {}

    def ready(self) -> bool:
        return True

    def tune(self, task, templates, records, exclude, seed: int, budget_s: float, regs: int,
             database=()):
        """Tune `task` for `budget_s`, yielding each record as it is measured; `database`:
        the driver's tuning-database records (tune/database.py), attached after `records`."""
        from woodpecker.tune.tuner import tune_templates

        out: queue.Queue = queue.Queue()
        path = Path(tempfile.mkdtemp()) / "seed.jsonl"
        path.write_text("".join(TuningLog.line(r) for r in records))

        class Forwarding(TuningLog):
            def append(self, record: TuningRecord) -> None:
                super().append(record)
                out.put(self.records[-1] if self.records else record)

        log = Forwarding(path, self.target.record_key, exclude)
        log.attach(database)      # the driver's, the same in every call
        log.derived = self.derived
        done = object()

        def run():
            try:
                end = time.monotonic() + budget_s
                tune_templates(task, templates, self.measurer, log, search=self.options.search,
                               seed=seed, vector_registers=regs, deadline=end,
                               max_trials=self.options.max_trials, builder=self.pool,
                               target=self.target, hard_deadline=end)
            finally:
                out.put(done)

        threading.Thread(target=run, daemon=True).start()
        while (item := out.get()) is not done:
            yield item


def tune_graph_ray(graph: Graph, target: Target, log: TuningLog, options: TuneOptions,
                   address: str | None = None, out: TextIO | None = None,
                   deadline: Deadline | None = None) -> dict:
    """Tune each task of `graph` on the Ray cluster at `address` into `log` until `deadline`
    (default: the options' budget from now). Returns what happened: workers, tasks,
    records, tasks restarted after a worker died."""
    import ray

    from woodpecker.engines.halide.host import host_vector_registers
    from woodpecker.tune.db_index import MemoryIndex
    from woodpecker.tune.driver import prepare_search, work_weights

    out = out or sys.stderr
    workers = connect(address, target.threads)     # before the budget starts: set-up
    prepare_search(options.search, log, target)    # the workers load its cost model
    deadline = deadline or Deadline.after(options.budget_s)
    actor = ray.remote(num_cpus=target.threads, max_restarts=0)(_Tuner)
    idle = [actor.remote(target, options) for _ in range(workers)]
    ray.get([a.ready.remote() for a in idle])
    groups = [g for g in extract_tasks(graph, parts=True)
              if any(t not in log.exclude for t in g.templates)]
    weights = work_weights(groups)
    wall = deadline.left()
    shares = [min(wall, wall * workers * w / sum(weights)) for w in weights]
    pending = sorted(range(len(groups)), key=lambda i: -shares[i])
    regs = host_vector_registers(target.isa)
    shared = ray.put(list(log.records))
    # the driver's database, whatever a worker has (its digest: the pre-trained model's key)
    database = ray.put(MemoryIndex(log.transfer, digest=log.database.digest)
                       if log.database is not None else MemoryIndex())
    lock = threading.Lock()
    stats = {"workers": workers, "tasks": len(groups), "records": 0, "restarted": []}
    ends: dict[int, float] = {}    # when each started task's share runs out
    done: set[int] = set()

    def follow(i: int, worker, stream, bar: Progress) -> None:
        g: TaskGroup = groups[i]
        try:
            for ref in stream:
                rec = ray.get(ref)
                with lock:
                    log.append(replace(rec, target=None))   # stamped the driver's
                    stats["records"] += 1
                    bar.update(wall - deadline.left(), f"{stats['records']} measured on "
                                                       f"{workers} worker(s)")
            with lock:
                idle.append(worker)
                done.add(i)
        except Exception as e:  # noqa: BLE001 - a worker that died, or a failed task
            left = ends[i] - time.monotonic()
            with lock:
                done.add(i)
                bar.note(f"task {g.task.describe()}: worker lost ({first_line(e)[:80]}); "
                         f"{'restarting with ' + f'{left:.0f} s' if left > 1 else 'no time left'}")
                idle.append(actor.remote(target, options))     # a new worker in its place
                if left > 1 and i not in stats["restarted"]:
                    stats["restarted"].append(i)
                    shares[i] = left
                    done.discard(i)
                    pending.insert(0, i)

    threads: list[threading.Thread] = []
    with Progress("tuning on Ray", wall, out, unit="s") as bar:
        while True:
            with lock:
                while pending and idle and not deadline.passed():
                    i, worker = pending.pop(0), idle.pop()
                    now = time.monotonic()
                    # this task's part of the capacity left: every worker's time to the
                    # deadline less what the running tasks still hold, split by work among
                    # this task and those waiting
                    held = sum(max(0.0, ends[j] - now) for j in ends if j not in done)
                    # each task runs on past its share by the candidate it is measuring
                    capacity = deadline.left() * workers - held \
                        - RAY_TASK_OVERRUN_S * (len(pending) + 1)
                    part = weights[i] / sum(weights[j] for j in [i, *pending])
                    shares[i] = min(shares[i], deadline.left(), max(0.5, capacity * part))
                    ends[i] = now + shares[i]
                    records = list(log.records) if i in stats["restarted"] else shared
                    stream = worker.tune.options(num_returns="streaming").remote(
                        groups[i].task, groups[i].templates, records, log.exclude,
                        options.seed + i, shares[i], regs, database)
                    t = threading.Thread(target=follow, args=(i, worker, stream, bar),
                                         daemon=True)
                    t.start()
                    threads.append(t)
            busy = any(t.is_alive() for t in threads)
            if not busy and (not pending or deadline.passed()):
                break
            time.sleep(0.1)
    stats["restarted"] = [groups[i].task.describe() for i in stats["restarted"]]
    return stats
