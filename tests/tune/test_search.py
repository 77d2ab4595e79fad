"""Searchers on synthetic spaces (no compiling): the GA converges to good configurations and
beats its initial population; the tuning log survives torn writes and resume re-measures
nothing."""

from __future__ import annotations

import random

import pytest

from woodpecker.tasks.space import Constraint, Knob, KnobSpace
from woodpecker.tune.context import TuningContext
from woodpecker.tune.records import TuningLog, TuningRecord
from woodpecker.tune.searchers import make_searcher
from woodpecker.tune.tuner import tune_task

SPACE = KnobSpace([Knob(f"k{i}", tuple(range(8))) for i in range(4)],
                  [Constraint("k0+k1 <= 12", lambda c: c["k0"] + c["k1"] <= 12)])


def searcher(name, space, seed):
    return make_searcher(name, TuningContext(FakeTask(), "t", space, seed=seed))


def cost(c) -> float:
    """Minimum 1.0 at (5, 2, 7, 3)."""
    return 1.0 + sum((c[f"k{i}"] - t) ** 2 for i, t in enumerate((5, 2, 7, 3)))


def _run(name, seed, max_trials=400):
    s = searcher(name, SPACE, seed)
    seen = []
    while len(seen) < max_trials:
        configs = s.ask()
        if not configs:
            break
        assert all(SPACE.is_valid(c) for c in configs)
        costs = [cost(c) for c in configs]
        seen += costs
        s.tell(configs, costs)
    return seen, s


def test_genetic_search_improves_on_its_initial_population():
    for seed in range(5):
        seen, s = _run("ga", seed)
        first = seen[: s.population]
        assert min(seen) < min(first)
        assert min(seen) <= 5.0, (seed, min(seen))


def test_genetic_search_measures_the_valid_seeds_first():
    good, broken = {"k0": 5, "k1": 2, "k2": 7, "k3": 3}, {"k0": 7, "k1": 7, "k2": 0, "k3": 0}
    space = KnobSpace(SPACE.knobs, SPACE.constraints, seeds=(good, broken))
    assert space.seeds == [good]                  # k0 + k1 > 12: invalid, dropped
    first = searcher("ga", space, 0).ask()
    assert first[0] == good and len(first) == 12 and all(space.is_valid(c) for c in first)
    with pytest.raises(ValueError, match="outside"):
        KnobSpace(SPACE.knobs, seeds=({"k0": 9, "k1": 0, "k2": 0, "k3": 0},))


def test_random_search_never_repeats():
    s = searcher("random", SPACE, 0)
    keys = []
    for _ in range(10):
        keys += [KnobSpace.key(c) for c in s.ask()]
    assert len(keys) == len(set(keys)) == 80


class FakeMeasurer:
    def __init__(self):
        self.calls = []

    def measure(self, template, task, config, reference=None):
        from woodpecker.tune.measure import Measurement

        self.calls.append(KnobSpace.key(config))
        return Measurement(cost(config) * 1e-3, None, 0.0) if config["k3"] != 0 else \
            Measurement(None, "worker crashed (signal 11)")


class FakeTask:
    key = "synthetic"
    flops = 1_000_000


def test_log_resume_and_torn_lines(tmp_path):
    path = tmp_path / "log.jsonl"
    log = TuningLog(path)
    m1 = FakeMeasurer()
    tune_task(FakeTask(), "t", SPACE, searcher("ga", SPACE, 1), m1, log,
              searcher_name="ga", seed=1, max_trials=30)
    assert len(m1.calls) == 30 == len(TuningLog(path).records)
    with open(path, "ab") as f:
        f.write(b'{"task": "synthetic", "templ')            # a kill mid-write
    log2 = TuningLog(path)
    assert len(log2.records) == 30 and log2.skipped_lines == 1
    m2 = FakeMeasurer()
    best = tune_task(FakeTask(), "t", SPACE, searcher("ga", SPACE, 1), m2, log2,
                     searcher_name="ga", seed=1, max_trials=30)
    assert not set(m2.calls) & set(m1.calls)                 # nothing re-measured
    log3 = TuningLog(path)
    assert len(log3.records) == 30 + len(m2.calls) and log3.skipped_lines == 1
    assert best.cost_s == min(r.cost_s for r in log3.records if r.cost_s)
    assert any(r.error for r in log3.records)             # invalid ones are recorded


def test_paired_costs_share_one_scale_while_the_machine_speed_moves(tmp_path):
    """Each candidate is timed against the best record so far; its cost is that record's cost
    times their ratio, so the log ranks configs as their true costs do although every
    candidate's own time is taken at a random machine speed (1× to 3×)."""
    from woodpecker.tune.measure import Measurement

    rng = random.Random(0)

    class DriftingMachine:
        def measure(self, template, task, config, reference=None):
            own = cost(config) * 1e-3 * rng.uniform(1.0, 3.0)
            ratio = None if reference is None else cost(config) / cost(reference.config)
            return Measurement(own, None, 0.0, ratio)

    log = TuningLog(tmp_path / "log.jsonl")
    tune_task(FakeTask(), "t", SPACE, searcher("random", SPACE, 0), DriftingMachine(), log,
              searcher_name="random", seed=0, max_trials=40)
    first, *rest = log.records
    assert first.vs_best is None and all(r.vs_best > 0 for r in rest)
    for r in log.records:
        assert r.cost_s == pytest.approx(cost(r.config) / cost(first.config) * first.cost_s)


def test_noisy_ratios_do_not_drift_the_scale_of_alike_configs(tmp_path):
    """Every config equally fast, every ratio off by a factor 0.8 or 1.25 at random: chained
    from best to new best, the best's cost would fall by 0.8 per lucky pick; from the anchor
    (the task's first record) it stays one ratio away, ≥ 0.8 × the anchor's."""
    from woodpecker.tune.measure import Measurement

    rng = random.Random(1)

    class NoisyRatios:
        calls = 0

        def measure(self, template, task, config, reference=None):
            self.calls += 1
            noise = rng.choice((0.8, 1.25))
            return Measurement(1e-3, None, 0.0, None if reference is None else noise)

    machine = NoisyRatios()
    log = TuningLog(tmp_path / "log.jsonl")
    tune_task(FakeTask(), "t", SPACE, searcher("random", SPACE, 0), machine, log,
              searcher_name="random", seed=0, max_trials=60)
    first = log.records[0]
    assert log.own_first(FakeTask().key) is first
    picked = [r for r in log.records[1:] if r.vs_best < 1]
    assert len(picked) > 10 and machine.calls > len(log.records)   # new bests timed twice
    assert min(r.cost_s for r in log.records) >= 0.8 * first.cost_s * (1 - 1e-9)


def test_sample_rng_is_seeded():
    a = SPACE.sample(random.Random(3))
    assert a == SPACE.sample(random.Random(3))


def test_templates_share_the_trials_and_the_best_wins(tmp_path):
    """Every template supporting the task is tuned; trials are split among them and the
    fastest record over all templates is returned."""
    from woodpecker.tasks.conv import ConvTask
    from woodpecker.tune.measure import Measurement
    from woodpecker.tune.tuner import tune_templates

    class TemplateMeasurer:
        def __init__(self):
            self.calls = []

        def measure(self, template, task, config, reference=None):
            self.calls.append(template)
            fast = template.endswith("conv_gemm")
            return Measurement((1.0 if fast else 2.0) * 1e-3 / config["vec"], None, 0.0)

    task = ConvTask(1, 16, 8, 8, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True, ())
    templates = ("conv_direct", "conv_gemm")
    m, log = TemplateMeasurer(), TuningLog(tmp_path / "log.jsonl")
    best = tune_templates(task, templates, m, log, search="random", seed=0,
                          vector_registers=16, max_trials=9)
    assert m.calls.count(templates[0]) == 5 and m.calls.count(templates[1]) == 4
    assert best.template == templates[1]
    assert best.cost_s == min(r.cost_s for r in log.records)


def test_similar_tasks_winning_template_gets_the_larger_share_and_goes_first(tmp_path):
    """Transfer of the template choice: other tasks of the kind, measured with every template,
    vote for their winner (weighted by similarity); the floor keeps the loser searched; the
    winner is tuned first with most trials. Without such tasks: equal shares, given order. A
    task reading its input in another layout (a stem's NCHW) does not vote."""
    from woodpecker.config import TEMPLATE_FLOOR
    from woodpecker.tasks.conv import ConvTask
    from woodpecker.tune.measure import Measurement
    from woodpecker.tune.tuner import template_weights, tune_templates

    def conv(c, hw):
        return ConvTask(1, c, hw, hw, c, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True, ())

    templates = ("conv_direct", "conv_gemm")
    task, log = conv(16, 8), TuningLog(tmp_path / "log.jsonl")
    assert template_weights(task, templates, log) == [1.0, 1.0]
    for c, hw in ((32, 8), (64, 8), (16, 16)):
        for tmpl, cost in zip(templates, (2e-3, 1e-3)):
            log.append(TuningRecord(task=conv(c, hw).key, template=tmpl, config={"vec": 8},
                                    cost_s=cost))
    log.append(TuningRecord(task=conv(8, 4).key, template=templates[0], config={"vec": 8},
                            cost_s=1e-6))                     # one template only: no vote
    w = template_weights(task, templates, log)
    assert w[1] > w[0] > 0
    assert w[0] == pytest.approx(TEMPLATE_FLOOR * (w[1] - w[0]))   # floor: share of the votes

    class Recorder:
        calls: list[str] = []

        def measure(self, template, task, config, reference=None):
            self.calls.append(template)
            return Measurement(1e-3 / config["vec"], None, 0.0)

    m = Recorder()
    tune_templates(task, templates, m, log, search="random", seed=0, vector_registers=16,
                   max_trials=12)
    assert m.calls[0] == templates[1]
    assert m.calls.count(templates[1]) > m.calls.count(templates[0]) >= 1

    # a stem reading the model's NCHW input learns only from stems (here: direct won there)
    def stem(k, hw):
        return ConvTask(1, 3, hw, hw, k, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1, True, (),
                        x_layout="NCHW")

    assert template_weights(stem(16, 32), templates, log) == [1.0, 1.0]
    for tmpl, cost in zip(templates, (1e-3, 2e-3)):
        log.append(TuningRecord(task=stem(32, 64).key, template=tmpl, config={"vec": 8},
                                cost_s=cost))
    s = template_weights(stem(16, 32), templates, log)
    assert s[0] > s[1] > 0
    assert template_weights(task, templates, log) == w      # the stem does not vote here


def test_a_task_with_nothing_valid_overruns_its_share_by_one_measurement_only(tmp_path):
    """A share already spent measures nothing, unless the session's end is later: then the
    task measures until one candidate is measured (here the first is invalid: k3 = 0 crashes,
    so exactly one), and a task that already has a valid record measures nothing."""
    import time

    crash = {"k0": 1, "k1": 1, "k2": 1, "k3": 0}
    space = KnobSpace(SPACE.knobs, SPACE.constraints, seeds=(crash,))
    log = TuningLog(tmp_path / "log.jsonl")
    past, later = time.monotonic() - 1, time.monotonic() + 60

    def run(hard):
        m = FakeMeasurer()
        tune_task(FakeTask(), "t", space, searcher("ga", space, 0), m, log, searcher_name="ga",
                  seed=0, deadline=past, hard_deadline=hard)
        return m.calls

    assert run(None) == []
    assert run(past) == []
    assert run(later) == [KnobSpace.key(crash)]
    assert log.best("synthetic") is None
    assert len(run(later)) == 1                  # still nothing valid: one more
    log.append(TuningRecord(task="synthetic", template="t", config=dict(crash, k3=3), cost_s=1e-3))
    assert run(later) == []


def test_tampered_lines_are_skipped_and_the_rest_read(tmp_path):
    """Lines that are JSON but not records — a cost that is text, negative or infinite, a
    config that is not an object, a target that is not text — are counted and left out; the
    good records around them are read."""
    import json

    good = {"task": "synthetic", "template": "t", "config": {"k0": 1}, "cost_s": 1e-3}
    bad = [dict(good, cost_s="fast"), dict(good, cost_s=-1.0), dict(good, cost_s=True),
           dict(good, config=[1, 2]), dict(good, target=7), dict(good, gflops="many"),
           {"task": "synthetic"}, [1, 2, 3]]
    path = tmp_path / "log.jsonl"
    lines = [json.dumps(good)] + [json.dumps(b) for b in bad] + ['{"cost_s": Infinity}',
                                                               json.dumps(good)]
    path.write_text("\n".join(lines) + "\n")
    log = TuningLog(path)
    assert len(log.records) == 2 and log.skipped_lines == len(bad) + 1
    assert log.best("synthetic").cost_s == 1e-3
