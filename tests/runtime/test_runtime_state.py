"""Per-model runtime state: two compiled models with different thread counts in one process each
run with their own count; a plan refuses to load where the host lacks its target or its Halide
release differs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import woodpecker
from tests.helpers import conv_bn_relu_residual, ort_run, rand
from tests.selection.test_per_node import _tuned_log
from woodpecker.errors import PlanError
from woodpecker.runtime.plan import PLAN_FILE
from woodpecker.target import _ISA_FLAGS, Target


def _edit(plan_dir, fn):
    p = plan_dir / PLAN_FILE
    doc = json.loads(p.read_text())
    fn(doc)
    p.write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def halide_models(tmp_path_factory):
    pytest.importorskip("halide")
    model, log = _tuned_log(tmp_path_factory, "first")
    return model, {t: woodpecker.compile(model, engines="halide,numpy", tuning_log=log,
                                         threads=t) for t in (1, 2)}


def test_halide_models_run_interleaved_on_their_own_thread_counts(halide_models):
    from woodpecker.engines.halide.aot import pool_used

    model, models = halide_models
    assert all(m.plan.engines.count("halide") == 4 for m in models.values())
    x = rand(1, 8, 10, 10, seed=9)
    want = ort_run(model, {"x": x})[0]
    used: dict[int, list[int]] = {1: [], 2: []}
    for _ in range(20):
        for threads in (2, 1):   # the 1-thread model was built last, the 2-thread one first
            pool_used(reset=True)
            got = models[threads](x)
            used[threads].append(pool_used(reset=True))
            assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))
    # one thread: loops run serially on the caller (0 counted), never on a second thread
    assert max(used[1]) <= 1, used
    assert max(used[2]) == 2, used        # the worker took part (the pool was not left at 1)


def test_torch_models_run_interleaved_on_their_own_thread_counts():
    torch = pytest.importorskip("torch")
    model = conv_bn_relu_residual()
    models = {t: woodpecker.compile(model, engines="torch,numpy", threads=t) for t in (1, 2)}
    x = rand(*models[1].inputs[0][1], seed=3)
    want = ort_run(model, {models[1].inputs[0][0]: x})[0]
    for _ in range(3):
        for threads in (1, 2):
            got = models[threads](x)
            assert torch.get_num_threads() == threads
            assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))


def _lacking_flag() -> str:
    host = Target.parse("cpu").isa
    return next((f for f in _ISA_FLAGS if f not in host), "avx10_2")


def test_plan_for_an_isa_the_host_lacks_is_refused(halide_models, tmp_path):
    _, models = halide_models
    models[2].save(tmp_path / "p")
    flag = _lacking_flag()
    _edit(tmp_path / "p", lambda doc: doc["target"]["isa"].append(flag))
    with pytest.raises(PlanError, match=f"compiled for a CPU with {flag}.*lacks"):
        woodpecker.load(tmp_path / "p")


def test_plan_for_another_architecture_is_refused(tmp_path):
    woodpecker.compile(conv_bn_relu_residual(), engines="numpy").save(tmp_path / "p")
    _edit(tmp_path / "p", lambda doc: doc["target"].update(arch="riscv64"))
    with pytest.raises(PlanError, match="compiled for riscv64"):
        woodpecker.load(tmp_path / "p")


def test_plan_from_another_halide_release_is_refused(halide_models, tmp_path):
    _, models = halide_models
    models[1].save(tmp_path / "p")
    doc = json.loads((tmp_path / "p" / PLAN_FILE).read_text())
    assert doc["engines"]["halide"]["halide_version"]
    _edit(tmp_path / "p", lambda d: d["engines"]["halide"].update(halide_version="0.0.1"))
    with pytest.raises(PlanError, match="built with Halide 0.0.1"):
        woodpecker.load(tmp_path / "p")


def test_cli_prints_one_line_for_a_foreign_plan(halide_models, tmp_path, capsys):
    from woodpecker.cli import main

    _, models = halide_models
    models[1].save(tmp_path / "p")
    _edit(tmp_path / "p", lambda doc: doc["target"]["isa"].append(_lacking_flag()))
    assert main(["run", str(tmp_path / "p")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("woodpecker: error: cannot load this plan here")
