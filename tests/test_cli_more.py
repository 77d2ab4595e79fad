"""The `woodpecker` command, issue 76's smaller things: `--version`, `run`/`bench` on an .onnx
reusing the sessions' plan cache, and `bench`'s headline saying when the plan is a library's
session and when the ratio is within the rounds' noise."""

from __future__ import annotations

import pytest

from woodpecker.cli import main
from woodpecker.version import __version__


def test_version_prints_woodpeckers_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"woodpecker {__version__}"


def _relu_file(path, op="Relu"):
    import onnx
    from onnx import TensorProto, helper

    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])  # noqa: E731
    model = helper.make_model(helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g",
                                                [vi("x")], [vi("y")]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, path)


def test_run_of_an_onnx_loads_its_plan_from_the_cache_and_compiles_an_edited_model(
        tmp_path, capsys, monkeypatch):
    import numpy as np

    monkeypatch.setenv("WOODPECKER_CACHE", str(tmp_path / "cache"))
    model, x = tmp_path / "m.onnx", np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    _relu_file(model)
    np.save(tmp_path / "x.npy", x)
    args = ["run", str(model), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir",
            str(tmp_path / "o"), "--threads", "1"]
    said = []
    for _ in range(2):
        assert main(args) == 0
        said.append(capsys.readouterr().err)
        np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy"), np.maximum(x, 0))
    assert "plan compiled" in said[0] and "loaded from the plan cache" in said[1]
    _relu_file(model, "Neg")      # the same path, another model: compiled again
    assert main(args) == 0
    assert "plan compiled" in capsys.readouterr().err
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy"), -x)
    assert main(args) == 0
    assert "loaded from the plan cache" in capsys.readouterr().err


def test_bench_of_an_onnx_reuses_the_cached_plan(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WOODPECKER_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "m.onnx"
    _relu_file(model)
    args = ["bench", str(model), "--against", "onnxruntime", "--runs", "2", "--warmup", "0",
            "--threads", "1"]
    assert main(args) == 0
    assert "plan compiled" in capsys.readouterr().err
    assert main(args) == 0
    assert "loaded from the plan cache" in capsys.readouterr().err


def _result(paired, quartiles, library=None, both=True):
    from woodpecker.bench.compare import FASTEST_LIBRARY
    from woodpecker.engines.names import ONNXRUNTIME, OPENVINO

    stats = {"median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.1}
    names = [ONNXRUNTIME, OPENVINO, FASTEST_LIBRARY] if both else [ONNXRUNTIME]
    return {"model": "m", "runs": 20, "threads": 1, "max_rel_diff": 0.0,
            "results": {n: stats for n in ["woodpecker", *names]},
            "speedup_vs": {n: paired for n in names},
            "paired_speedup_vs": {n: paired for n in names},
            "paired_quartiles": {n: quartiles for n in names}, "library_plan": library}


def test_bench_headline_says_when_the_plan_is_a_librarys_session():
    from woodpecker.bench.compare import format_table
    from woodpecker.engines.names import ONNXRUNTIME, OPENVINO

    said = format_table(_result(0.551, [0.54, 0.56], OPENVINO))
    assert "headline: Woodpecker is 0.551x the speed of the faster of" in said
    assert ("the plan is OpenVINO's session of your graph: the ratio is OpenVINO against "
            "itself where it was the faster library, else against ONNX Runtime") in said
    said = format_table(_result(0.98, [0.97, 0.99], ONNXRUNTIME, both=False))
    assert "the plan is ONNX Runtime's session of your graph: the ratio is ONNX Runtime " \
           "against itself" in said
    # a plan of Woodpecker's graph: no such line
    assert "session of your graph" not in format_table(_result(1.3, [1.25, 1.35]))


def test_bench_headline_says_a_ratio_is_within_noise_when_the_spread_is_wider():
    from woodpecker.bench.compare import format_table

    noisy = format_table(_result(0.95, [0.80, 1.10]))
    assert "within noise: the per-round ratios' interquartile range (0.800x to 1.100x) is " \
           "wider than the ratio's distance from 1.0" in noisy
    assert "within noise" not in format_table(_result(0.70, [0.65, 0.75]))


def test_bench_of_a_library_plan_records_it_and_the_quartiles(tmp_path, capsys, monkeypatch):
    import json

    from woodpecker.engines.names import ONNXRUNTIME, OPENVINO

    monkeypatch.setenv("WOODPECKER_CACHE", str(tmp_path / "cache"))
    model, out = tmp_path / "m.onnx", tmp_path / "r.json"
    _relu_file(model)
    assert main(["bench", str(model), "--against", "onnxruntime", "--runs", "5", "--warmup",
                 "0", "--threads", "1", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["library_plan"] in (ONNXRUNTIME, OPENVINO)
    q1, q3 = r["paired_quartiles"][ONNXRUNTIME]
    assert q1 <= q3
    assert "session of your graph" in capsys.readouterr().out


def test_tune_budget_counts_the_compile_that_reads_its_tasks(tmp_path, monkeypatch):
    """`woodpecker tune --budget B` started its budget after compiling the model to read its
    tasks (8 s of a 20 s budget ran outside it): the deadline tuning gets is B from before
    that compile."""
    import time

    import woodpecker.cli as cli
    import woodpecker.tune.driver as driver

    seen = {}
    compile_first = cli._load_or_compile

    def timed_compile(*a, **k):
        seen["compile_at"] = time.monotonic()
        return compile_first(*a, **k)

    def fake_tune(graph, target, log, options, out=None, deadline=None):
        seen["deadline"] = deadline

    monkeypatch.setattr(cli, "_load_or_compile", timed_compile)
    monkeypatch.setattr(driver, "tune_graph", fake_tune)
    path = tmp_path / "m.onnx"
    _relu_file(path)
    main(["tune", str(path), "--budget", "30s", "--tuning-log", str(tmp_path / "t.jsonl")])
    assert seen["deadline"] is not None
    assert seen["deadline"].end - 30 <= seen["compile_at"]
