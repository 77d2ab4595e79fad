"""In-plan choice among a task's finalists: each task keeps the finalist whose plan variant had
the least step time, the plan holds no trace of the other finalists, and its result still
matches ONNX Runtime."""

from __future__ import annotations

import random

import numpy as np
import pytest

import woodpecker
from tests.helpers import ort_run, rand
from tests.selection.test_per_node import _convnet
from woodpecker.cli import main
from woodpecker.engines.halide.templates import template_module
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.passes import optimize
from woodpecker.selection.finalists import family
from woodpecker.tune.extract import extract_tasks
from woodpecker.tune.records import TuningLog, TuningRecord

pytest.importorskip("halide")


def _two_families_log(path):
    """A log with configs of two families (template and parallel split) for every task."""
    model = _convnet()
    graph = import_onnx(model)
    optimize(graph)
    log = TuningLog(path)
    rng = random.Random(0)
    for g in extract_tasks(graph):
        seen = {}
        for _ in range(200):
            template = rng.choice(g.templates)
            config = template_module(template).space(g.task).sample(rng)
            seen.setdefault(family(TuningRecord(g.task.key, template, config)), (template, config))
            if len(seen) == 2:
                break
        assert len(seen) == 2, g.task.describe()
        for cost, (template, config) in zip((1e-4, 2e-4), seen.values()):
            log.append(TuningRecord(task=g.task.key, template=template, config=config, cost_s=cost,
                                    error=None))
    return model, log.path


def test_each_task_keeps_its_fastest_finalist_in_the_plan(tmp_path, capsys):
    model, log = _two_families_log(tmp_path / "log.jsonl")
    compiled = woodpecker.compile(model, engines="halide,numpy", tuning_log=log, threads=2)
    report = compiled.plan.meta["in_plan"]
    assert len(report) == 4       # every task had two finalists
    choices = compiled.plan.choices
    for r in report:
        assert len(r["finalists_ms"]) == 2
        assert r["chosen"] == min(r["finalists_ms"], key=r["finalists_ms"].get)
        for name in r["nodes"]:
            kernel = choices[name].kernel
            assert family(kernel) == \
                r["chosen"].split("#")[0]
    assert not any(c.finalists for c in choices.values())
    assert not any("halide" in n.attrs for n in compiled.graph.nodes)   # choices, not attrs
    x = rand(1, 8, 10, 10, seed=9)
    want = ort_run(model, {"x": x})[0]
    got = compiled(x)
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))
    compiled.save(tmp_path / "plan")
    np.testing.assert_array_equal(woodpecker.load(tmp_path / "plan")(x), got)
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "plan"), "--runs", "2"]) == 0
    shown = [line for line in capsys.readouterr().out.splitlines()
             if "finalists in the plan" in line]
    assert len(shown) == 4 and all(line.endswith(r["chosen"]) for line, r in zip(shown, report))


def test_past_its_deadline_only_the_first_finalists_plan_is_built(tmp_path, monkeypatch):
    from woodpecker.deadline import Deadline
    from woodpecker.selection import in_plan

    model, log = _two_families_log(tmp_path / "log.jsonl")
    real = in_plan.choose_in_plan
    monkeypatch.setattr(in_plan, "choose_in_plan", lambda *a, **kw: real(
        *a, **dict(kw, deadline=Deadline.after(0))))
    compiled = woodpecker.compile(model, engines="halide,numpy", tuning_log=log, threads=2)
    report = compiled.plan.meta["in_plan"]
    assert len(report) == 4
    for r in report:
        assert len(r["finalists_ms"]) == 1 and not r["changed"]
    x = rand(1, 8, 10, 10, seed=9)
    want = ort_run(model, {"x": x})[0]
    assert np.max(np.abs(compiled(x) - want)) <= 1e-4 * np.max(np.abs(want))
