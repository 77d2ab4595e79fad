"""Tasks of one shape class share a search (issue 52, tune/driver.shape_classes): a conv and
its twin with another fused epilogue, a bias or a prologue have one schedule space and one
`shape_class`; the first of a class tuned gets the class's weight but each follower's
CLASS_FOLLOWER_SHARE, and a follower measures its twins' fastest configs first."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.config import CLASS_FOLLOWER_SHARE, DATABASE_SEEDS
from woodpecker.engines.halide.templates import template_module
from woodpecker.target import Target
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.dense import DenseTask
from woodpecker.tasks.separable import SeparableTask
from woodpecker.tune.driver import shape_classes
from woodpecker.tune.extract import TaskGroup
from woodpecker.tune.measure import Measurement
from woodpecker.tune.records import TuningLog, TuningRecord
from woodpecker.tune.tuner import tune_templates

HERE = Target.parse("cpu", 2).record_key
DIRECT = "conv_direct"


def _conv(k=32, bias=True, epilogue=(), prologue=(), c=16):
    return ConvTask(1, c, 8, 8, k, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, bias, epilogue,
                    prologue=prologue)


PLAIN = _conv(bias=False)
FUSED = _conv(epilogue=(("Add",), ("Relu",)))
SCALED = _conv(prologue=(("Mul", (("in", 0), ("in", 1)), ()),))   # an SE scale first


def test_twins_with_other_fused_steps_share_a_class_and_not_a_key():
    assert len({PLAIN.key, FUSED.key, SCALED.key}) == 3
    assert PLAIN.shape_class == FUSED.shape_class == SCALED.shape_class == PLAIN.key
    assert _conv(k=48).shape_class != PLAIN.shape_class
    dense = DenseTask(1, 8, 64, 32, True, "row", ("full",), (("Add",), ("Relu",)))
    assert dense.shape_class == DenseTask(1, 8, 64, 32, True, "", (), ()).key
    assert dense.shape_class != DenseTask(1, 8, 64, 32, False, "", (), ()).shape_class
    dw = ConvTask(1, 16, 8, 8, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 16, True, (("Relu",),))
    sep = SeparableTask(dw, _conv(epilogue=(("Relu",),)))
    assert sep.shape_class == SeparableTask(dw.schedule_twin(), PLAIN).key


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 2), st.floats(0.1, 10.0)), min_size=1, max_size=8))
def test_followers_give_their_weight_to_the_first_of_their_class(tasks):
    kinds = [PLAIN, _conv(k=48), _conv(k=64)]
    groups = [TaskGroup(_conv(k=kinds[c].k, epilogue=(("Relu",),) * (i % 2)), (DIRECT,))
              for i, (c, _) in enumerate(tasks)]
    weights = [w for _, w in tasks]
    twins, moved = shape_classes(groups, weights)
    assert abs(sum(moved) - sum(weights)) <= 1e-9 * sum(weights)   # nothing lost or made
    for i, g in enumerate(groups):
        before = [j for j in range(i) if groups[j].task.shape_class == g.task.shape_class]
        assert twins[i] == tuple(groups[j].task.key for j in before)
        if before:
            assert moved[i] == pytest.approx(CLASS_FOLLOWER_SHARE * weights[i])
        else:
            followers = [j for j in range(i + 1, len(groups))
                         if groups[j].task.shape_class == g.task.shape_class]
            assert abs(moved[i] - weights[i] - sum((1 - CLASS_FOLLOWER_SHARE) * weights[j]
                                                   for j in followers)) < 1e-9


class Recording:
    def __init__(self):
        self.calls = []

    def measure(self, template, task, config, reference=None):
        self.calls.append(config)
        return Measurement(1e-3, None, 0.0, 1.0 if reference is not None else None)


def test_a_follower_measures_its_twins_fastest_configs_first(tmp_path):
    space = template_module(DIRECT).space(PLAIN)
    rng = random.Random(3)
    configs = []
    while len(configs) < DATABASE_SEEDS + 2:
        c = space.sample(rng)
        if c not in configs:
            configs.append(c)
    log = TuningLog(tmp_path / "user.jsonl", HERE)
    costs = [5e-3, 1e-3, 4e-3, 2e-3, 6e-3, 3e-3][:len(configs)]
    for c, cost in zip(configs, costs):
        log.append(TuningRecord(PLAIN.key, DIRECT, c, cost))
    log.append(TuningRecord(PLAIN.key, DIRECT, space.sample(rng), None, error="crashed"))
    m = Recording()
    tune_templates(FUSED, (DIRECT,), m, log, search="ga", seed=0, vector_registers=16,
                   max_trials=DATABASE_SEEDS, twins=(PLAIN.key,))
    fastest = [c for _, c in sorted(zip(costs, configs), key=lambda p: p[0])]
    assert m.calls == fastest[:DATABASE_SEEDS]
    alone = Recording()                         # without its twin: not these
    tune_templates(SCALED, (DIRECT,), alone, log, search="ga", seed=0, vector_registers=16,
                   max_trials=DATABASE_SEEDS)
    assert alone.calls != fastest[:DATABASE_SEEDS]


def test_a_follower_out_of_time_still_measures_its_twins_best_over_a_database_record(tmp_path):
    """Out of time, a task the user has nothing of measures one candidate all the same: its
    twin's best where it has a twin, else the database's best config (issue 76: a database
    record left untried was why a 30 s budget measured nothing)."""
    import time

    space = template_module(DIRECT).space(PLAIN)
    rng = random.Random(5)
    twin_best, shipped = space.sample(rng), space.sample(rng)

    def log(name):
        out = TuningLog(tmp_path / name, HERE)
        out.append(TuningRecord(PLAIN.key, DIRECT, twin_best, 1e-3))
        out.attach([TuningRecord(FUSED.key, DIRECT, shipped, 1e-3, target=HERE)])
        return out

    ended, session = time.monotonic() - 1, time.monotonic() + 60
    alone, first = Recording(), log("alone.jsonl")      # no twin: the database's config
    tune_templates(FUSED, (DIRECT,), alone, first, search="ga", seed=0, vector_registers=16,
                   deadline=ended, hard_deadline=session)
    assert alone.calls == [shipped] and first.user_has(FUSED.key)
    m, second = Recording(), log("twin.jsonl")
    tune_templates(FUSED, (DIRECT,), m, second, search="ga", seed=0, vector_registers=16,
                   deadline=ended, hard_deadline=session, twins=(PLAIN.key,))
    assert m.calls == [twin_best] and second.user_has(FUSED.key)
