"""The cost model pre-trained on a tuning database (tune/pretrained.py), on a real template's
knob space with a synthetic cost (nothing compiled): it ranks an unseen task's candidates, is
fitted once per machine and database and loaded after, a broken cache file is refitted without
an error, and the model-based searchers take a task's first batch from it with no per-task fit,
fitting their own model from the second batch on."""

from __future__ import annotations

import random

import pytest

from tests.tune.test_learned_search import DIRECT, SPACE, TASK, _tau, conv, cost
from woodpecker.target import Target
from woodpecker.tasks.space import KnobSpace
from woodpecker.tune.context import TuningContext
from woodpecker.tune.pretrained import SUFFIX, pretrained_model
from woodpecker.tune.records import TuningLog, TuningRecord
from woodpecker.tune.searchers import make_searcher
from woodpecker.tune.searchers.glimpse import GlimpseSearch
from woodpecker.tune.searchers.xgb import XGBSearch

pytest.importorskip("xgboost")
pytest.importorskip("sklearn")

HERE = Target.parse("cpu", 2).record_key
ELSEWHERE = "x86_64:avx2,fma:2t" if HERE != "x86_64:avx2,fma:2t" else "x86_64:sse4_2:2t"


def _database() -> list[TuningRecord]:
    """Records of three tasks other than TASK, on this target and another."""
    out = []
    for i, (task, target) in enumerate([(conv(32, 56, 32), HERE), (conv(128, 14, 128), HERE),
                                        (conv(256, 7, 256), ELSEWHERE)]):
        rng = random.Random(i)
        for _ in range(120):
            c = SPACE.sample(rng)
            if cost(c, task):
                out.append(TuningRecord(task.key, DIRECT, c, cost(c, task), target=target))
    return out


def _log(tmp_path, name="user.jsonl") -> TuningLog:
    log = TuningLog(tmp_path / name, HERE)
    log.attach(_database())
    return log


def test_no_database_no_model(tmp_path):
    assert pretrained_model(None, None) is None
    assert pretrained_model(TuningLog(tmp_path / "empty.jsonl", HERE), None) is None


def test_it_ranks_an_unseen_task_and_is_fitted_once_per_database(tmp_path, capsys):
    where = tmp_path / "cache"
    model = pretrained_model(_log(tmp_path), None, where=where)
    assert "pre-training the cost model" in capsys.readouterr().err
    assert len(list(where.glob(f"*{SUFFIX}"))) == 1
    probe = [SPACE.sample(random.Random(100 + i)) for i in range(150)]
    scores = model.predict(TASK, DIRECT, probe)                  # TASK is not in the database
    assert _tau(scores, [cost(c) for c in probe]) > 0.5
    again = pretrained_model(_log(tmp_path, "other.jsonl"), None, where=where)
    assert capsys.readouterr().err == ""                          # loaded, not refitted
    assert list(again.predict(TASK, DIRECT, probe)) == list(scores)
    log = _log(tmp_path, "third.jsonl")                           # another database: refitted
    log.attach([TuningRecord(TASK.key, DIRECT, probe[0], 1e-3, target=ELSEWHERE)])
    pretrained_model(log, None, where=where)
    assert "pre-training" in capsys.readouterr().err
    assert len(list(where.glob(f"*{SUFFIX}"))) == 2


def test_a_broken_cache_file_is_refitted_not_an_error(tmp_path, capsys):
    where = tmp_path / "cache"
    pretrained_model(_log(tmp_path), None, where=where)
    capsys.readouterr()
    (path,) = where.glob(f"*{SUFFIX}")
    path.write_bytes(b"not a model")
    model = pretrained_model(_log(tmp_path, "again.jsonl"), None, where=where)
    assert model is not None and "pre-training" in capsys.readouterr().err
    assert path.read_bytes() != b"not a model"                    # written again, whole


@pytest.mark.parametrize("name", ["xgb", "glimpse"])
def test_a_task_s_first_batch_comes_from_the_pretrained_model_without_a_fit(
        tmp_path, monkeypatch, name):
    monkeypatch.setenv("WOODPECKER_CACHE", str(tmp_path / "cache"))
    log = _log(tmp_path)
    s = make_searcher(name, TuningContext(TASK, DIRECT, SPACE, seed=0, log=log))
    assert s.pretrained is not None and s.params["pretrained"] is True
    first = s.ask()
    assert s.model is s.pretrained and s.model.fitted_on > 0     # the database's, unrefitted
    assert all(SPACE.is_valid(c) for c in first)
    s.tell(first, [cost(c) for c in first])
    second = s.ask()
    assert s.model is not s.pretrained and s.model.fitted_on > 0   # its own, fitted now
    assert not {KnobSpace.key(c) for c in second} & {KnobSpace.key(c) for c in first}
    factory = GlimpseSearch if name == "glimpse" else XGBSearch
    off = factory(TuningContext(TASK, DIRECT, SPACE, seed=0, log=log), pretrained=False)
    assert off.pretrained is None
    off.ask()
    assert off.model.fitted_on > 0                                # a per-task fit at once

def test_glimpse_pretrains_with_its_blueprint(tmp_path, monkeypatch):
    monkeypatch.setenv("WOODPECKER_CACHE", str(tmp_path / "cache"))
    log = _log(tmp_path)
    GlimpseSearch.pretrain(log, Target.parse("cpu", 2))
    keys = [k for k in log.derived if k[0] == "pretrained cost model"]
    assert len(keys) == 1 and any(name.startswith("hw.") for name, _ in keys[0][1])
    s = make_searcher("glimpse", TuningContext(TASK, DIRECT, SPACE, seed=0, log=log,
                                               target=Target.parse("cpu", 2)))
    assert s.pretrained.booster is log.derived[keys[0]].booster    # the driver's, shared


def test_an_unwritable_cache_only_costs_a_refit(tmp_path):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    model = pretrained_model(_log(tmp_path), None, where=blocked)
    assert model is not None and model.fitted_on > 0
    assert blocked.read_text().startswith("a file")
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]


def test_pretraining_with_no_time_left_fits_nothing_and_no_searcher_fits_it_later(
        tmp_path, capsys):
    """Issue 76: the pre-training took 3 min 23 s of a 30 s budget. With its deadline passed
    there is no model, nothing is fitted or kept, and the searchers after it fit their own."""
    from woodpecker.deadline import Deadline

    where = tmp_path / "cache"
    log = _log(tmp_path)
    assert pretrained_model(log, None, where=where, deadline=Deadline(0.0)) is None
    assert "no time to pre-train" in capsys.readouterr().err
    assert not list(where.glob(f"*{SUFFIX}"))
    s = make_searcher("xgb", TuningContext(TASK, DIRECT, SPACE, seed=0, log=log))
    assert s.pretrained is None and "pre-training" not in capsys.readouterr().err


def test_pretraining_takes_a_sample_of_whole_groups_sized_to_its_time(tmp_path, monkeypatch):
    from woodpecker.deadline import Deadline
    from woodpecker.tune import pretrained

    monkeypatch.setattr(pretrained, "PRETRAIN_RECORDS_PER_S", 10.0)
    monkeypatch.setattr(pretrained, "PRETRAIN_MIN_RECORDS", 1)
    where = tmp_path / "cache"
    log = _log(tmp_path)
    model = pretrained_model(log, None, where=where, deadline=Deadline.after(10.0))  # ~100
    total = len(log.database)
    assert model is not None and 100 <= model.fitted_on < total
    (kept,) = where.glob(f"*{SUFFIX}")
    assert kept.name.endswith(f"-{model.fitted_on}{SUFFIX}")   # the sample's size, kept
    again = _log(tmp_path, "again.jsonl")                       # more time: the whole
    assert pretrained_model(again, None, where=where).fitted_on == total


def test_a_fit_stops_at_its_deadline(monkeypatch):
    """Featurizing and boosting both stop once the deadline has passed (a fake clock: one
    second a reading); the trees so far are the model, and the fit says it was cut short."""
    from types import SimpleNamespace

    from woodpecker.tune import cost_model
    from woodpecker.tune.cost_model import XGBCostModel

    clock = iter(range(10**6))
    monkeypatch.setattr(cost_model, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    records = _database()
    whole = XGBCostModel(trees=20)
    assert whole.fit(records) and whole.booster.get_booster().num_boosted_rounds() == 20
    cut = XGBCostModel(trees=20)
    assert not cut.fit(records, deadline=6)      # readings: 2 while featurizing, then trees
    assert cut.fitted_on == len(records)
    assert 0 < cut.booster.get_booster().num_boosted_rounds() < 20
    early = XGBCostModel(trees=20)
    assert not early.fit(records, deadline=0) and early.booster is None
