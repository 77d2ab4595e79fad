"""Tuning records are keyed by target: a record measured on another ISA or at another thread
count is never taken as this machine's best, and tuning measures its config again."""

from __future__ import annotations

import json

import pytest

from tests.tune.test_tune_cli import conv_model  # noqa: F401 - a fixture
from woodpecker.cli import main
from woodpecker.target import Target
from woodpecker.tune.records import TuningLog

pytest.importorskip("halide")


def _tune(model, log, threads: int = 1) -> int:
    return main(["tune", str(model), "--budget", "60s", "--search", "random", "--seed", "3",
                 "--max-trials", "3", "--tuning-log", str(log), "--resume",
                 "--threads", str(threads)])


def _records(path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_records_carry_their_target(conv_model, tmp_path):  # noqa: F811
    log = tmp_path / "t.jsonl"
    assert _tune(conv_model, log) == 0
    here = Target.parse("cpu", 1).record_key
    assert {r["target"] for r in _records(log)} == {here}
    # opened for this target, every record counts; for another thread count, none does
    assert len(TuningLog(log, here).records) == len(_records(log))
    other = TuningLog(log, Target.parse("cpu", 2).record_key)
    assert other.records == [] and other.foreign == len(_records(log))
    assert other.best(_records(log)[0]["task"]) is None


@pytest.mark.parametrize("foreign", ["isa", "threads"])
def test_tuning_measures_again_what_another_target_measured(conv_model, tmp_path,  # noqa: F811
                                                            foreign):
    first = tmp_path / "first.jsonl"
    assert _tune(conv_model, first) == 0
    measured = _records(first)
    here = Target.parse("cpu", 1)
    if foreign == "isa":
        other = f"{here.arch}:{','.join(here.isa)},avx10_2:1t"
    else:
        other = Target.parse("cpu", 2).record_key
    log = tmp_path / "shared.jsonl"
    log.write_text("".join(json.dumps(dict(r, target=other, cost_s=1e-9)) + "\n"
                           for r in measured))
    assert _tune(conv_model, log) == 0
    after = _records(log)[len(measured):]
    # the same seed proposes the same configs: each is measured again, for this target, and
    # the foreign records' (impossibly fast) costs never became this machine's best
    assert {json.dumps(r["config"], sort_keys=True) for r in measured} <= \
        {json.dumps(r["config"], sort_keys=True) for r in after}
    assert {r["target"] for r in after} == {here.record_key}
    best = TuningLog(log, here.record_key).best(measured[0]["task"])
    assert best is not None and best.cost_s > 1e-9


def test_resuming_a_log_of_this_target_measures_nothing_twice(conv_model, tmp_path):  # noqa: F811
    log = tmp_path / "t.jsonl"
    assert _tune(conv_model, log) == 0
    assert _tune(conv_model, log) == 0
    keys = [(r["template"], json.dumps(r["config"], sort_keys=True)) for r in _records(log)]
    assert len(keys) == len(set(keys))
