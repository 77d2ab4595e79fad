"""Tune one task: ask the searcher, measure new candidates in the worker, append every
measurement to the log, tell the searcher, until it is done or the budget runs out. Configs
already in the log are never re-measured (resume, and reuse across models).

Each candidate is timed paired with the task's best record so far (tune/worker.py), and its
cost is that record's cost times the median ratio of their times: the costs of one task then
share one scale however the machine's speed moves between candidates. Why (WPK §2.3 times each
candidate alone): this 2-core machine at times runs at half speed for seconds — one vCPU taken
away. Measured in two 15-minute tunings of mobilenet_v2 (Zen 4, 2 threads), the same first 13
configs of its 3×3 separable conv at 56² × 144 took 1.06-2.1× as long in the second as in the
first; the search, ranking by those times, settled on configs whose in-plan time was 0.196 ms
against 0.161 ms from the first tuning, and the whole plan ran 6 % slower.

A candidate whose ratio says it beats the best is timed once more, against the task's first
record (its anchor: timed alone, its cost its own time), and that ratio times the anchor's cost
is its cost. Why: costs chained from best to new best, each step taken on a ratio picked for
being under 1, compound the noise of every pick into the task's scale, downwards. Measured on
T5's 128×256·256×256 product (Zen 5, a 3-minute tune, 217 candidates): the best record's cost
had drifted to 13.0 µs while its kernel ran 59 µs; the eight lowest-cost records all ran
55–69 µs, and seven records ranked below them ran 50–53 µs. From the anchor, every cost is one
ratio away from a time measured alone: no compounding, and the ratio that sets a new best's
cost is not the one that picked it. That one lone time can itself be far off (records.py,
`seconds_per_cost`, which turns a task's costs into seconds where they meet other tasks').
"""

from __future__ import annotations

import importlib.metadata
import math
import time
from collections.abc import Callable
from dataclasses import replace

from woodpecker.config import DATABASE_SEEDS, SPLIT_SHARE, TEMPLATE_FLOOR
from woodpecker.engines.halide.templates import template_module, templates_for
from woodpecker.target import Target
from woodpecker.tasks import Task, task_from_key
from woodpecker.tasks.attention import AttentionTask
from woodpecker.tasks.chain import ChainTask
from woodpecker.tasks.space import KnobSpace
from woodpecker.tune.build_pool import BuildPool, Built
from woodpecker.tune.context import TuningContext
from woodpecker.tune.features import similarity
from woodpecker.tune.measure import Measurer
from woodpecker.tune.records import TuningLog, TuningRecord
from woodpecker.tune.reformer import join_seeds, split
from woodpecker.tune.searchers import make_searcher


def versions() -> dict[str, str]:
    out = {}
    for dist in ("woodpecker", "halide", "numpy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def tune_task(task: Task, template: str, space: KnobSpace, searcher, measurer: Measurer,
              log: TuningLog, *, searcher_name: str, seed: int, deadline: float | None = None,
              max_trials: int | None = None,
              progress: Callable[[TuningRecord], None] | None = None,
              builder: BuildPool | None = None,
              hard_deadline: float | None = None) -> TuningRecord | None:
    """Returns the best valid record for the task (from this run or earlier ones; the shipped
    database's while the user's log has none, tune/records.py). With a
    `builder`, new candidates are compiled in parallel, one per build worker, before they are
    timed (tune/build_pool.py); one that does not build is recorded invalid without being
    sent to the measurer.

    `deadline` is this template's share; `hard_deadline` (the session's end), when given, lets
    a task the user's log holds no valid record of overrun its share until one candidate is
    measured: a share shorter than one model fit and build (a small task of a short budget, a
    template with little weight) otherwise left the task with nothing of its own — the
    library's, or the shipped database's record of another machine or compile kept untried
    (issue 76: a 30 s budget measured none of resnet18's 18 tasks, every one of them in the
    database). The overrun comes out of the later tasks' shares."""
    known = log.measured(task.key, template)
    trials = 0
    stamp = {"searcher": searcher_name, "seed": seed, "params": searcher.params,
             "versions": versions()}
    # the database's record is another machine's or compile's: a task tuned measures one
    # candidate of its own (its first is the database's best config on this machine)
    first = not log.user_has(task.key)

    def out_of_budget() -> bool:
        if max_trials is not None and trials >= max_trials:
            return True
        if deadline is None:
            return False
        now = time.monotonic()
        if now < deadline:
            return False
        return not (first and trials == 0 and hard_deadline is not None and now < hard_deadline)

    while not out_of_budget():
        configs = searcher.ask()
        if not configs:
            break
        built: dict[str, Built] = {}
        told, costs = [], []
        for j, config in enumerate(configs):
            key = KnobSpace.key(config)
            rec = known.get(key)
            if rec is None:
                if out_of_budget():
                    break
                if builder is not None and key not in built:
                    left = None if max_trials is None else max_trials - trials
                    built = _prebuilt(task, template, configs[j:], known, builder, left)
                rec = _measured(TuningRecord(task.key, template, config, provenance=stamp),
                                task, measurer, log, built.get(key))
                log.append(rec)
                known[key] = rec
                trials += 1
                if progress:
                    progress(rec)
            told.append(config)
            costs.append(rec.cost_s)
        searcher.tell(told, costs)
    return log.best(task.key)


def _prebuilt(task: Task, template: str, configs: list[dict], known: dict, builder: BuildPool,
              trials_left: int | None) -> dict[str, Built]:
    """The next new candidates of `configs`, one per build worker (at most `trials_left`),
    compiled in parallel, by config key. A chunk, not the whole batch: timing follows each
    chunk, so a task's time share ends at most one chunk past its last measurement (a GA
    generation of 12 built at once outlasted many tasks' shares of a 2-minute budget)."""
    fresh = [c for c in configs if KnobSpace.key(c) not in known]
    fresh = fresh[:builder.workers if trials_left is None else min(builder.workers,
                                                                    trials_left)]
    return dict(zip(map(KnobSpace.key, fresh), builder.build(task, template, fresh)))


def _measured(candidate: TuningRecord, task: Task, measurer: Measurer, log: TuningLog,
              built: Built | None = None) -> TuningRecord:
    """`candidate` (task, template, config, provenance) with its measurement: cost (on the
    scale of the task's best record when timed paired with it), error, compile time, GFLOP/s;
    `run_s` and `vs_best` when paired. `built`: its parallel build, whose error makes it
    invalid and whose time is its compile time."""
    if built is not None and built.error:
        return replace(candidate, error=built.error, compile_s=built.compile_s)
    best = log.best(task.key)
    m = measurer.measure(candidate.template, task, dict(candidate.config), best)
    compile_s = m.compile_s if built is None else built.compile_s
    if not m.ok:
        return replace(candidate, error=m.error, compile_s=compile_s)
    chained = bool(m.ratio) and best is not None and best is log.own_best(task.key)
    paired = {"run_s": m.cost_s, "vs_best": m.ratio} if m.ratio else {}
    # on the scale of the user's best; timed against a database record (another machine's
    # times), the candidate's own time starts the task's scale on this machine
    cost = m.ratio * best.cost_s if chained else m.cost_s
    anchor = log.own_first(task.key)
    if chained and m.ratio < 1 and anchor is not None and anchor is not best:
        # a new best: its cost from a second ratio, to the task's anchor (module docstring)
        again = measurer.measure(candidate.template, task, dict(candidate.config), anchor)
        if again.ok and again.ratio:
            cost = again.ratio * anchor.cost_s
    return replace(candidate, cost_s=cost, compile_s=compile_s, gflops=task.flops / cost / 1e9,
                   **paired)


def template_weights(task: Task, templates: tuple[str, ...], log: TuningLog) -> list[float]:
    """How much of a task's time each template gets, from the log's other tasks and a shipped
    database's records (the task's own too: measured elsewhere; transfer):
    each task of the same kind, reading its input in the same layout (a stem reading the
    model's NCHW input runs another loop nest: on Emerald Rapids four stems' best conv_direct
    configs took 72-100 µs against conv_gemm's 180-190, yet with every conv voting a stem
    gave conv_gemm 59 % of its time, first), that has valid records of every one of these
    templates votes
    for the template of its fastest record, its vote weighted by its similarity to `task`
    (Gaussian in task-feature distance, the median distance as width — glimpse's priors do the
    same for knob values); each template also gets `TEMPLATE_FLOOR` of the votes cast, so none
    goes unsearched. Without such tasks, equal weights."""
    # scale -> template -> cost (the database's through its index, tune/db_index.py)
    best = log.template_bests(task.key, templates)
    voters: dict[tuple[str | None, str], str] = {}
    tasks: list[Task] = []
    for k, v in best.items():
        if len(v) == len(templates) > 1:
            try:
                other = task_from_key(k[1])
            except (ValueError, KeyError, TypeError):   # a key of an older task format
                continue
            if other.input_layout(0) != task.input_layout(0):
                continue      # a stem reading NCHW votes only for stems, and the rest alike
            tasks.append(other)
            voters[k] = min(v, key=v.get)
    if not voters:
        return [1.0] * len(templates)
    votes = {t: 0.0 for t in templates}
    for w, winner in zip(similarity(task, tasks), voters.values()):
        votes[winner] += float(w)
    floor = TEMPLATE_FLOOR * sum(votes.values())
    return [floor + votes[t] for t in templates]


def _database_seeds(log: TuningLog, task: Task, template: str, space: KnobSpace) -> list[dict]:
    """The shipped database's configs of a task and template that tuning measures first
    (`TuningLog.shipped_configs`), each fitted to this target's constraints
    (`KnobSpace.nearest_valid`: one of another target's may tile for more vector registers),
    distinct, at most `DATABASE_SEEDS`."""
    out: dict[str, dict] = {}
    for c in log.shipped_configs(task.key, template, 4 * DATABASE_SEEDS):
        fitted = space.nearest_valid(c)
        if fitted is not None:
            out.setdefault(KnobSpace.key(fitted), fitted)
        if len(out) == DATABASE_SEEDS:
            break
    return list(out.values())


def _twin_seeds(log: TuningLog, twins: tuple[str, ...], template: str,
                space: KnobSpace) -> list[dict]:
    """The fastest valid configs of `template` the log holds for the tasks `twins` (of the
    task's shape class: its space, `Task.shape_class`), at most `DATABASE_SEEDS`, fastest of
    each twin first and the twins taken in turn (each task's costs are on its own scale)."""
    ranked = [sorted((r for r in log.task_records(k) if r.valid and r.template == template),
                     key=lambda r: r.cost_s) for k in twins]
    out: dict[str, dict] = {}
    for rank in range(DATABASE_SEEDS):
        for recs in ranked:
            if rank < len(recs) and space.is_valid(recs[rank].config):
                out.setdefault(KnobSpace.key(recs[rank].config), dict(recs[rank].config))
    return list(out.values())[:DATABASE_SEEDS]


def _split(task: Task, measurer: Measurer, log: TuningLog, *, deadline: float | None,
           max_trials: int | None, **kw) -> list[dict | None]:
    """AGO's Split for a conv chain or attention (tune/reformer.py): its parts that have no
    valid record yet (the user's, or a shipped database's of this target) are tuned first,
    with `SPLIT_SHARE` of the fused task's time and trials shared among them; returns the
    parts' best configs (None where a part has none), which Join composes. Other tasks (and
    attention with a mask its parts cannot add): []."""
    if not isinstance(task, (ChainTask, AttentionTask)):
        return []
    parts = split(task)
    if not parts:
        return []
    todo = [p for p in parts if log.best(p.key) is None]
    start, n0 = time.monotonic(), len(log.records)
    for j, part in enumerate(todo):
        left = len(todo) - j
        end = None if deadline is None else \
            time.monotonic() + max(0.0, start + SPLIT_SHARE * (deadline - start)
                                   - time.monotonic()) / left
        trials = None if max_trials is None else \
            max(1, math.ceil((SPLIT_SHARE * max_trials - (len(log.records) - n0)) / left))
        tune_templates(part, templates_for(part), measurer, log, deadline=end,
                       max_trials=trials, **kw)
    return [None if (b := log.best(p.key)) is None else b.config for p in parts]


def tune_templates(task: Task, templates: tuple[str, ...], measurer: Measurer,
                   log: TuningLog, *, search: str, seed: int, vector_registers: int,
                   deadline: float | None = None, max_trials: int | None = None,
                   progress: Callable[[TuningRecord], None] | None = None,
                   builder: BuildPool | None = None,
                   target: Target | None = None,
                   hard_deadline: float | None = None,
                   twins: tuple[str, ...] = ()) -> TuningRecord | None:
    """Tune `task` with each template in turn; returns the best record over all of them.

    Budget split (WPK leaves it open): the templates go in order of `template_weights` (equal
    without other tasks to learn from: the given order), each getting the remaining time, and
    the remaining `max_trials`, times its weight over the weights of the templates left, so
    what a converged search leaves goes to the next template. Each template's searcher is
    seeded with `seed`. `hard_deadline`: see `tune_task`. A conv chain is tuned by AGO's
    reformer: its parts first (`_split`), then the chain from their composed schedules.
    Templates the log leaves out (`TuningLog.exclude`) are not tuned. `twins`: keys of tasks
    of its shape class tuned before it, whose best configs it measures first (`_twin_seeds`)."""
    templates = tuple(t for t in templates if t not in log.exclude)
    fresh = not log.user_has(task.key)   # the database's configs first, for every template
    n0 = len(log.records)
    joined = _split(task, measurer, log, search=search, seed=seed,
                    vector_registers=vector_registers, deadline=deadline,
                    max_trials=max_trials, progress=progress, builder=builder, target=target,
                    hard_deadline=hard_deadline)
    weights = template_weights(task, templates, log)
    order = sorted(range(len(templates)), key=lambda j: -weights[j])
    for n, j in enumerate(order):
        template = templates[j]
        part = weights[j] / sum(weights[k] for k in order[n:])
        end = None if deadline is None else \
            time.monotonic() + max(0.0, deadline - time.monotonic()) * part
        trials = None if max_trials is None else \
            math.ceil((max_trials - (len(log.records) - n0)) * part)
        space = template_module(template).space(task, vector_registers)
        if space.first_valid() is None:
            # no configuration meets the template's constraints (ddddocr's detector stopped a
            # compile here, in the searcher's sampling): nothing of it to build or measure
            continue
        seeds = join_seeds(task, space, joined) if joined else []
        # a task the user's log has nothing of starts from the shipped database's fastest
        # configs of it (tune/database.py; another target's fitted to this one's
        # constraints), then the joined parts' composed schedules
        # ... after its shape class's twins' fastest configs here (the same space)
        seeds = _twin_seeds(log, twins, template, space) \
            + (_database_seeds(log, task, template, space) if fresh else []) + seeds
        if seeds:
            space = KnobSpace(space.knobs, space.constraints, tuple(seeds) + tuple(space.seeds))
        ctx = TuningContext(task, template, space, seed=seed, log=log, target=target,
                            vector_registers=vector_registers)
        tune_task(task, template, space, make_searcher(search, ctx), measurer, log,
                  searcher_name=search, seed=seed, deadline=end, max_trials=trials,
                  progress=progress, builder=builder, hard_deadline=hard_deadline)
    return log.best(task.key)
