"""A library step's own per-op profile (bench/library_profile.py) and where `inspect` and
`report` show it: a library-first plan is one ONNX Runtime or OpenVINO session of the whole
model, which Woodpecker alone sees as one `opaque:model` node of 0 FLOPs (issue 76)."""

from __future__ import annotations

import json

import pytest

import woodpecker
from tests.helpers import conv_bn_relu_residual
from woodpecker.bench.library_profile import library_steps, profile_library_steps
from woodpecker.cli import main
from woodpecker.engines import names

OPENVINO = pytest.param(names.OPENVINO, marks=pytest.mark.skipif(
    not __import__("importlib.util").util.find_spec("openvino"), reason="no openvino"))


def _whole(engine: str, monkeypatch) -> woodpecker.CompiledModel:
    """The library-first plan of the small model on `engine`: the user's graph as one session
    (Woodpecker's graph on the libraries, which may measure faster on a model this small, not
    offered)."""
    monkeypatch.setattr("woodpecker.selection.libraries.rewrite_plans", lambda *a, **k: {})
    engines = engine if engine == names.ONNXRUNTIME else f"{engine},{names.NUMPY}"
    model = woodpecker.compile(conv_bn_relu_residual(), threads=1, engines=engines,
                               library_first=True)
    assert [r["op"] for r in model.node_table()] == ["opaque:model"]
    assert model.plan.engines == [engine]
    return model


def _check(profile, engine: str, nodes: int) -> None:
    assert profile.engine == engine and profile.nodes == nodes and profile.why is None
    assert profile.flops and profile.flops > 0
    assert profile.runs == 3 and profile.rows
    conv = [r for r in profile.rows if "Conv" in r.op_type]     # Conv, FusedConv, Convolution
    assert conv and all(r.count >= 1 for r in conv)
    assert all(r.count >= 1 and r.ms >= 0 and 0 <= r.share <= 1 for r in profile.rows)
    assert sum(r.share for r in profile.rows) == pytest.approx(1.0) or profile.ms == 0


@pytest.mark.parametrize("engine", [names.ONNXRUNTIME, OPENVINO])
def test_the_whole_model_session_is_profiled_by_its_library(engine, monkeypatch, tmp_path):
    model = _whole(engine, monkeypatch)
    (mine,) = profile_library_steps(model, 3)          # the bytes the engine builds from
    _check(mine, engine, 1)
    assert mine.whole and mine.step == 0
    model.save(tmp_path / "p.wpk")
    loaded = woodpecker.load(tmp_path / "p.wpk")
    (saved,) = profile_library_steps(loaded, 3)       # the plan folder's step model, checked
    _check(saved, engine, 1)
    assert saved.flops == mine.flops
    assert json.loads(json.dumps(saved.to_json()))["rows"][0]["op_type"]


def test_a_library_region_is_profiled():
    model = woodpecker.compile(conv_bn_relu_residual(), threads=1, engines=names.ONNXRUNTIME,
                               library_first=False)
    assert model.steps == [[0, 1, 2]] and library_steps(model) == [0]
    (profile,) = profile_library_steps(model, 3)
    _check(profile, names.ONNXRUNTIME, 3)
    assert not profile.whole


def test_no_runs_counts_flops_only(monkeypatch):
    (profile,) = profile_library_steps(_whole(names.ONNXRUNTIME, monkeypatch), 0)
    assert profile.flops > 0 and profile.rows == [] and profile.why is None


def test_an_edited_step_model_is_said_not_profiled(monkeypatch, tmp_path):
    _whole(names.ONNXRUNTIME, monkeypatch).save(tmp_path / "p.wpk")
    model = woodpecker.load(tmp_path / "p.wpk")
    step = tmp_path / "p.wpk" / names.ORT_MODELS_DIR / "step0.onnx"
    step.write_bytes(step.read_bytes() + b"\0")      # after the load's check
    (profile,) = profile_library_steps(model, 3)
    assert profile.rows == [] and profile.flops is None and "sha256 differs" in profile.why


def test_inspect_and_report_show_the_library_profile(monkeypatch, tmp_path, capsys):
    plan = tmp_path / "p.wpk"
    _whole(names.ONNXRUNTIME, monkeypatch).save(plan)
    assert main(["inspect", str(plan), "--runs", "3", "--json", str(tmp_path / "i.json")]) == 0
    out = capsys.readouterr().out
    assert "library step 0: onnxruntime session of the whole model" in out
    assert "ONNX Runtime's profiler over 3 runs" in out
    doc = json.loads((tmp_path / "i.json").read_text())
    assert doc["nodes"][0]["op"] == "opaque:model" and doc["nodes"][0]["flops"] > 0
    assert doc["total_flops"] == doc["library_profiles"][0]["flops"] > 0
    assert any(r["op_type"] == "Conv" and r["count"] >= 1
               for r in doc["library_profiles"][0]["rows"])
    page = tmp_path / "r.html"
    assert main(["report", str(plan), "-o", str(page)]) == 0
    html = page.read_text()
    assert "<h2>Library steps</h2>" in html and "ONNX Runtime&#x27;s profiler" in html
    assert "<td>Conv</td>" in html
