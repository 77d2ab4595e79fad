"""benchmarks/tuning_database.py regenerates a database from tuning logs: records a template
no longer builds are left out and counted, an existing database is kept as a source, and a
target can be left out (for showing the database on a machine it knows nothing of)."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

from woodpecker.engines.halide.templates import template_module
from woodpecker.tasks.conv import ConvTask
from woodpecker.tune.database import load_database
from woodpecker.tune.records import TuningLog, TuningRecord

ROOT = Path(__file__).resolve().parents[2]
TASK = ConvTask(1, 16, 8, 8, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, True, ())
ZEN4 = "x86_64:avx2,fma,avx512f,avx512bw,avx512vl,avx512_vnni:2t"
ZEN3 = "x86_64:avx2,fma:2t"


def _script():
    spec = importlib.util.spec_from_file_location("tuning_database",
                                                  ROOT / "benchmarks" / "tuning_database.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tuning_database"] = module
    spec.loader.exec_module(module)
    return module


def _log(path, target, n, seed):
    space = template_module("conv_direct").space(TASK, 32 if "avx512f" in target else 16)
    log = TuningLog(path)
    rng = random.Random(seed)
    for i in range(n):
        log.append(TuningRecord(TASK.key, "conv_direct", space.sample(rng), (i + 1) * 1e-3,
                                target=target))
    return log


def test_regenerating_keeps_buildable_records_and_leaves_out_a_target(tmp_path, capsys):
    script = _script()
    _log(tmp_path / "zen4.jsonl", ZEN4, 5, 0)
    _log(tmp_path / "zen3.jsonl", ZEN3, 3, 1).append(
        TuningRecord(TASK.key, "conv_direct", {"vec": 8, "knob_of_old": 1}, 1e-4, target=ZEN3))
    out = tmp_path / "db.jsonl.gz"
    assert script.main([str(tmp_path / "zen4.jsonl"), str(tmp_path / "zen3.jsonl"),
                        "-o", str(out)]) == 0
    assert load_database(out).targets == {ZEN4: 5, ZEN3: 3}
    assert "left out: 1 (config outside the template's knobs)" in capsys.readouterr().out
    held_out = tmp_path / "no_zen4.jsonl.gz"
    assert script.main(["--keep-existing", "-o", str(out)]) == 0          # kept as a source
    assert load_database(out).targets == {ZEN4: 5, ZEN3: 3}
    assert script.main([str(out), "--drop-target", ZEN4, "-o", str(held_out)]) == 0
    assert load_database(held_out).targets == {ZEN3: 3}


def test_records_name_their_machine_and_one_machine_can_be_left_out(tmp_path, capsys):
    """Zen 4 and Zen 5 share one target key: `LOG@MACHINE` names the machine of a log's
    records that do not carry it, the database keeps it, and `--drop-machine` leaves that
    machine's logs out before each task's source is chosen — a task the left-out machine's
    bigger log held keeps the other machine's records."""
    script = _script()
    _log(tmp_path / "zen4.jsonl", ZEN4, 3, 0)
    _log(tmp_path / "zen5.jsonl", ZEN4, 6, 1)
    out = tmp_path / "db.jsonl.gz"
    assert script.main([f"{tmp_path / 'zen4.jsonl'}@Zen 4", f"{tmp_path / 'zen5.jsonl'}@Zen 5",
                        "-o", str(out)]) == 0
    kept = load_database(out).records
    assert {r.machine for r in kept} == {"Zen 5"} and len(kept) == 6   # the bigger log's task
    assert f"{ZEN4} (Zen 5): 6 records of 1 tasks" in capsys.readouterr().out
    held_out = tmp_path / "no_zen5.jsonl.gz"
    assert script.main([f"{tmp_path / 'zen4.jsonl'}@Zen 4", str(out), "--drop-machine", "Zen 5",
                        "-o", str(held_out)]) == 0
    kept = load_database(held_out).records
    assert {r.machine for r in kept} == {"Zen 4"} and len(kept) == 3
