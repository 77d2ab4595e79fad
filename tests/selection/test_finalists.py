"""Finalists: the best records of each template and parallel split, checked against the
reference before re-timing."""

from __future__ import annotations

import pytest

from woodpecker.selection.finalists import family, finalist_candidates, finalist_names, leaders
from woodpecker.tasks.conv import ConvTask
from woodpecker.tune.records import TuningLog, TuningRecord

TASK = ConvTask(1, 8, 6, 6, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True, (("Relu",),))
DIRECT, WINOGRAD = "conv_direct", \
    "conv_winograd"
DIRECT_CONFIG = {"vec": 8, "co_block": 1, "x_block": 2, "parallel": "co", "pad": "root",
                 "unroll_kw": False, "skew": 0, "rc_block": 0, "pack": False}
WINOGRAD_CONFIG = {"m": 2, "vec": 8, "co_block": 1, "t_block": 3, "parallel": "e"}


def _log(tmp_path, rows):
    log = TuningLog(tmp_path / "log.jsonl")
    for template, config, cost in rows:
        log.append(TuningRecord(task=TASK.key, template=template, config=config, cost_s=cost,
                                error=None if cost else "wrong result"))
    return log


def test_leaders_are_each_templates_best_fastest_first(tmp_path):
    log = _log(tmp_path, [(DIRECT, DIRECT_CONFIG, 3e-3), (WINOGRAD, WINOGRAD_CONFIG, 2e-3),
                          (DIRECT, dict(DIRECT_CONFIG, x_block=3), 1e-3),
                          (WINOGRAD, dict(WINOGRAD_CONFIG, t_block=2), None)])
    got = leaders(log, TASK, per_family=1)
    assert [(r.template, r.cost_s) for r in got] == [(DIRECT, 1e-3), (WINOGRAD, 2e-3)]
    assert [family(r) for r in got] == ["conv_direct/co", "conv_winograd/e"]
    assert [r.template for r in leaders(log, TASK, lambda r: r.template == WINOGRAD)] \
        == [WINOGRAD]


def test_each_family_brings_its_runner_up_a_config_once(tmp_path):
    log = _log(tmp_path, [(DIRECT, DIRECT_CONFIG, 3e-3), (WINOGRAD, WINOGRAD_CONFIG, 2e-3),
                          (DIRECT, dict(DIRECT_CONFIG, x_block=3), 1e-3),
                          (DIRECT, dict(DIRECT_CONFIG, x_block=3), 5e-4),
                          (DIRECT, dict(DIRECT_CONFIG, x_block=4), 4e-3)])
    got = leaders(log, TASK, per_family=2)
    assert [(r.template, r.cost_s) for r in got] == [
        (DIRECT, 5e-4), (WINOGRAD, 2e-3), (DIRECT, 3e-3)]
    assert finalist_names(got) == ["conv_direct/co", "conv_winograd/e", "conv_direct/co#2"]


def test_each_parallel_split_of_a_template_has_its_own_finalist(tmp_path):
    rows = dict(DIRECT_CONFIG, parallel="rows")
    log = _log(tmp_path, [(DIRECT, DIRECT_CONFIG, 1e-3), (DIRECT, rows, 4e-3),
                          (DIRECT, dict(rows, x_block=3), 3e-3)])
    assert [(family(r), r.cost_s) for r in leaders(log, TASK, per_family=1)] == [
        ("conv_direct/co", 1e-3), ("conv_direct/rows", 3e-3)]


def test_a_finalist_that_does_not_build_is_reported_and_left_out(tmp_path):
    pytest.importorskip("halide")
    broken = dict(WINOGRAD_CONFIG, vec=3)          # not a vector width: the weights cannot tile
    log = _log(tmp_path, [(DIRECT, DIRECT_CONFIG, 1e-3), (WINOGRAD, broken, 2e-3)])
    said = []
    found = finalist_candidates(TASK, leaders(log, TASK), 1, said.append)
    assert [c.name for c in found] == ["conv_direct/co"]
    assert found[0].record.config == DIRECT_CONFIG and found[0].spec.config == DIRECT_CONFIG
    assert found[0].label == "halide:conv_direct/co" and found[0].generated
    assert found[0].run().shape == TASK.out_shape
    assert len(said) == 1 and "conv_winograd" in said[0] and "not used" in said[0]
