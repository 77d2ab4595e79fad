"""Tune every task of a graph under one time budget, with a live progress line — what both
`woodpecker tune` and `woodpecker compile --tune` run.

Budget split (WPK leaves it open): each task gets the remaining time in proportion to its work
(its expected run time times the layers that share it) among the tasks left, but never less
than `MIN_SHARE` of the total work, so a pool or a classifier does not take a convolution's time
yet still gets a search. Time a task does not use (its search converged, or every config is
already in the log) goes to the tasks after it; a task that has nothing valid when its share
ends goes on until one candidate is measured (tune/tuner.py), and the tasks after it get less.

New candidates are compiled in parallel, one per core, then timed one by one
(tune/build_pool.py).

Tasks of one shape class (the same schedule space: a conv and its twin with another fused
epilogue, a bias or a squeeze-and-excitation scale read first, issue 52) share a search: the
first to be tuned gets the class's weight but `CLASS_FOLLOWER_SHARE` of each follower's, and
each follower measures the best configs its twins found before searching on
(`shape_classes`).

A budget too short to give every task `MIN_TASK_S` (one chunk of candidates built and timed)
tunes the heaviest tasks it can, heaviest first, and leaves the rest (`heaviest_that_fit`); a
task tuned goes on past its share until one candidate of its own is measured (tune/tuner.py).

With `TuneOptions.split` LIBRARY the weights are each task's measured time on the library and
the promise of its best known kernel instead, and the heaviest task goes first
(tune/priorities.py); otherwise tasks go in graph order. A task's run time is estimated by a
roofline: its FLOPs, or `FLOPS_PER_BYTE` times the bytes it
reads and writes, whichever is larger. FLOPs alone starved the memory-bound kernels: MnasNet's
5×5 depthwise convs, 2-3 % of its FLOPs but a fifth of ONNX Runtime's time on it, were given
five measurements each in 15 minutes and ran at 1.5-2.5× ONNX Runtime's time.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Collection
from typing import TextIO

import numpy as np

from woodpecker.config import (
    CLASS_FOLLOWER_SHARE,
    FLOPS_PER_BYTE,
    LIBRARY_HOPELESS_WEIGHT,
    LIBRARY_WON_WEIGHT,
    MIN_SHARE,
    MIN_TASK_S,
    PRETRAIN_SHARE,
)
from woodpecker.deadline import Deadline
from woodpecker.engines.halide.host import host_vector_registers
from woodpecker.errors import OptionsError, WoodpeckerError
from woodpecker.files import creatable, user_path
from woodpecker.ir.graph import Graph
from woodpecker.options import BudgetSplit, TuneOptions
from woodpecker.progress import Progress
from woodpecker.target import Target, default_threads
from woodpecker.tune.build_pool import BuildPool
from woodpecker.tune.database import default_database
from woodpecker.tune.extract import TaskGroup, extract_tasks
from woodpecker.tune.measure import Measurer
from woodpecker.tune.priorities import deepest_first, library_times, library_weights, promise
from woodpecker.tune.records import TuningLog, TuningRecord
from woodpecker.tune.searchers import SEARCHERS, prepare
from woodpecker.tune.searchers.model_based import is_model_based
from woodpecker.tune.tuner import tune_templates


def task_bytes(task) -> int:
    """The bytes a task's kernel reads (its arguments) and writes (its output)."""
    read = sum(a.nbytes for a in task.random_inputs(0) if a is not None)
    return read + 4 * int(np.prod(task.out_shape))


def task_work(groups: list[TaskGroup]) -> list[float]:
    """Each task's roofline work over all its nodes (see the module docstring)."""
    return [max(float(g.task.flops), FLOPS_PER_BYTE * task_bytes(g.task)) * len(g.nodes)
            for g in groups]


def work_weights(groups: list[TaskGroup]) -> list[float]:
    """Each task's weight in the budget split (see the module docstring)."""
    work = task_work(groups)
    floor = MIN_SHARE * sum(work)
    return [max(w, floor) for w in work]


def open_log(path: str, resume: bool, out: TextIO | None = None,
             target: Target | None = None, exclude: Collection[str] = (),
             database: bool = False) -> TuningLog:
    """The tuning log at `path`, read for `target` (records measured for another are left
    out, tune/records.py) without the templates in `exclude`; refuses to add to a non-empty
    one unless `resume`. `database`: the shipped tuning database (tune/database.py) is
    attached after the user's records."""
    out = out or sys.stderr
    where = creatable(user_path(path, "the tuning log", OptionsError), "the tuning log",
                      OptionsError)
    if where.is_dir():
        raise OptionsError(f"the tuning log {path} is a folder; name its file (a .jsonl log)")
    try:
        log = TuningLog(path, None if target is None else target.record_key, exclude)
    except OSError as e:
        raise OptionsError(f"cannot read the tuning log {path}: {e.strerror}") from None
    if (log.records or log.foreign or log.excluded) and not resume:
        held = len(log.records) + log.foreign + log.excluded
        raise WoodpeckerError(f"{path} already holds {held} "
                              "records; pass --resume to continue it")
    if log.foreign:
        print(f"note: {log.foreign} record(s) in {path} were measured for another machine or "
              f"thread count ({target.record_key} here) and are not used", file=out)
    if log.skipped_lines:
        print(f"note: skipped {log.skipped_lines} unreadable line(s) in {path}", file=out)
    if database:
        db = default_database()
        if len(db):
            log.attach(db.index)
            here = target.record_key if target is not None else None
            print(f"tuning database: {db.index.targets.get(here, 0)} record(s) of "
                  f"{db.index.task_count(here) if here else 0} task(s) measured for this "
                  f"target, {len(db)} to learn from ({db.source})", file=out)
    return log


def _by_library(graph: Graph, groups: list[TaskGroup], log: TuningLog, target: Target,
                out: TextIO) -> tuple[list[TaskGroup], list[float]]:
    """The tasks in the order the library split tunes them, and their weights
    (tune/priorities.py)."""
    t0 = time.monotonic()
    library = library_times(graph, groups, target.threads)
    best = [None if (b := log.best(g.task.key)) is None else log.seconds(b) * 1e3 * len(g.nodes)
            for g in groups]
    weights = library_weights(library, best, task_work(groups))
    won = sum(promise(b, lib) == LIBRARY_WON_WEIGHT for b, lib in zip(best, library)
              if b is not None and lib is not None)
    hopeless = sum(promise(b, lib) == LIBRARY_HOPELESS_WEIGHT for b, lib in zip(best, library)
                   if b is not None and lib is not None)
    print(f"budget split by library time: {sum(x is not None for x in library)} of "
          f"{len(groups)} task(s) timed on ONNX Runtime in {time.monotonic() - t0:.1f} s; "
          f"{won} already beaten by a known kernel, {hopeless} out of reach", file=out,
          flush=True)
    order = deepest_first(weights)
    return [groups[i] for i in order], [weights[i] for i in order]


def heaviest_that_fit(groups: list[TaskGroup], weights: list[float], budget: float,
                      out: TextIO | None = None) -> tuple[list[TaskGroup], list[float]]:
    """The tasks a budget can tune and their weights: all of them, in their order, where
    `budget` gives each `config.MIN_TASK_S` (one chunk of candidates built and timed);
    otherwise the heaviest that many, heaviest first — a share too short for one build
    measures nothing (issue 76: `--budget 30s` measured none of resnet18's 18 tasks), so the
    time goes to the tasks where it counts and the rest keep what the log or the shipped
    database has."""
    fit = max(1, int(budget // MIN_TASK_S))
    if fit >= len(groups):
        return groups, weights
    order = sorted(range(len(groups)), key=lambda i: -weights[i])[:fit]
    print(f"budget {budget:.0f} s: the {fit} heaviest of {len(groups)} task(s) tuned "
          f"(~{MIN_TASK_S:.0f} s each at least); the rest keep what the log has",
          file=out or sys.stderr, flush=True)
    return [groups[i] for i in order], [weights[i] for i in order]


def task_share(left: float, weights: list[float]) -> float:
    """The next task's seconds of the `left` there are, `weights` being its and the later
    tasks' weights: its weight's part, but at least `MIN_TASK_S` where there is that much, and
    never so much that a later task is left less than `MIN_TASK_S` (a shape-class lead took a
    follower's time until the follower's first build overran the budget by 9 s)."""
    share = left * weights[0] / sum(weights)
    later = MIN_TASK_S * (len(weights) - 1)
    return max(0.0, min(max(share, min(MIN_TASK_S, left)), left - later)) \
        if left > later else share


def shape_classes(groups: list[TaskGroup], weights: list[float],
                  ) -> tuple[list[tuple[str, ...]], list[float]]:
    """Per task (in tuning order), the keys of the tasks of its shape class tuned before it
    (`Task.shape_class`: the same schedule space), and the weights with each such follower's
    weight but `CLASS_FOLLOWER_SHARE` moved to its class's first task: one deep search per
    class, whose best configs each follower measures first (tune/tuner.py), then searches on
    with what it kept."""
    weights = list(weights)
    first: dict[str, int] = {}
    members: dict[str, list[str]] = {}
    twins: list[tuple[str, ...]] = []
    for i, g in enumerate(groups):
        lead = first.setdefault(g.task.shape_class, i)
        before = members.setdefault(g.task.shape_class, [])
        twins.append(tuple(before))
        before.append(g.task.key)
        if lead != i:
            moved = (1 - CLASS_FOLLOWER_SHARE) * weights[i]
            weights[i] -= moved
            weights[lead] += moved
    return twins, weights


def prepare_search(name: str, log: TuningLog, target: Target,
                   deadline: Deadline | None = None) -> None:
    """What searcher `name` needs before a session's budget is split among tasks: its imports
    and, for a model-based one with a database attached to `log`, the pre-trained cost model
    (fitted once per machine and database, tune/pretrained.py), by `deadline`."""
    factory = prepare(name)
    if is_model_based(factory):
        factory.pretrain(log, target, deadline)


def tune_graph(graph: Graph, target: Target, log: TuningLog, options: TuneOptions,
               out: TextIO | None = None, deadline: Deadline | None = None,
               ) -> list[tuple[TaskGroup, TuningRecord | None]]:
    """Tune each task of `graph` into `log`, until `deadline` (default: the options' budget
    from now); returns (task group, best record) per task."""
    out = out or sys.stderr
    if options.search not in SEARCHERS:
        raise WoodpeckerError(f"unknown search {options.search!r}; choose from "
                              f"{', '.join(SEARCHERS)}")
    deadline = deadline or Deadline.after(options.budget_s)
    prepare_search(options.search, log, target, deadline.share(PRETRAIN_SHARE))
    budget = deadline.left()
    regs = host_vector_registers(target.isa)
    groups = extract_tasks(graph, parts=True)
    results = []
    start = time.monotonic()
    end = start + budget
    weights = work_weights(groups)
    if options.split is BudgetSplit.LIBRARY:
        groups, weights = _by_library(graph, groups, log, target, out)
    groups, weights = heaviest_that_fit(groups, weights, budget, out)
    twins, weights = shape_classes(groups, weights)
    workers = options.build_workers or default_threads()
    with Measurer(threads=target.threads, timeout_s=options.timeout_s) as measurer, \
            BuildPool(workers, options.timeout_s) as pool, \
            Progress("tuning", budget, out, unit="s") as bar:
        builder = pool if workers > 1 else None   # one worker: compile in the measurer
        for i, g in enumerate(groups):
            now = time.monotonic()
            share = task_share(max(0.0, end - now), weights[i:])
            best = {"gflops": 0.0, "n": 0}

            def progress(rec, i=i, best=best):
                best["n"] += 1
                if rec.gflops and rec.gflops > best["gflops"]:
                    best["gflops"] = rec.gflops
                bar.update(time.monotonic() - start,
                           f"task {i + 1}/{len(groups)}, {best['n']} measured, best "
                           f"{best['gflops']:.1f} GFLOP/s")

            rec = tune_templates(g.task, g.templates, measurer, log, search=options.search,
                                 seed=options.seed + i, vector_registers=regs,
                                 deadline=now + share, max_trials=options.max_trials,
                                 progress=progress, builder=builder, target=target,
                                 hard_deadline=end, twins=twins[i])
            own = log.own_best(g.task.key)
            got = f"{own.gflops or 0.0:.1f} GFLOP/s" if own else \
                "no valid configuration" + (" (the tuning database's kept)" if rec else "")
            bar.note(f"task {i + 1}/{len(groups)} {g.task.describe()}: best {got} "
                     f"({best['n']} measured)")
            bar.update(time.monotonic() - start, f"task {i + 1}/{len(groups)} done")
            results.append((g, rec))
    return results
