"""A cost model pre-trained on the shipped tuning database (issue 52; TenSet's and TLP's
pre-trained cost models for TVM, the thesis's Glimpse transferring across machines through the
blueprint): one XGBoost ranker fitted on every record the database holds — every target, every
task, ranking groups per target and task — over features that carry across tasks and machines
(tune/features.py's task, knob and loop-nest features, and the blueprint: this machine's
measured one for records of its target, what another target's key tells for the rest).

Contract: `pretrained_model(log, extra)` returns the `XGBCostModel` fitted on the database
records attached to `log` (`TuningLog.transfer`; `extra`: this machine's blueprint vector, as
the searchers' features have it), or None when none are attached or fewer than two rank; a
searcher predicts with it through its own feature cache (`XGBCostModel.with_cache`). It is
fitted once per machine and database: the model is kept in the cache directory
(`pretrained-<digest>-<records>.ubj`; its feature columns and record count in `.json`), the
digest covering the database, this machine's blueprint, the feature and cost-model code and the
xgboost version, so any change refits it; within a compile it is shared through `log.derived`.
A fit ends by its deadline (the compile's `--budget`): on a sample of the database sized to the
time there is (`affordable`), cut short at the deadline if it must be. A cache
file that cannot be read is refitted, one that cannot be written is skipped — the model is
knowledge, never a reason to fail.

How the searchers use it (tune/searchers/model_based.py): the first batch of a task no record
of which has been measured yet comes from the pre-trained model's predictions, with no fit —
the per-task model, fitted on the task's own records and the transfer sample, takes over once
it has measured some. Choice: the thesis meta-trains its networks on a large GPU dataset; here
the database is the dataset and the ranker AutoTVM's, so one model type serves both phases.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
from pathlib import Path

from woodpecker.cache import cache_dir
from woodpecker.config import PRETRAIN_MIN_RECORDS, PRETRAIN_RECORDS_PER_S
from woodpecker.deadline import Deadline
from woodpecker.tune import cost_model as cost_model_module
from woodpecker.tune import features as features_module
from woodpecker.tune.cost_model import FeatureCache, XGBCostModel
from woodpecker.tune.records import TuningLog

SUFFIX = ".ubj"


def digest(database, extra: dict | None) -> str:
    """What the pre-trained model depends on, hashed: the database (`RecordIndex.digest`: of
    its records), this machine's blueprint vector, the feature and cost-model code and the
    xgboost version."""
    import xgboost

    h = hashlib.sha256()
    h.update(xgboost.__version__.encode())
    for module in (features_module, cost_model_module):
        try:
            h.update(inspect.getsource(module).encode())
        except (OSError, TypeError):       # no source installed: the package's version
            from importlib.metadata import PackageNotFoundError, version
            try:
                h.update(version("woodpecker").encode())
            except PackageNotFoundError:
                h.update(b"unknown")
    h.update(json.dumps(sorted((extra or {}).items())).encode())
    h.update(database.digest.encode())
    return h.hexdigest()[:20]


def _load(model: XGBCostModel, path: Path) -> bool:
    import xgboost

    try:
        side = json.loads(path.with_suffix(".json").read_text())
        columns, fitted_on = side["columns"], side["fitted_on"]
        ranker = xgboost.XGBRanker()
        ranker.load_model(os.fspath(path))
    except (OSError, ValueError, TypeError, KeyError, xgboost.core.XGBoostError):
        return False
    if not isinstance(columns, dict) or not all(isinstance(v, int) for v in columns.values()) \
            or not isinstance(fitted_on, int):
        return False
    model.vectorizer.columns = columns
    model.booster, model.fitted_on = ranker, fitted_on
    return True


def _save(model: XGBCostModel, path: Path) -> None:
    import xgboost

    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp{SUFFIX}")
    side = path.with_suffix(".json")
    side_tmp = side.with_name(f"{side.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        model.booster.save_model(os.fspath(tmp))
        side_tmp.write_text(json.dumps({"columns": model.vectorizer.columns,
                                        "fitted_on": model.fitted_on}))
        os.replace(side_tmp, side)        # the columns first: a model file implies them
        os.replace(tmp, path)
    except (OSError, xgboost.core.XGBoostError):
        for left in (tmp, side_tmp):      # a full disk, a read-only cache: nothing kept
            try:
                left.unlink(missing_ok=True)
            except OSError:
                pass


def _cached(where: Path, key: str) -> list[tuple[int, Path]]:
    """The models kept for `key`, by how many records they were fitted on, most first."""
    out = []
    for path in where.glob(f"pretrained-{key}-*{SUFFIX}"):
        n = path.name[len(f"pretrained-{key}-"):-len(SUFFIX)]
        if n.isdigit():
            out.append((int(n), path))
    return sorted(out, reverse=True)


def affordable(total: int, deadline: Deadline | None) -> int:
    """How many of `total` records a fit may take before `deadline`:
    `config.PRETRAIN_RECORDS_PER_S` a second of the time left (all without a deadline)."""
    if deadline is None or not deadline.bounded:
        return total
    return min(total, int(PRETRAIN_RECORDS_PER_S * deadline.left()))


def pretrained_model(log: TuningLog | None, extra: dict | None, threads: int = 1,
                     seed: int = 0, where: Path | None = None,
                     deadline: Deadline | None = None) -> XGBCostModel | None:
    """The cost model pre-trained on the database attached to `log` (None without one).
    `extra`: this machine's blueprint vector (None: no hardware features, as `xgb`'s rows);
    `where`: the cache directory (default `woodpecker.cache.cache_dir()`). The records' rows
    are featurized in a cache of their own, dropped after the fit.

    `deadline`: the fit ends by then (issue 76: 3 min 23 s on a user's 2-vCPU machine, in a
    30 s budget). It takes the whole database where `affordable` says it fits, else a seeded
    sample of whole ranking groups of that size; a model kept from an earlier fit of at
    least half that many records is loaded instead. Featurizing stops at the deadline and
    boosting stops there too (the trees so far are the model); a fit cut short is used, not
    kept. With fewer than `config.PRETRAIN_MIN_RECORDS` affordable, no model (the searchers
    fit their own per task): what `log.derived` remembers, so no later call fits one."""
    if log is None or log.database is None or not len(log.database):
        return None
    key = ("pretrained cost model", tuple(sorted((extra or {}).items())))
    if key in log.derived:
        return log.derived[key]
    index = log.database
    where = where or cache_dir()
    name = digest(index, extra)
    n = affordable(len(index), deadline)
    kept = _cached(where, name)
    model = XGBCostModel(seed=seed, threads=threads,
                         cache=FeatureCache(extra, here=log.target))
    loaded = any(k * 2 >= n and _load(model, path) for k, path in kept)
    if not loaded and n < min(PRETRAIN_MIN_RECORDS, len(index)):
        print(f"tuning database: no time to pre-train the cost model ({deadline.left():.1f} s "
              f"left of its share); each task fits its own", file=sys.stderr, flush=True)
        model.booster = None
    elif not loaded:
        records = log.marked(index.all() if n >= len(index) else index.groups(n, seed))
        print(f"pre-training the cost model on the tuning database ({len(records):,} of "
              f"{len(index):,} records; once per machine and database)", file=sys.stderr,
              flush=True)
        whole = model.fit(records, deadline=None if deadline is None else deadline.end)
        if model.booster is not None and whole:
            _save(model, where / f"pretrained-{name}-{len(records)}{SUFFIX}")
    if model.booster is not None:
        model.booster.set_params(n_jobs=1)     # it predicts small batches, within tuning
    log.derived[key] = model if model.booster is not None else None
    return log.derived[key]
