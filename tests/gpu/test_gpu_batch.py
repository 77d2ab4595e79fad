"""Tuning GPU kernels in batches without a GPU (issue 54, deliverable 5): a batch builds here,
its candidates are checked and timed by the remote runner's own code (run here with host
builds in place of the device), the timings come back into a tuning log keyed by the cuda
target, and the plan is built with the fastest configs."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnxruntime as ort
import pytest

from tests.gpu.test_gpu_plan import _small_model
from woodpecker.assembly.gpu_host import host_kernel
from woodpecker.compiler_gpu import check_on_host, compile_gpu, gpu_graph
from woodpecker.errors import PlanError
from woodpecker.runtime.gpu_measure import measure_batch
from woodpecker.target import Target
from woodpecker.tune.gpu_batch import GpuChoice, read_timings, tuned_choices, write_batch
from woodpecker.tune.records import TuningLog

T4 = Target.parse("cuda:t4")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    model = _small_model(11)
    folder = write_batch(gpu_graph(model), T4, tmp_path_factory.mktemp("batch") / "b", per_task=2)
    results = measure_batch(folder, runs=2, warmup=0, kernel=host_kernel, library_device="cpu")
    return model, folder, results


def test_every_candidate_is_checked_and_timed(measured):
    _, folder, results = measured
    batch = json.loads((folder / "batch.json").read_text())
    assert len(results) == len(batch["candidates"]) >= 5 * 2
    # every template that computes a task: the 3x3 convs' Winograd too, whose weights the
    # runner transforms from its own seeded inputs (a spec travels, not the arrays)
    assert {r["template"] for r in results} == {"conv", "winograd", "pool", "dense", "library"}
    wino = [c for c in batch["candidates"] if c["template"] == "winograd"]
    assert wino and all(c["transforms"] == {"1": {"kind": "winograd_filter",
                                                  "m": c["config"]["m"]}} for c in wino)
    # one library candidate per task, without a file: the task on torch
    tasks = {c["task"] for c in batch["candidates"]}
    library = [c for c in batch["candidates"] if c.get("engine") == "library"]
    assert sorted(c["task"] for c in library) == sorted(tasks) and not any("file" in c
                                                                           for c in library)
    assert all("ms" in r and r["max_abs"] < 1e-3 for r in results), results


def test_timings_come_back_into_the_log_and_the_plan(measured, tmp_path):
    model, folder, results = measured
    log = TuningLog(tmp_path / "gpu.jsonl", T4.record_key)
    best = read_timings(folder, log)
    assert len(log.records) == len(results)
    assert {r.target for r in log.records} == {"cuda:tesla-t4:sm_75"}
    assert {r.template for r in log.records} == {"gpu.conv", "gpu.winograd", "gpu.pool",
                                                 "gpu.dense", "gpu.library"}
    for task, choice in best.items():
        fastest = min((r for r in results if r["task"] == task), key=lambda r: r["ms"])
        assert choice == GpuChoice(fastest["template"], fastest["config"])
    assert tuned_choices(TuningLog(tmp_path / "gpu.jsonl", T4.record_key)) == best
    assert TuningLog(tmp_path / "gpu.jsonl", Target.parse("cpu").record_key).records == []
    plan = compile_gpu(model, tmp_path / "plan", T4, tuning_log=tmp_path / "gpu.jsonl")
    steps = json.loads((plan / "plan.json").read_text())["steps"]
    for s in steps:      # the measured choice per node: the library, or the fastest kernel
        assert (s.get("engine") == "library") == best[s["task"]].library
        assert best[s["task"]].library or (s["template"], s["config"]) == (
            best[s["task"]].template, best[s["task"]].config)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(check_on_host(plan, {"x": x})["y"], expected, rtol=1e-4,
                               atol=1e-4)
    # a second batch draws only configs the log has not measured, half of them one-knob
    # mutations of the fastest measured so far (a genetic search across batches)
    again = write_batch(gpu_graph(model), T4, tmp_path / "b2", per_task=2, log=log)
    measured_keys = {(r.task, json.dumps(r.config, sort_keys=True)) for r in log.records}
    fresh = json.loads((again / "batch.json").read_text())["candidates"]
    assert not any((c["task"], json.dumps(c["config"], sort_keys=True)) in measured_keys
                   for c in fresh)
    for task, template in {(c["task"], c["template"]) for c in fresh if c["template"] != "library"}:
        timed = sorted((r.cost_s, json.dumps(r.config, sort_keys=True)) for r in log.records
                       if r.task == task and r.template == "gpu." + template and r.cost_s)
        parents = [json.loads(k) for _, k in timed[:3]]
        children = [c["config"] for c in fresh if (c["task"], c["template"]) == (task, template)]
        assert any(sum(child[k] != p[k] for k in p) == 1 for child in children
                   for p in parents), (template, children, parents)


def test_a_tampered_batch_is_refused(measured, tmp_path):
    _, folder, _ = measured
    copy = tmp_path / "b"
    shutil.copytree(folder, copy)
    batch = json.loads((copy / "batch.json").read_text())
    (copy / batch["candidates"][0]["file"]).write_bytes(b"not a kernel")
    with pytest.raises(PlanError, match="sha256 differs"):
        measure_batch(copy, kernel=host_kernel)


def test_a_compressed_log_reads_as_it_is_and_refuses_appends(measured, tmp_path):
    """Committed tuning logs are gzip-compressed (the repository travels to the GPU machine
    whole, under 64 MiB): read as they are, never appended to."""
    import gzip

    from woodpecker.errors import WoodpeckerError

    _, folder, _ = measured
    plain = TuningLog(tmp_path / "g.jsonl", T4.record_key)
    read_timings(folder, plain)
    packed = tmp_path / "g.jsonl.gz"
    packed.write_bytes(gzip.compress((tmp_path / "g.jsonl").read_bytes()))
    log = TuningLog(packed, T4.record_key)
    assert [r.config for r in log.records] == [r.config for r in plain.records]
    with pytest.raises(WoodpeckerError, match="compressed log, read-only"):
        log.append(plain.records[0])
