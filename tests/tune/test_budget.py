"""A short budget tunes the heaviest tasks rather than none (issue 76: `--budget 30s` measured
nothing on 26 tasks): where the budget cannot give every task one chunk of candidates
(`config.MIN_TASK_S`), the heaviest it can are tuned, heaviest first, each measuring at least
one candidate of its own even where the shipped database holds its task; the progress line
follows the tasks to the end. Nothing is compiled: a fake measurer."""

from __future__ import annotations

import io
import time

from tests.helpers import conv_dag_model
from woodpecker.deadline import Deadline
from woodpecker.engines.halide.templates import template_module
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.options import TuneOptions
from woodpecker.passes import optimize
from woodpecker.target import Target
from woodpecker.tune import driver
from woodpecker.tune.extract import extract_tasks
from woodpecker.tune.measure import Measurement
from woodpecker.tune.records import TuningLog, TuningRecord

TARGET = Target.parse("cpu", 2)


class FakeMeasurer:
    """Each candidate valid, timed in `seconds` of real time."""

    calls: list = []

    def __init__(self, *a, seconds: float = 0.2, **kw) -> None:
        self.seconds = seconds

    def measure(self, template, task, config, reference=None):
        FakeMeasurer.calls.append(task.key)
        time.sleep(self.seconds)
        return Measurement(1e-3, None, 0.0, 1.0 if reference is not None else None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


class NoPool(FakeMeasurer):
    workers = 1


def _graph():
    graph = import_onnx(conv_dag_model([("pw", 0, 0), ("relu", 1, 0), ("conv", 2, 0)], 16, 16))
    optimize(graph)
    return graph


def test_a_short_budget_tunes_the_heaviest_task_over_a_database_record(tmp_path, monkeypatch):
    monkeypatch.setattr(driver, "Measurer", FakeMeasurer)
    monkeypatch.setattr(driver, "BuildPool", NoPool)
    FakeMeasurer.calls = []
    graph = _graph()
    groups = extract_tasks(graph, parts=True)
    assert len(groups) >= 2
    heaviest = max(zip(driver.work_weights(groups), groups), key=lambda p: p[0])[1].task.key
    assert heaviest != groups[0].task.key             # graph order would start elsewhere
    log = TuningLog(tmp_path / "user.jsonl", TARGET.record_key)
    log.attach([TuningRecord(g.task.key, g.templates[0],
                             template_module(g.templates[0]).space(g.task).first_valid(),
                             1e-3, target=TARGET.record_key) for g in groups])
    out = io.StringIO()
    driver.tune_graph(graph, TARGET, log, TuneOptions(60, search="ga", build_workers=1), out,
                      Deadline.after(1.0))
    assert FakeMeasurer.calls and set(FakeMeasurer.calls) == {heaviest}
    assert log.user_has(heaviest)
    said = out.getvalue()
    assert f"the 1 heaviest of {len(groups)} task(s) tuned" in said
    assert said.splitlines()[-1].endswith("task 1/1 done")     # the bar followed to the end


def test_a_budget_that_fits_every_task_keeps_them_all_in_order():
    graph = _graph()
    groups = extract_tasks(graph, parts=True)
    weights = driver.work_weights(groups)
    kept, w = driver.heaviest_that_fit(groups, weights, 1e6)
    assert kept == groups and w == weights
    one, _ = driver.heaviest_that_fit(groups, weights, 0.0, io.StringIO())
    assert [g.task.key for g in one] == \
        [max(zip(weights, groups), key=lambda p: p[0])[1].task.key]


def test_each_task_tuned_keeps_one_chunk_of_the_time_left():
    """A heavy task (a shape class's lead) leaves every later task `MIN_TASK_S`; a light one
    gets that much where there is room; with plenty of time the weights alone decide."""
    from woodpecker.config import MIN_TASK_S

    left = 3 * MIN_TASK_S
    assert driver.task_share(left, [9.0, 1.0]) == left - MIN_TASK_S
    assert driver.task_share(left, [1.0, 9.0]) == MIN_TASK_S
    assert driver.task_share(100 * MIN_TASK_S, [1.0, 1.0]) == 50 * MIN_TASK_S
    assert driver.task_share(MIN_TASK_S, [1.0, 1.0]) == MIN_TASK_S / 2   # no room: weights
