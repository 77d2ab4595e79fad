"""Tuning on a Ray cluster (`woodpecker tune --workers ray`): a local head on 127.0.0.1 with two
one-core workers tunes a small model; one worker is killed mid-run; the one log keeps every
record streamed before the kill, in the local format, and the task is restarted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from onnx import helper

from tests.helpers import make_model, rand
from woodpecker.tune.records import TuningLog

ray = pytest.importorskip("ray")
pytest.importorskip("halide")


def _model():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"]),
             helper.make_node("Conv", ["c", "w3"], ["y"], pads=[1, 1, 1, 1])]
    return make_model(nodes, [("x", [1, 16, 14, 14])], [("y", [1, 16, 14, 14])],
                      {"w1": rand(32, 16, 3, 3, seed=1), "w2": rand(24, 32, 1, 1, seed=2),
                       "w3": rand(16, 24, 3, 3, seed=3)})


def _workers() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "ray::_Tuner"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_ray_tuning_survives_a_killed_worker(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(_model().SerializeToString())
    log = tmp_path / "t.jsonl"
    ray.init(num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False,
             log_to_driver=False)
    killed: list[int] = []

    def kill_one():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            n = sum(1 for _ in open(log)) if log.exists() else 0
            pids = _workers()
            if n >= 3 and pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(n)
            time.sleep(0.2)

    try:
        from woodpecker.cli import main

        killer = threading.Thread(target=kill_one)
        killer.start()
        rc = main(["tune", str(path), "--tuning-log", str(log), "--workers", "ray",
                   "--threads", "1", "--budget", "30s", "--search", "ga",
                   "--build-workers", "1"])
        killer.join()
    finally:
        ray.shutdown()
    assert rc in (0, None)
    assert killed, "no worker was running to be killed"
    lines = log.read_text().splitlines()
    records = [json.loads(ln) for ln in lines]          # every line whole
    assert len(records) > killed[0]                      # nothing before the kill lost, more after
    t = TuningLog(log)
    assert {r.task for r in t.records} >= {r["task"] for r in records[:killed[0]]}
    assert len({r.task for r in t.records}) == 3      # every task of the model tuned
    local = {"task", "template", "config", "cost_s", "error", "time", "target"}
    assert all(local <= r.keys() for r in records)
    print(f"{len(records)} records, worker killed after {killed[0]}", file=sys.stderr)
