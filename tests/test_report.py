"""`woodpecker report`: one self-contained HTML page (no external resource) with every section,
that headless Chromium renders with no console message (its script ran: `data-rendered`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import replace

import pytest
from onnx import helper

import woodpecker
from tests.helpers import make_model, rand, seed_tuning_log
from woodpecker.cli import main


def _model():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    return make_model(nodes, [("x", [1, 8, 12, 12])], [("y", [1, 4, 12, 12])],
                      {"w": rand(8, 8, 3, 3, seed=1), "w2": rand(4, 8, 1, 1, seed=2)})


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("CI"):
        pytest.fail("CI needs chromium (make setup installs the Debian package)")
    return found


def test_report_is_self_contained_and_renders(tmp_path):
    pytest.importorskip("halide")

    model = _model()
    log = seed_tuning_log(model, tmp_path / "t.jsonl")
    for r in list(log.records):         # a search's worth: a curve to draw
        for k, cost in enumerate((3e-4, 2e-4, 2.5e-4)):
            log.append(replace(r, cost_s=cost, time=None, provenance={"seed": k}))
    plan = tmp_path / "p.wpk"
    compiled = woodpecker.compile(model, threads=1, engines="halide,onnxruntime,numpy",
                                  tuning_log=log.path)
    compiled.save(plan)
    out = tmp_path / "report.html"
    assert main(["report", str(plan), "--tuning-log", str(log.path), "--runs", "2",
                 "-o", str(out)]) in (0, None)
    page = out.read_text()
    for section in ("Plan", "Nodes", "Time by op type and by engine", "Tuning curves",
                    "Memory timeline", "Partition"):
        assert f"<h2>{section}</h2>" in page
    # one row per node (layout conversions included)
    assert page.count("<tr><td class='n'>") == len(compiled.graph.nodes)
    assert page.count("<polyline") >= 2                      # a tuning curve, the timeline
    assert page.count("<circle") == len(compiled.graph.nodes)  # the partition's picture
    # self-contained: nothing fetched from elsewhere
    assert not re.search(r"(src|href)=['\"]?(https?:|//)", page)
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed")
    run = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--enable-logging=stderr", "--v=0", "--dump-dom", out.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert 'data-rendered="1"' in run.stdout
    assert ":CONSOLE" not in run.stderr, [ln for ln in run.stderr.splitlines()
                                          if ":CONSOLE" in ln]


def test_the_fusion_decisions_are_reported():
    """AGO's fusions, each weighed against its parts, and the whole-plan check of them."""
    from types import SimpleNamespace

    from woodpecker.report import _decisions

    meta = {"fusion": [{"node": "a", "op": "FusedConvChain", "fused": True},
                       {"node": "b", "op": "FusedConvChain", "fused": False}],
            "fusion_check": {"nodes": ["a"], "candidate": "fused", "against": "apart",
                             "candidate_ms": 1.25, "against_ms": 1.5, "paired_ratio": 0.83,
                             "bar": 1.0, "rounds": 40, "kept": True}}
    page = _decisions(SimpleNamespace(meta=meta))
    assert "<h2>AGO fusions</h2>" in page
    assert "a (FusedConvChain): kept fused" in page and "b (FusedConvChain): run apart" in page
    assert "fused 1.250 ms, apart 1.500 ms (paired 0.830) -&gt; fused" in page
    assert "Whole plan with" not in _decisions(SimpleNamespace(meta={"fusion": meta["fusion"]}))
