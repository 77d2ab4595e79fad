"""The shipped tuning database (tune/database.py): it round-trips, is keyed by target, never
overrides the user's own records, starts tuning from its configs, gives an untuned task its
kernels in a compile, and a corrupt or foreign-version file is ignored with one warning line."""

from __future__ import annotations

import gzip
import io
import json
import random

import pytest

from tests.helpers import conv_bn_relu_residual, seed_tuning_log
from woodpecker.engines.halide.templates import known_template, template_module
from woodpecker.target import Target, host_machine
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.space import KnobSpace
from woodpecker.tune.database import (
    EMPTY,
    FORMAT,
    PACKAGED,
    VERSION,
    database_records,
    default_database,
    load_database,
    write_database,
)
from woodpecker.tune.records import TuningLog, TuningRecord

HERE = Target.parse("cpu", 2).record_key
ELSEWHERE = "x86_64:avx2,fma:2t" if HERE != "x86_64:avx2,fma:2t" else "x86_64:sse4_2:2t"
TASK = ConvTask(1, 16, 8, 8, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True, ())
DIRECT = "conv_direct"


def _configs(n: int, seed: int = 0) -> list[dict]:
    space = template_module(DIRECT).space(TASK)
    rng = random.Random(seed)
    out: list[dict] = []
    while len(out) < n:
        c = space.sample(rng)
        if c not in out:
            out.append(c)
    return out


def _db(tmp_path, records, name="db.jsonl.gz"):
    path = tmp_path / name
    write_database(records, path)
    return path


def test_a_database_round_trips_and_keeps_one_scale_per_task(tmp_path):
    a, b, c = _configs(3)
    small = [TuningRecord(TASK.key, DIRECT, a, 2e-3, target=HERE)]
    big = [TuningRecord(TASK.key, DIRECT, b, 1e-3, target=HERE, error=None),
           TuningRecord(TASK.key, DIRECT, c, 3e-3, target=HERE),
           TuningRecord(TASK.key, DIRECT, c, 4e-3, target=HERE),       # slower repeat
           TuningRecord(TASK.key, DIRECT, a, None, target=HERE, error="crashed"),
           TuningRecord(TASK.key, DIRECT, a, 1e-3),                   # no target: unknown
           TuningRecord(TASK.key, "gone", a, 1e-3, target=HERE)]      # no such template
    kept = database_records([small, big])
    assert [(r.config, r.cost_s) for r in kept] == [(b, 1e-3), (c, 3e-3)]   # the bigger log's
    assert all(r.error is None and not r.provenance and r.time is None for r in kept)
    db = load_database(_db(tmp_path, kept))
    assert db.records == tuple(kept) and db.targets == {HERE: 2}
    assert _db(tmp_path, kept, "again.gz").read_bytes() == (tmp_path / "db.jsonl.gz").read_bytes()


def test_a_log_stamps_its_records_with_this_host_s_machine_and_the_database_keeps_it(tmp_path):
    a, b = _configs(2)
    log = TuningLog(tmp_path / "log.jsonl", target=HERE)
    log.append(TuningRecord(TASK.key, DIRECT, a, 1e-3))
    log.append(TuningRecord(TASK.key, DIRECT, b, 2e-3, target=HERE, machine="Zen 4"))
    again = TuningLog(tmp_path / "log.jsonl", target=HERE).records
    assert [r.machine for r in again] == [host_machine(), "Zen 4"]      # a worker's is kept
    db = load_database(_db(tmp_path, database_records([again])))
    assert [r.machine for r in db.records] == [host_machine(), "Zen 4"]


def test_the_packaged_database_is_small_valid_and_holds_this_project_s_machines():
    db = load_database(PACKAGED)
    assert len(db) > 1000 and PACKAGED.stat().st_size <= 20 * 2**20
    assert len(db.targets) >= 2               # records of two CPU families at least
    assert all(known_template(r.template) == r.template and r.valid for r in db.records)


def test_records_of_this_target_speak_for_a_task_only_until_the_user_has_one(tmp_path):
    fast, mid, slow, other = _configs(4)
    log = TuningLog(tmp_path / "user.jsonl", HERE)
    log.attach([TuningRecord(TASK.key, DIRECT, fast, 1e-4, target=HERE),
                TuningRecord(TASK.key, DIRECT, slow, 9e-3, target=HERE),
                TuningRecord(TASK.key, DIRECT, other, 1e-6, target=ELSEWHERE),
                TuningRecord("another", DIRECT, other, 1e-6, target=ELSEWHERE)])
    assert log.best(TASK.key).config == fast                   # foreign records never do
    assert log.shipped_configs(TASK.key, DIRECT, 4) == [fast, slow]
    assert [r.config for r in log.task_records(TASK.key)] == [fast, slow]
    assert len(log.knowledge()) == 4 and log.knowledge()[0].target == HERE
    assert log.best("another") is None and log.records == []
    log.append(TuningRecord(TASK.key, DIRECT, mid, 5e-3))      # slower than the shipped best
    assert log.best(TASK.key).config == mid                    # the user's record decides
    assert log.best(TASK.key, lambda r: True).config == mid
    assert [r.config for r in log.task_records(TASK.key)] == [mid]
    assert log.user_has(TASK.key) and log.own_best(TASK.key).config == mid
    lines = (tmp_path / "user.jsonl").read_text().splitlines()
    assert [json.loads(ln)["config"] for ln in lines] == [mid]   # nothing shipped written


@pytest.mark.parametrize("search", ["ga", "glimpse"])
def test_tuning_a_task_the_user_has_nothing_of_starts_from_the_shipped_configs(tmp_path, search):
    from woodpecker.tune.measure import Measurement
    from woodpecker.tune.tuner import tune_templates

    class Recording:
        def __init__(self):
            self.calls = []

        def measure(self, template, task, config, reference=None):
            self.calls.append((config, None if reference is None else reference.config))
            return Measurement(1e-3, None, 0.0, 1.0 if reference is not None else None)

    shipped = _configs(3, seed=7)
    log = TuningLog(tmp_path / "user.jsonl", HERE)
    log.attach([TuningRecord(TASK.key, DIRECT, c, (i + 1) * 1e-3, target=HERE)
                for i, c in enumerate(shipped)])
    m = Recording()
    tune_templates(TASK, (DIRECT,), m, log, search=search, seed=0, vector_registers=16,
                   max_trials=3)
    assert [c for c, _ in m.calls] == shipped
    assert m.calls[0][1] == shipped[0]          # timed paired with the shipped best
    assert [r.config for r in log.records] == shipped


@pytest.mark.parametrize("content", [
    b"not gzip at all",
    b"",                                                                      # empty
    gzip.compress(b"x" * 1000)[:12] + b"\xff" * 40,                          # bad deflate
    gzip.compress(b'{"format": "woodpecker-tuning-db", "vers'),              # torn
    gzip.compress(json.dumps({"format": FORMAT, "version": VERSION + 1}).encode() + b"\n"),
    gzip.compress(json.dumps({"format": "other"}).encode() + b"\n"),
    gzip.compress(json.dumps({"format": FORMAT, "version": VERSION}).encode()
                  + b'\n{"task": "t", "template": "dense", "config": {}, "cost_s": -1}\n'),
])
def test_a_corrupt_or_foreign_version_database_is_ignored_with_one_warning(tmp_path, content):
    path = tmp_path / "db.jsonl.gz"
    path.write_bytes(content)
    out = io.StringIO()
    assert load_database(path, out) is EMPTY
    said = out.getvalue().splitlines()
    assert len(said) == 1 and said[0].startswith(f"warning: tuning database {path} not used")


def test_the_environment_chooses_the_database(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WOODPECKER_CACHE", str(tmp_path / "cache"))   # where its index goes
    monkeypatch.setenv("WOODPECKER_DATABASE", "off")
    assert default_database() is EMPTY
    path = _db(tmp_path, [TuningRecord(TASK.key, DIRECT, _configs(1)[0], 1e-3, target=HERE)])
    monkeypatch.setenv("WOODPECKER_DATABASE", str(path))
    assert len(default_database()) == 1
    monkeypatch.setenv("WOODPECKER_DATABASE", str(tmp_path / "missing.gz"))
    assert default_database() is EMPTY
    assert "not used" in capsys.readouterr().err


def test_a_compile_from_an_empty_log_takes_this_target_s_kernels_from_the_database(
        tmp_path, monkeypatch):
    pytest.importorskip("halide")
    import woodpecker

    model = conv_bn_relu_residual()
    seeded = seed_tuning_log(model, tmp_path / "seed.jsonl")
    here = Target.parse("cpu", 1).record_key
    path = _db(tmp_path, [TuningRecord(r.task, r.template, r.config, r.cost_s, target=here)
                          for r in seeded.records])
    monkeypatch.setenv("WOODPECKER_DATABASE", str(path))
    kw = dict(engines="halide,numpy", threads=1, tuning_log=tmp_path / "empty.jsonl")
    with_db = woodpecker.compile(model, **kw)
    assert "halide" in with_db.plan.engines
    without = woodpecker.compile(model, database=False, **kw)
    assert "halide" not in without.plan.engines
    assert not (tmp_path / "empty.jsonl").exists()       # nothing written to the user's log


def test_export_db_writes_the_user_s_records_of_this_machine(tmp_path, capsys):
    from woodpecker.cli import main

    log = TuningLog(tmp_path / "mine.jsonl", HERE)
    for i, c in enumerate(_configs(2)):
        log.append(TuningRecord(TASK.key, DIRECT, c, (i + 1) * 1e-3))
    log.append(TuningRecord(TASK.key, DIRECT, _configs(3)[2], None, error="crashed"))
    out = tmp_path / "mine.jsonl.gz"
    assert main(["tune", "--tuning-log", str(log.path), "--export-db", str(out),
                 "--threads", "2"]) == 0
    db = load_database(out)
    assert [r.config for r in db.records] == _configs(2) and db.targets == {HERE: 2}
    assert "2 record(s)" in capsys.readouterr().out


def test_another_machine_s_records_are_featurized_with_what_their_target_key_tells():
    """Glimpse's rows carry the machine's blueprint: this machine's measured one for its own
    records (and records without a target), the extensions, lanes, registers and threads of
    the record's target for a database record of another machine."""
    import math

    from woodpecker.tune.blueprint import key_vector
    from woodpecker.tune.cost_model import FeatureCache

    cache = FeatureCache({**key_vector(HERE), "hw.gflops": 7.0}, here=HERE)
    config = _configs(1)[0]
    mine = cache.record_row(TuningRecord(TASK.key, DIRECT, config, 1e-3, target=HERE))
    old = cache.record_row(TuningRecord(TASK.key, DIRECT, config, 1e-3))
    theirs = cache.record_row(TuningRecord(TASK.key, DIRECT, config, 1e-3, target=ELSEWHERE))
    assert mine["hw.gflops"] == old["hw.gflops"] == 7.0 and "hw.gflops" not in theirs
    lanes = 8 if "avx2" in ELSEWHERE else 4
    assert theirs["hw.avx512f"] == 0.0 and theirs["hw.lanes"] == math.log2(1 + lanes)
    assert {k: v for k, v in theirs.items() if not k.startswith("hw.")} == \
        {k: v for k, v in mine.items() if not k.startswith("hw.")}


def test_every_template_starts_from_the_database_and_the_first_cost_is_this_machine_s(tmp_path):
    """A task the user's log had nothing of measures the database's configs of each of its
    templates first — not only of the template tuned first — and the costs it records are
    this machine's: the first is its own time, not the database machine's scaled."""
    from woodpecker.tune.measure import Measurement
    from woodpecker.tune.tuner import tune_templates

    class Recording:
        def __init__(self):
            self.calls = []

        def measure(self, template, task, config, reference=None):
            self.calls.append((template, config))
            return Measurement(2e-3, None, 0.0, 1.0 if reference is not None else None)

    gemm = template_module("conv_gemm").space(TASK).sample(random.Random(3))
    direct = _configs(1, seed=5)[0]
    log = TuningLog(tmp_path / "user.jsonl", HERE)
    log.attach([TuningRecord(TASK.key, "conv_gemm", gemm, 1e-4, target=HERE),
                TuningRecord(TASK.key, DIRECT, direct, 5e-4, target=HERE)])
    m = Recording()
    tune_templates(TASK, (DIRECT, "conv_gemm"), m, log, search="ga", seed=0,
                   vector_registers=16, max_trials=24)
    for template, config in ((DIRECT, direct), ("conv_gemm", gemm)):
        assert [c for t, c in m.calls if t == template][0] == config
    assert log.records[0].cost_s == 2e-3          # its own time, not 1.0 x the database's


def test_user_records_no_template_builds_any_more_do_not_hide_the_database(tmp_path):
    a, b = _configs(2)
    log = TuningLog(tmp_path / "user.jsonl", HERE)
    log.append(TuningRecord(TASK.key, DIRECT, dict(a, knob_of_old=1), 1e-5))
    log.append(TuningRecord(TASK.key, "gone", a, 1e-6))           # an unknown template
    log.attach([TuningRecord(TASK.key, DIRECT, b, 1e-3, target=HERE)])
    space = template_module(DIRECT).space(TASK)
    usable = lambda r: r.template == DIRECT and space.in_domain(r.config)  # noqa: E731
    assert log.best(TASK.key, usable).config == b     # no user record passes `usable`


def test_another_target_s_configs_seed_a_task_this_target_has_no_record_of(tmp_path):
    """Records of other targets never speak for a task, but where the database holds none of
    this target's they are the configs tuning measures first: each target's best first, the
    targets in turn, each fitted to this target's register file, timed alone (nothing of this
    machine's to pair them with)."""
    from woodpecker.tune.measure import Measurement
    from woodpecker.tune.tuner import tune_templates

    class Recording:
        def __init__(self):
            self.calls = []

        def measure(self, template, task, config, reference=None):
            self.calls.append((config, reference))
            return Measurement(1e-3, None, 0.0, None if reference is None else 1.0)

    wide = dict(_configs(1, seed=11)[0], vec=16, co_block=2, x_block=6, rc_block=0)
    assert template_module(DIRECT).space(TASK, 32).is_valid(wide)
    assert not template_module(DIRECT).space(TASK, 16).is_valid(wide)   # 24 accumulators
    a, b, c = _configs(3, seed=12)
    third = "x86_64:sse4_2:1t"
    log = TuningLog(tmp_path / "user.jsonl", HERE)
    log.attach([TuningRecord(TASK.key, DIRECT, b, 2e-3, target=ELSEWHERE),
                TuningRecord(TASK.key, DIRECT, wide, 1e-3, target=ELSEWHERE),
                TuningRecord(TASK.key, DIRECT, c, 5.0, target=third),
                TuningRecord(TASK.key, DIRECT, a, 3e-3, target=ELSEWHERE),
                TuningRecord(TASK.key, DIRECT, a, None, "failed", target=third)])
    assert log.shipped_configs(TASK.key, DIRECT, 8) == [wide, c, b, a]
    assert log.best(TASK.key) is None and log.task_records(TASK.key) == []
    m = Recording()
    tune_templates(TASK, (DIRECT,), m, log, search="ga", seed=0, vector_registers=16,
                   max_trials=2)
    space = template_module(DIRECT).space(TASK, 16)
    first, reference = m.calls[0]
    assert first == space.nearest_valid(wide) and space.is_valid(first)
    assert sum(first[k] != wide[k] for k in wide) == 1 and reference is None
    assert m.calls[1][0] == c
    log.attach([TuningRecord(TASK.key, DIRECT, b, 9e-3, target=HERE)])
    assert log.shipped_configs(TASK.key, DIRECT, 8) == [b]   # this target's, where it has any


def test_costs_become_seconds_by_the_task_s_paired_timings(tmp_path):
    """A task's costs share the scale of its first record, timed alone; its paired records'
    own times (`run_s`) say how many seconds a unit of that scale is: the database writes
    seconds, and a log's `seconds` converts its user's costs (a database's stay as they are)."""
    from woodpecker.tune.records import seconds_per_cost

    a, b, c, d = _configs(4, seed=21)
    lone = TuningRecord(TASK.key, DIRECT, a, 2e-3, target=HERE)          # the anchor, 2x off
    paired = [TuningRecord(TASK.key, DIRECT, b, 1e-3, run_s=0.5e-3, vs_best=0.5, target=HERE),
              TuningRecord(TASK.key, DIRECT, c, 4e-3, run_s=2.2e-3, vs_best=2.0, target=HERE),
              TuningRecord(TASK.key, DIRECT, d, 3e-3, run_s=1.2e-3, vs_best=1.5, target=HERE)]
    assert seconds_per_cost([lone, *paired]) == pytest.approx(0.5)
    assert seconds_per_cost([lone]) == 1.0 and seconds_per_cost([]) == 1.0
    held = {KnobSpace.key(r.config): r.cost_s for r in database_records([[lone, *paired]])}
    assert held == pytest.approx({KnobSpace.key(a): 1e-3, KnobSpace.key(b): 0.5e-3,
                                  KnobSpace.key(c): 2e-3, KnobSpace.key(d): 1.5e-3})
    again = database_records([database_records([[lone, *paired]])])      # seconds stay seconds
    assert [r.cost_s for r in again] == pytest.approx(sorted(held.values()))
    log = TuningLog(tmp_path / "user.jsonl", HERE)
    for r in (lone, *paired):
        log.append(r)
    log.attach([TuningRecord("other", DIRECT, a, 7e-3, target=HERE)])
    assert log.seconds(log.own_best(TASK.key)) == pytest.approx(0.5e-3)
    assert log.seconds(log.best("other")) == 7e-3
