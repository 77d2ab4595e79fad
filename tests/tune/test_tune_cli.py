"""`woodpecker tune` on a small model: the space listing, and SIGKILL mid-run followed by
--resume loses no finished record and re-measures no configuration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.helpers import make_model, rand
from woodpecker.cli import main

pytest.importorskip("halide")


@pytest.fixture
def conv_model(tmp_path):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    m = make_model(nodes, [("x", [1, 8, 12, 12])], [("y", [1, 16, 12, 12])],
                   {"w": rand(16, 8, 3, 3, seed=1), "b": rng.standard_normal(16)
                    .astype(np.float32)})
    p = tmp_path / "conv.onnx"
    onnx.save(m, p)
    return p


def test_show_space(conv_model, capsys):
    assert main(["tune", str(conv_model), "--show-space"]) == 0
    out = capsys.readouterr().out
    assert "task 0: conv 3x3/1 8->16 @ 12x12 +Relu" in out and "valid" in out


def _keys(path):
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    good = []
    for ln in lines:
        try:
            good.append(json.loads(ln))
        except json.JSONDecodeError:
            pass
    return [json.dumps(r["config"], sort_keys=True) for r in good], good


def test_sigkill_then_resume(conv_model, tmp_path):
    log = tmp_path / "tune.jsonl"
    cmd = [sys.executable, "-m", "woodpecker.cli", "tune", str(conv_model), "--budget", "120s",
           "--search", "random", "--tuning-log", str(log), "--threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 300     # a busy machine compiles slowly; no cost when quick
    while time.monotonic() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before_keys, before = _keys(log)
    assert len(before) >= 3
    r = subprocess.run(cmd[:-4] + ["--tuning-log", str(log), "--max-trials", "3"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "pass --resume" in r.stderr
    r = subprocess.run(cmd + ["--resume", "--max-trials", "3"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    after_keys, after = _keys(log)
    assert after[: len(before)] == before                 # finished records intact
    assert len(after_keys) == len(set(after_keys))        # nothing measured twice
    assert len(after) > len(before)


def test_compile_tune_then_inspect(conv_model, tmp_path, capsys):
    log, plan = tmp_path / "t.jsonl", tmp_path / "p"
    assert main(["compile", str(conv_model), "-o", str(plan), "--tune", "--budget", "60s",
                 "--max-trials", "3", "--tuning-log", str(log), "--engines",
                 "halide,numpy", "--threads", "2"]) == 0
    cap = capsys.readouterr()
    assert "task 1/1" in cap.err and "best" in cap.err and "GFLOP/s" in cap.err
    assert "generated Halide kernels run 100% of the FLOPs" in cap.out
    assert len(log.read_text().splitlines()) == 3
    doc = json.loads((plan / "plan.json").read_text())
    assert doc["model"]["tuning"]["measurements"] == 3
    assert main(["inspect", str(plan), "--json", str(tmp_path / "i.json")]) == 0
    assert "candidates (ms, conversions included): halide" in capsys.readouterr().out
    report = json.loads((tmp_path / "i.json").read_text())
    assert report["generated_flops_share"] == 1.0 and 0 < report["generated_time_share"] <= 1
    assert report["layout_conversions"] == 2
    # a non-empty log is only extended with --resume
    assert main(["compile", str(conv_model), "-o", str(plan), "--tune", "--tuning-log",
                 str(log)]) == 1


def test_tune_with_a_learned_searcher_records_it(conv_model, tmp_path, capsys):
    """`--search chameleon` from the command line: its records carry its name, seed and
    hyper-parameters."""
    pytest.importorskip("xgboost")
    log = tmp_path / "t.jsonl"
    assert main(["tune", str(conv_model), "--budget", "120s", "--search", "chameleon",
                 "--max-trials", "10", "--tuning-log", str(log), "--threads", "2"]) == 0
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(recs) == 10 and all(r["searcher"] == "chameleon" for r in recs)
    assert recs[0]["params"]["threshold"] == 2.5 and recs[0]["seed"] == 0
    assert any(r["cost_s"] for r in recs)


def test_budget_follows_the_work_with_a_floor():
    from woodpecker.tasks.dense import DenseTask
    from woodpecker.tasks.pool import PoolTask
    from woodpecker.tune.driver import FLOPS_PER_BYTE, MIN_SHARE, task_bytes, work_weights
    from woodpecker.tune.extract import TaskGroup

    big = DenseTask(1, 256, 256, 256, True, "", (), ())
    tiny = PoolTask(1, 8, 4, 4, "avg", 4, 4, (1, 1), (0, 0, 0, 0), (1, 1), False, False)
    groups = [TaskGroup(big, (), ["a", "b"]), TaskGroup(big, (), ["c"]), TaskGroup(tiny, (), ["d"])]
    w = work_weights(groups)
    assert w[0] == 2 * w[1] == 2 * big.flops        # compute-bound: its FLOPs
    tiny_work = max(tiny.flops, FLOPS_PER_BYTE * task_bytes(tiny))
    assert w[2] == MIN_SHARE * (3 * big.flops + tiny_work)


def test_a_memory_bound_task_is_weighed_by_its_bytes():
    from woodpecker.tasks.conv import ConvTask
    from woodpecker.tune.driver import FLOPS_PER_BYTE, task_bytes, work_weights
    from woodpecker.tune.extract import TaskGroup

    # MnasNet's 5x5 depthwise conv at 7x7: 2.8 MFLOPs over 0.57 MB
    dw = ConvTask(1, 1152, 7, 7, 1152, 5, 5, (1, 1), (2, 2, 2, 2), (1, 1), 1152, True, ())
    nbytes = 4 * (1152 * 49 + 1152 * 25 + 1152 + 1152 * 49)
    assert task_bytes(dw) == nbytes
    assert work_weights([TaskGroup(dw, (), ["a"])]) == [FLOPS_PER_BYTE * nbytes]
    assert FLOPS_PER_BYTE * nbytes > dw.flops
