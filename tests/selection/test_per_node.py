"""Generated kernels in plans: selection from a tuning log, layout conversions, the result
against ONNX Runtime, and the plan's own copies of the compiled kernels."""

from __future__ import annotations

import os
import random
from dataclasses import replace

import numpy as np
import pytest
from onnx import helper

import woodpecker
from tests.helpers import REGIONS, make_model, ort_run, rand
from woodpecker.engines.halide.templates import template_module
from woodpecker.errors import PlanError
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.passes import optimize
from woodpecker.tune.extract import extract_tasks
from woodpecker.tune.records import TuningLog, TuningRecord

pytest.importorskip("halide")


def _convnet():
    """conv+relu → conv+add+relu (residual) → depthwise conv → global average pool: four
    tasks, all in NHWC."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], group=16,
                         strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["c3"], ["y"]),
    ]
    inits = {"w1": rand(16, 8, 3, 3, seed=1) * 0.2, "b1": rand(16, seed=2),
             "w2": rand(16, 16, 3, 3, seed=3) * 0.1, "w3": rand(16, 1, 3, 3, seed=4),
             "b3": rand(16, seed=5)}
    return make_model(nodes, [("x", [1, 8, 10, 10])], [("y", [1, 16, 1, 1])], inits)


@pytest.fixture(scope="module", params=["first", "last"])
def tuned(tmp_path_factory, request):
    return _tuned_log(tmp_path_factory, request.param)


def _tuned_log(tmp_path_factory, which: str):
    """The model and a tuning log holding one valid (untimed-fast) config per task, of each
    task's first template (direct, depthwise) or its last (GEMM-style, depthwise)."""
    model = _convnet()
    graph = import_onnx(model)
    optimize(graph)
    log = TuningLog(tmp_path_factory.mktemp("log") / "tuning.jsonl")
    for i, g in enumerate(extract_tasks(graph)):
        template = g.templates[0 if which == "first" else -1]
        config = template_module(template).space(g.task).sample(random.Random(i))
        log.append(TuningRecord(task=g.task.key, template=template, config=config, cost_s=1e-4,
                                error=None))
    return model, log.path


def test_halide_plan_matches_onnxruntime_and_round_trips(tuned, tmp_path):
    model, log = tuned
    compiled = woodpecker.compile(model, engines="halide,numpy", tuning_log=log, threads=2)
    engines = compiled.plan.engines
    assert engines.count("halide") == 4
    assert compiled.generated_flops_share() > 0.95
    # x enters NHWC once; the pool's output leaves NHWC once; none in between
    assert compiled.plan.meta["layout_conversions"] == 2
    assert [r["winner"] for r in compiled.plan.meta["selection"]] == ["halide"] * 4
    x = rand(1, 8, 10, 10, seed=9)
    want = ort_run(model, {"x": x})[0]
    got = compiled(x)
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))

    compiled.save(tmp_path / "p")
    kernels = sorted(p.name for p in (tmp_path / "p" / "kernels").iterdir())
    assert len(kernels) == 5 and "libwoodpecker_halide_runtime.so" in kernels
    np.testing.assert_array_equal(woodpecker.load(tmp_path / "p")(x), got)

    victim = next(p for p in (tmp_path / "p" / "kernels").iterdir() if p.name != kernels[-1])
    # Corrupt a copy moved into place: this process still maps the loaded kernel, and
    # truncating a mapped shared object in place would crash it (SIGBUS), not test the plan.
    tmp = victim.with_name("corrupt.tmp")
    tmp.write_bytes(victim.read_bytes()[:100])
    os.replace(tmp, victim)
    with pytest.raises(PlanError, match="sha256"):
        woodpecker.load(tmp_path / "p")


def test_selection_times_the_libraries_too(tuned):
    model, log = tuned
    compiled = woodpecker.compile(model, engines="halide,onnxruntime,numpy", tuning_log=log,
                                  threads=2)
    records = compiled.plan.meta["selection"]
    assert len(records) == 4
    for r in records:
        assert set(r["kernel_ms"]) == {"halide", "onnxruntime"}
        assert r["winner"] == min(r["total_ms"], key=r["total_ms"].get)
        # A Halide node would split the ORT session: charged to the Halide candidate.
        assert r["region_split_ms"] > 0
        assert r["total_ms"]["halide"] == pytest.approx(
            r["kernel_ms"]["halide"] + r["conversion_ms"]["halide"] + r["region_split_ms"])
    x = rand(1, 8, 10, 10, seed=9)
    want = ort_run(model, {"x": x})[0]
    assert np.max(np.abs(compiled(x) - want)) <= 1e-4 * np.max(np.abs(want))


def test_kernel_that_differs_from_reference_is_not_chosen(tuned, tmp_path, capsys):
    model, log = tuned
    bad = TuningLog(tmp_path / "bad.jsonl")
    for rec in TuningLog(log).records:
        bad.append(replace(rec, template="faulty", config={"mode": "wrong"}))
    compiled = woodpecker.compile(model, engines="halide,numpy", tuning_log=bad.path)
    assert "halide" not in compiled.plan.engines
    assert "differs from the reference" in capsys.readouterr().err


def test_a_spent_budget_leaves_every_task_to_the_libraries(tuned, capsys):
    from woodpecker.deadline import Deadline
    from woodpecker.engines.base import BuildContext
    from woodpecker.engines.choice import Choice
    from woodpecker.selection.per_node import select_kernels

    model, log = tuned
    graph = import_onnx(model)
    optimize(graph)
    choices = {n.name: Choice("onnxruntime") for n in graph.nodes}
    records = select_kernels(graph, choices, ["halide", "onnxruntime", "numpy"],
                             BuildContext(2, graph.opset), TuningLog(log),
                             deadline=Deadline(0.0))
    assert records == [] and all(c.engine == "onnxruntime" for c in choices.values())
    assert "4 smaller task(s) not timed" in capsys.readouterr().err


def test_untimed_tasks_get_their_tuned_kernel_for_the_plan_check(tuned, capsys, monkeypatch):
    """Per-node timing out of time: the untimed tasks' nodes keep their library but carry
    their best tuned kernel, and the whole-plan check tries them on it with the timed ones."""
    import woodpecker.selection.per_node as per_node
    from woodpecker.assembly import AssemblyOptions
    from woodpecker.deadline import Deadline
    from woodpecker.engines.base import BuildContext
    from woodpecker.engines.choice import Choice
    from woodpecker.selection.refine import EVERY, refine_selection
    from woodpecker.target import Target

    model, log = tuned
    graph = import_onnx(model)
    optimize(graph)
    ctx, allowed = BuildContext(2, graph.opset), ["halide", "onnxruntime", "numpy"]
    choices = {n.name: Choice("onnxruntime") for n in graph.nodes}
    monkeypatch.setattr(per_node, "UNTIMED_KERNELS_SHARE", 1.0)   # no time to time anything
    records = per_node.select_kernels(graph, choices, allowed, ctx, TuningLog(log),
                                      deadline=Deadline.after(120))
    assert records == [] and "4 smaller task(s) not timed" in capsys.readouterr().err
    tuned_nodes = {n for n, c in choices.items() if c.kernel is not None}
    assert len(tuned_nodes) == 4 and all(c.engine == "onnxruntime" for c in choices.values())
    assert all("not timed" in choices[n].why for n in tuned_nodes)
    before = [choices[n.name].engine for n in graph.nodes]
    engines, report = refine_selection(
        graph, before, choices, [],
        AssemblyOptions(tuple(allowed), ctx, Target.parse("cpu", 2), {}, schedule=REGIONS),
        runs=6)
    assert [(r["candidate"], set(r["nodes"])) for r in report] == [(EVERY, tuned_nodes)]
    kept = {n.name for n, e in zip(graph.nodes, engines) if e == "halide"}
    assert kept == (tuned_nodes if report[0]["kept"] else set())
