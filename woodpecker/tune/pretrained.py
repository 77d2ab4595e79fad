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
(`pretrained-<digest>.ubj`; its feature columns and record count in `.json`), the digest
covering the records, this machine's blueprint, the feature and cost-model code and the xgboost
version, so any change refits it; within a compile it is shared through `log.derived`. A cache
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
from woodpecker.tune import cost_model as cost_model_module
from woodpecker.tune import features as features_module
from woodpecker.tune.cost_model import FeatureCache, XGBCostModel
from woodpecker.tune.records import TuningLog, TuningRecord

SUFFIX = ".ubj"


def digest(records: list[TuningRecord], extra: dict | None) -> str:
    """What the pre-trained model depends on, hashed: the records (target, task, template,
    config, cost), this machine's blueprint vector, the feature and cost-model code and the
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
    for r in records:
        h.update(f"{r.target}|{r.task}|{r.template}|{r.key}|{r.cost_s!r}\n".encode())
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


def pretrained_model(log: TuningLog | None, extra: dict | None, threads: int = 1,
                     seed: int = 0, where: Path | None = None) -> XGBCostModel | None:
    """The cost model pre-trained on the database attached to `log` (None without one).
    `extra`: this machine's blueprint vector (None: no hardware features, as `xgb`'s rows);
    `where`: the cache directory (default `woodpecker.cache.cache_dir()`). The records' rows
    are featurized in a cache of their own, dropped after the fit."""
    if log is None or not log.transfer:
        return None
    key = ("pretrained cost model", tuple(sorted((extra or {}).items())))
    if key in log.derived:
        return log.derived[key]
    records = log.transfer
    path = (where or cache_dir()) / f"pretrained-{digest(records, extra)}{SUFFIX}"
    model = XGBCostModel(seed=seed, threads=threads,
                         cache=FeatureCache(extra, here=log.target))
    if not _load(model, path):
        print(f"pre-training the cost model on the tuning database ({len(records):,} records; "
              "once per machine and database)", file=sys.stderr, flush=True)
        model.fit(records)
        if model.booster is not None:
            _save(model, path)
    if model.booster is not None:
        model.booster.set_params(n_jobs=1)     # it predicts small batches, within tuning
    log.derived[key] = model if model.booster is not None else None
    return log.derived[key]
