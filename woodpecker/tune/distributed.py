"""Tuning spread over a Ray cluster of identical machines: `woodpecker tune MODEL --workers
ray[:ADDRESS]` (the local process pool stays the default).

Unit of work — a tuning task, not a candidate: each Ray task runs one tuning task's whole
search (its templates, its searcher, its own measuring worker and build processes) on one
machine, and streams each record back as it is measured. Why tasks: a search is sequential
(each batch of candidates comes from what the last batch measured), so spreading candidates
would put a network round trip between every batch and the next and mix the timings of several
machines into one search, where small differences between "identical" machines look like
differences between configs; tasks are independent, a model has tens of them, and one machine
per search keeps its timings comparable. The cost: a model with fewer tasks than workers leaves
workers idle.

Budget: with W workers (the cluster's CPUs ÷ the tuning target's threads) the wall-clock budget
B buys W × B of tuning; each task gets that in proportion to its work (tune/session.py's
weights), at most B, the largest first, a new one starting whenever a worker frees up, none
starting past the deadline.

The log: the driver appends every streamed record to the one tuning log at once (same format,
fsynced, stamped with the target), so a worker that dies loses only the candidate it was
measuring; its task is started again once with the time its share has left, seeded from the
records already in the log (the search goes on from them). Workers get the driver's records,
so searches that learn across tasks (xgb, glimpse) see the whole log.
"""

from __future__ import annotations

import queue
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TextIO

from woodpecker.deadline import Deadline
from woodpecker.errors import WoodpeckerError
from woodpecker.ir.graph import Graph
from woodpecker.options import TuneOptions
from woodpecker.progress import Progress
from woodpecker.target import Target
from woodpecker.tune.extract import TaskGroup, extract_tasks
from woodpecker.tune.records import TuningLog


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


def _tune_remote(task, templates, records, exclude, options: TuneOptions, target: Target,
                 seed: int, budget_s: float, regs: int):
    """On a worker: tune `task` for `budget_s`, yielding each record as it is measured."""
    from woodpecker.target import default_threads
    from woodpecker.tune.build_pool import BuildPool
    from woodpecker.tune.measure import Measurer
    from woodpecker.tune.tuner import tune_templates

    out: queue.Queue = queue.Queue()
    path = Path(tempfile.mkdtemp()) / "seed.jsonl"
    path.write_text("".join(TuningLog.line(r) for r in records))

    class Forwarding(TuningLog):
        def append(self, record: dict) -> None:
            super().append(record)
            out.put(self.records[-1] if self.records else record)

    log = Forwarding(path, target.record_key, exclude)
    done = object()

    def run():
        try:
            workers = options.build_workers or default_threads()
            with Measurer(threads=target.threads, timeout_s=options.timeout_s) as measurer, \
                    BuildPool(workers, options.timeout_s) as pool:
                end = time.monotonic() + budget_s
                tune_templates(task, templates, measurer, log, search=options.search,
                               seed=seed, vector_registers=regs, deadline=end,
                               max_trials=options.max_trials,
                               builder=pool if workers > 1 else None, target=target,
                               hard_deadline=end)
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

    from woodpecker.engines.halide.runtime import host_vector_registers
    from woodpecker.tune.session import work_weights

    out = out or sys.stderr
    deadline = deadline or Deadline.after(options.budget_s)
    workers = connect(address, target.threads)
    remote = ray.remote(num_returns="streaming", max_retries=0,
                        num_cpus=target.threads)(_tune_remote)
    groups = [g for g in extract_tasks(graph, parts=True)
              if any(t not in log.exclude for t in g.templates)]
    weights = work_weights(groups)
    wall = deadline.left()
    shares = [min(wall, wall * workers * w / sum(weights)) for w in weights]
    pending = sorted(range(len(groups)), key=lambda i: -shares[i])
    regs = host_vector_registers(target.isa)
    shared = ray.put(list(log.records))
    lock = threading.Lock()
    stats = {"workers": workers, "tasks": len(groups), "records": 0, "restarted": []}
    started: dict[int, float] = {}

    def follow(i: int, stream, bar: Progress) -> None:
        g: TaskGroup = groups[i]
        try:
            for ref in stream:
                rec = ray.get(ref)
                with lock:
                    log.append({k: v for k, v in rec.items() if k != "target"})
                    stats["records"] += 1
                    bar.update(wall - deadline.left(), f"{stats['records']} measured on "
                                                       f"{workers} worker(s)")
        except Exception as e:  # noqa: BLE001 - a worker that died, or a failed task
            left = shares[i] - (time.monotonic() - started[i])
            first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            with lock:
                bar.note(f"task {g.task.describe()}: worker lost ({first[:80]}); "
                         f"{'restarting with ' + f'{left:.0f} s' if left > 1 else 'no time left'}")
                if left > 1 and i not in stats["restarted"]:
                    stats["restarted"].append(i)
                    shares[i] = left
                    pending.insert(0, i)

    threads: dict[int, threading.Thread] = {}
    with Progress("tuning on Ray", wall, out, unit="s") as bar:
        while pending or any(t.is_alive() for t in threads.values()):
            running = sum(t.is_alive() for t in threads.values())
            while pending and running < workers and not deadline.passed():
                with lock:
                    i = pending.pop(0)
                share = min(shares[i], deadline.left())
                started[i] = time.monotonic()
                with lock:
                    seed_records = list(log.records) if i in stats["restarted"] else shared
                stream = remote.remote(groups[i].task, groups[i].templates, seed_records,
                                       log.exclude, options, target, options.seed + i, share,
                                       regs)
                threads[i] = threading.Thread(target=follow, args=(i, stream, bar), daemon=True)
                threads[i].start()
                running += 1
            if deadline.passed() and not any(t.is_alive() for t in threads.values()):
                break
            time.sleep(0.2)
    stats["restarted"] = [groups[i].task.describe() for i in stats["restarted"]]
    return stats
