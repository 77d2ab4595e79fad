"""Library-first plans: an unrestricted compile starts as the faster library running the
user's original graph as one session, and ends as it when nothing generated beats it."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import woodpecker
from tests.helpers import conv_bn_relu_residual, ort_run, rand
from woodpecker.errors import PlanError
from woodpecker.ops.opaque import carried_graph


@pytest.fixture
def no_rewrite(monkeypatch):
    """Woodpecker's graph on the libraries never measured faster than the session (it can be
    on these small models: the file's Shape arithmetic folds away)."""
    from woodpecker.selection import library_first

    monkeypatch.setattr(library_first, "REFINE_MARGIN", 1.0)


def test_untuned_compile_is_the_library_session_over_the_original_graph(no_rewrite):
    model = conv_bn_relu_residual()
    m = woodpecker.compile(model, threads=1)
    record = m.plan.meta["library_first"]
    assert [n.op for n in m.graph.nodes] == ["Opaque"] and len(m.steps) == 1
    assert m.plan.engines == [record["engine"]]
    assert record["engine"] in record["median_ms"]
    carried = [n.op_type for n in carried_graph(m.graph.nodes[0]).node]
    assert carried == [n.op_type for n in model.graph.node]   # the user's nodes, as written
    x = rand(1, 8, 6, 6)
    np.testing.assert_allclose(m(x), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_a_plan_without_generated_kernels_ends_as_the_library(tmp_path, no_rewrite):
    log = tmp_path / "empty.jsonl"
    log.write_text("")
    m = woodpecker.compile(conv_bn_relu_residual(), threads=1, tuning_log=str(log),
                           resume=True)
    record = m.plan.meta["library_first"]
    assert record["against"] == {"kept": False, "why": "no generated kernel in the plan"}
    assert [n.op for n in m.graph.nodes] == ["Opaque"]
    assert "tuning" in m.plan.meta


def test_library_plan_saved_loaded_and_an_edited_session_file_refused(tmp_path, no_rewrite):
    m = woodpecker.compile(conv_bn_relu_residual(), threads=1)
    d = tmp_path / "m.wpk"
    m.save(d)
    x = rand(1, 8, 6, 6)
    np.testing.assert_array_equal(woodpecker.load(d)(x), m(x))
    doc = json.loads((d / "plan.json").read_text())
    files = [f["file"] for section in doc["engines"].values()
             for f in section.get("models", {}).values()]
    assert len(files) == 1
    path = d / files[0]
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    with pytest.raises(PlanError, match="sha256"):
        woodpecker.load(d)


def test_woodpeckers_graph_on_a_library_replaces_the_session_only_where_faster(tmp_path,
                                                                             monkeypatch):
    """The ratio the decision reads is set: Woodpecker's graph on ONNX Runtime 0.5 of the
    session's time, on OpenVINO 0.9; the plan is then the first, node by node, its regions
    made from Woodpecker's nodes, and matches ONNX Runtime saved and loaded."""
    from woodpecker.selection import compare

    ratios = {"Woodpecker's graph on onnxruntime": 0.5, "Woodpecker's graph on openvino": 0.9}
    monkeypatch.setattr(compare, "paired_ratio",
                        lambda times, base, other: ratios.get(other, 1.0))
    model = conv_bn_relu_residual()
    m = woodpecker.compile(model, threads=1)
    record = m.plan.meta["library_first"]
    assert record["rewrite"] == {"best": "Woodpecker's graph on onnxruntime",
                                 "paired_ratio": 0.5, "bar": 0.98, "kept": True}
    assert record["ratio"]["Woodpecker's graph on openvino"] == 0.9
    assert "Opaque" not in [n.op for n in m.graph.nodes]
    assert set(m.plan.engines) <= {"onnxruntime", "numpy"} and m.graph.source is None
    x = rand(1, 8, 6, 6)
    want = ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(m(x), want, rtol=1e-5, atol=1e-6)
    m.save(tmp_path / "p")
    np.testing.assert_allclose(woodpecker.load(tmp_path / "p")(x), want, rtol=1e-5, atol=1e-6)


def test_naming_engines_keeps_the_node_level_plan():
    m = woodpecker.compile(conv_bn_relu_residual(), threads=1, engines="onnxruntime,numpy")
    assert "library_first" not in m.plan.meta
    assert "Opaque" not in [n.op for n in m.graph.nodes]


def test_a_tuning_compile_times_the_libraries_first_and_keeps_time_for_the_last_check(
        tmp_path, no_rewrite):
    """The whole-model sessions are measured before the tuning (their time recorded), so the
    tuning and selection share what is left and the last comparison is not past `--budget`."""
    import io

    from woodpecker.selection.library_first import against_seconds

    out = io.StringIO()
    m = woodpecker.compile(conv_bn_relu_residual(), threads=1, progress=out,
                           tuning_log=str(tmp_path / "log.jsonl"),
                           tune=woodpecker.TuneOptions("30s", max_trials=2, build_workers=1))
    lines = out.getvalue().splitlines()
    first = {word: next(i for i, line in enumerate(lines) if line.startswith(word))
             for word in ("library-first:", "tuning")}
    assert first["library-first:"] < first["tuning"]
    record = m.plan.meta["library_first"]
    assert record["seconds"] > 0 and m.plan.meta["tuning"]["measurements"] > 0
    if "seconds" in record["against"]:    # a plan with a generated kernel was compared
        assert record["against"]["rounds"] > 0
    assert against_seconds(m) >= 3.0


def test_a_one_session_plan_runs_as_one_call_into_the_session(no_rewrite, monkeypatch):
    """The library plan adds no per-step loop to the library's call (the executor's loop cost
    a 0.085 ms model 2.3 us a call): its run hands the feeds straight to the session; a
    failing session is one RunError line naming the step."""
    from woodpecker.engines.base import Kernel
    from woodpecker.errors import RunError
    from woodpecker.runtime.executor import Executor

    model = conv_bn_relu_residual()
    m = woodpecker.compile(model, threads=1)
    x = rand(1, 8, 6, 6)
    monkeypatch.setattr(Executor, "run", lambda *a, **k: pytest.fail("ran the step loop"))
    np.testing.assert_allclose(m(x), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
    def failing(*arrays):
        raise ValueError("bad\nsecond line")

    steps = m._executor._steps
    steps[0] = dataclasses.replace(steps[0], kernel=Kernel(failing))
    m._run = m._executor._direct()
    with pytest.raises(RunError, match=r"^running .* failed: ValueError: bad$"):
        m(x)


def test_a_plan_of_several_steps_runs_the_step_loop():
    m = woodpecker.compile(conv_bn_relu_residual(), threads=1, library_first=False,
                           library_regions=False)
    assert len(m.steps) > 1 and m._executor.direct is None
