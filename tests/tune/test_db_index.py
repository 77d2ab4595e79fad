"""The tuning database's index (tune/db_index.py, issue 76): built once per file digest in the
cache, it answers what the whole file's parse answers — each task's records, the template
votes, the sample of the rest — and a tuning log asks it per task instead of reading the file;
a cache it cannot write leaves the file parsed in memory."""

from __future__ import annotations

import random

from woodpecker.engines.halide.templates import template_module
from woodpecker.target import Target
from woodpecker.tasks.conv import ConvTask
from woodpecker.tune import database
from woodpecker.tune.database import indexed_database, load_database, write_database
from woodpecker.tune.db_index import MemoryIndex, SqliteIndex
from woodpecker.tune.records import TuningLog, TuningRecord

HERE = Target.parse("cpu", 2).record_key
ELSEWHERE = "x86_64:avx2,fma:2t" if HERE != "x86_64:avx2,fma:2t" else "x86_64:sse4_2:2t"
DIRECT, GEMM = "conv_direct", "conv_gemm"


def _task(c: int, hw: int) -> ConvTask:
    return ConvTask(1, c, hw, hw, c, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True, ())


TASKS = [_task(8, 8), _task(16, 8), _task(16, 4)]


def _records() -> list[TuningRecord]:
    """Records of three tasks, two templates, this target and another."""
    out = []
    rng = random.Random(0)
    for t in TASKS:
        for template in (DIRECT, GEMM):
            space = template_module(template).space(t)
            for target in (HERE, ELSEWHERE):
                for _ in range(6):
                    out.append(TuningRecord(t.key, template, space.sample(rng),
                                            rng.uniform(1e-4, 1e-3), target=target))
    return sorted(out, key=lambda r: (r.target, r.task, r.template, r.cost_s))


def _file(tmp_path):
    path = tmp_path / "db.jsonl.gz"
    write_database(_records(), path)
    return path


def test_the_index_answers_what_the_whole_parse_answers(tmp_path):
    path = _file(tmp_path)
    full = load_database(path)
    db = indexed_database(path, tmp_path / "cache")
    assert isinstance(db.index, SqliteIndex) and isinstance(full.index, MemoryIndex)
    assert len(db) == len(full) and db.targets == full.targets
    assert db.index.task_count(HERE) == full.index.task_count(HERE) == len(TASKS)
    for t in TASKS:
        assert db.index.of_task(t.key) == full.index.of_task(t.key)
    assert sorted(db.index.bests("conv2d")) == sorted(full.index.bests("conv2d"))
    assert db.index.all() == list(full.records)
    sample = db.index.sample(5, 0, template=DIRECT, same=True, except_task=TASKS[0].key)
    assert len(sample) == 5 and all(r.template == DIRECT and r.task != TASKS[0].key
                                    for r in sample)
    groups = db.index.groups(10, 0)           # whole ranking groups, at least 10 records
    assert len(groups) >= 10 and len(groups) % 12 == 0
    # a log asks either the same questions and gets the same answers
    by_index = TuningLog(tmp_path / "a.jsonl", HERE)
    by_parse = TuningLog(tmp_path / "b.jsonl", HERE)
    by_index.attach(db.index)
    by_parse.attach(full.records)
    for t in TASKS:
        assert by_index.best(t.key) == by_parse.best(t.key)
        assert by_index.task_records(t.key) == by_parse.task_records(t.key)
        for template in (DIRECT, GEMM):
            assert by_index.shipped_configs(t.key, template, 8) == \
                by_parse.shipped_configs(t.key, template, 8)
        assert by_index.template_bests(t.key, (DIRECT, GEMM)) == \
            by_parse.template_bests(t.key, (DIRECT, GEMM))
        assert by_index.transfer_sample(t.key, DIRECT, 20, 0) == \
            by_parse.transfer_sample(t.key, DIRECT, 20, 0)
    assert by_index.transfer == by_parse.transfer


def test_the_index_is_built_once_per_file_and_anew_for_another(tmp_path, monkeypatch):
    path, cache = _file(tmp_path), tmp_path / "cache"
    indexed_database(path, cache)
    (built,) = cache.glob("tuning-db-*.sqlite")

    def no_parse(*a):
        raise AssertionError("the file is parsed again")

    monkeypatch.setattr(database, "_parsed", no_parse)
    again = indexed_database(path, cache)          # the index, not the file
    assert len(again) == len(_records())
    assert again.index.of_task(TASKS[1].key)
    monkeypatch.undo()
    write_database(_records()[:10], path)          # another file: another index
    assert len(indexed_database(path, cache)) == 10
    assert len(list(cache.glob("tuning-db-*.sqlite"))) == 2


def test_a_cache_that_cannot_be_written_parses_the_file_in_memory(tmp_path):
    path = _file(tmp_path)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    db = indexed_database(path, blocked)
    assert isinstance(db.index, MemoryIndex) and len(db) == len(_records())


def test_a_log_reads_only_the_tasks_it_is_asked_about(tmp_path):
    path = _file(tmp_path)
    db = indexed_database(path, tmp_path / "cache")
    asked = []
    of_task = db.index.of_task
    db.index.of_task = lambda key: asked.append(key) or of_task(key)
    log = TuningLog(tmp_path / "user.jsonl", HERE)
    log.attach(db.index)
    assert log.best(TASKS[0].key) is not None
    log.shipped_configs(TASKS[0].key, DIRECT, 4)
    assert asked == [TASKS[0].key]                 # once, and no other task
