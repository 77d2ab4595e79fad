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
