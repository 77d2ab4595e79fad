"""Cost models: learn from tuning records, predict which candidates are fast, so a searcher
measures only the promising ones (AutoTVM's statistical cost model; the model every learned
searcher here explores).

Contract (`CostModel`): `fit(records)` learns from tuning-log records (any tasks, templates;
invalid ones — no `cost_s` — included), `predict(task, template, configs)` returns one score
per config, higher meaning predicted faster, comparable among candidates of one task. Scores of
different tasks are not comparable (the model ranks within a task).

`XGBCostModel` is AutoTVM's: gradient-boosted trees (PyPI `xgboost`) with the pairwise ranking
objective, one ranking group per task, the label of a record its task's best cost over its own
(1 for the best, 0 for an invalid one), so records of every task — transfer — train one model
whatever their tasks' time scales. Features: tune/features.py.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from woodpecker.tasks import Task, task_from_key
from woodpecker.tasks.space import Config, KnobSpace
from woodpecker.tune.blueprint import key_vector
from woodpecker.tune.features import Features, Vectorizer, features
from woodpecker.tune.records import TuningRecord


class CostModel(Protocol):
    def fit(self, records: Sequence[TuningRecord]) -> None: ...

    def predict(self, task: Task, template: str, configs: list[Config]) -> np.ndarray: ...


class FeatureCache:
    """Feature dicts by (task key, template, config key): records are featurized once."""

    def __init__(self, extra: Features | None = None,
                 records: "FeatureCache | None" = None, here: str | None = None) -> None:
        """`records`: where the rows of log records are kept instead, so that searchers of one
        compile featurize the log's records once (candidates' rows stay here, with the
        searcher). `extra` (this machine's blueprint) goes into every row but those of records
        measured for another target than `here`, which get what their target key tells
        (tune/blueprint.key_vector)."""
        self.extra = extra
        self.records = records
        self.here = here
        self._tasks: dict[str, Task] = {}
        self._rows: dict[tuple, Features] = {}

    def task(self, key: str) -> Task:
        if key not in self._tasks:
            self._tasks[key] = task_from_key(key)
        return self._tasks[key]

    def known(self, rec: TuningRecord) -> bool:
        """Whether `rec`'s task key names a task this Woodpecker knows (a log may hold
        records of kinds it does not: another version's, a hand-written one) — only those
        are learnt from."""
        try:
            self.task(rec.task)
        except (ValueError, KeyError, TypeError):
            return False
        return True

    def row(self, task: Task, template: str, config: Config,
            target: str | None = None) -> Features:
        """A candidate's features on this machine, or on `target` (another machine's key)."""
        k = (task.key, template, KnobSpace.key(config), target)
        row = self._rows.get(k)
        if row is None:
            extra = self.extra if target is None else key_vector(target)
            row = self._rows[k] = features(task, template, config, extra)
        return row

    def record_row(self, rec: TuningRecord) -> Features:
        if self.records is not None:
            return self.records.record_row(rec)
        elsewhere = self.extra is not None and self.here is not None and \
            rec.target is not None and rec.target != self.here
        return self.row(self.task(rec.task), rec.template, rec.config,
                        rec.target if elsewhere else None)


def ranking_labels(records: Sequence[TuningRecord]) -> tuple[list[TuningRecord], np.ndarray,
                                                             np.ndarray]:
    """Records grouped by the scale their costs share (`TuningRecord.scale`: the user's of a
    task, or a database's of a target and task; sorted, as a ranker needs), each labelled its
    group's best cost over its own (0 when invalid); returns (records, labels, group ids).
    Groups with no valid record are left out: nothing to rank."""
    def group(r: TuningRecord) -> tuple[str, str]:
        return (r.scale[0] or "", r.task)

    best: dict[tuple[str, str], float] = {}
    for r in records:
        c = r.cost_s
        if c and c < best.get(group(r), float("inf")):
            best[group(r)] = c
    keep = sorted((r for r in records if group(r) in best), key=group)
    labels = np.array([best[group(r)] / r.cost_s if r.cost_s else 0.0
                       for r in keep], dtype=np.float32)
    ids = {t: i for i, t in enumerate(sorted(best))}
    return keep, labels, np.array([ids[group(r)] for r in keep], dtype=np.int64)


def _stop_at(deadline: float):
    """An xgboost callback that ends boosting at `deadline` (time.monotonic()): the trees so
    far are the model (built here: xgboost imports on first use)."""
    import xgboost

    class StopAt(xgboost.callback.TrainingCallback):
        stopped = False

        def after_iteration(self, model, epoch, evals_log) -> bool:
            self.stopped = time.monotonic() >= deadline
            return self.stopped

    return StopAt()


class XGBCostModel:
    def __init__(self, seed: int = 0, threads: int = 1, trees: int = 120, depth: int = 6,
                 cache: FeatureCache | None = None) -> None:
        import xgboost  # noqa: F401  (missing: an ImportError now, not mid-search)

        self.seed, self.threads, self.trees, self.depth = seed, threads, trees, depth
        self.cache = cache or FeatureCache()
        self.vectorizer = Vectorizer()
        self.booster = None
        self.fitted_on = 0

    def fit(self, records: Sequence[TuningRecord], deadline: float | None = None) -> bool:
        """Learn from `records`; with `deadline` (a `time.monotonic()` time), featurizing
        stops there (the rows so far are learnt from) and so does boosting (the trees so
        far are the model). Returns whether the fit was whole."""
        import xgboost

        keep, labels, groups = ranking_labels([r for r in records if self.cache.known(r)])
        rows = []
        for r in keep:
            if deadline is not None and len(rows) % 256 == 0 and time.monotonic() >= deadline:
                break
            rows.append(self.cache.record_row(r))
        whole = len(rows) == len(keep)
        keep, labels, groups = keep[:len(rows)], labels[:len(rows)], groups[:len(rows)]
        self.fitted_on = len(keep)
        if len(keep) < 2:
            self.booster = None
            return whole
        x = self.vectorizer.fit(rows).transform(rows)
        stop = [] if deadline is None else [_stop_at(deadline)]
        model = xgboost.XGBRanker(objective="rank:pairwise", n_estimators=self.trees,
                                  max_depth=self.depth, learning_rate=0.15, subsample=0.9,
                                  min_child_weight=1, random_state=self.seed,
                                  n_jobs=self.threads, tree_method="hist", callbacks=stop)
        model.fit(x, labels, qid=groups)
        self.booster = model
        return whole and not (stop and stop[0].stopped)

    def with_cache(self, cache: FeatureCache) -> "XGBCostModel":
        """The same fitted model, featurizing candidates in `cache` (a searcher's)."""
        other = copy.copy(self)
        other.cache = cache
        return other

    def predict(self, task: Task, template: str, configs: list[Config]) -> np.ndarray:
        if self.booster is None or not configs:
            return np.zeros(len(configs))
        rows = [self.cache.row(task, template, c) for c in configs]
        return self.booster.predict(self.vectorizer.transform(rows))
