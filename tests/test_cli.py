"""The `woodpecker` command: every subcommand on a small model, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

from tests.helpers import conv_bn_relu_residual, rand
from woodpecker.cli import main
from woodpecker.ops import SUPPORTED


@pytest.fixture
def model_file(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(conv_bn_relu_residual(), p)
    return p


def test_ops(capsys):
    assert main(["ops"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines[1:-2]] == SUPPORTED
    assert lines[-2].startswith("read as the QDQ form") and \
        "QLinearMatMul" in lines[-2] and "com.microsoft.QLinearAdd" in lines[-2]
    conv = next(ln.split() for ln in lines if ln.startswith("Conv "))
    assert conv[1] == "halide" and "onnxruntime" in " ".join(conv[2:])
    assert lines[-1].startswith("any other op: an opaque node, run by ") and \
        "onnxruntime" in lines[-1]


def test_compile_run_inspect(model_file, tmp_path, capsys):
    plan = tmp_path / "m.wpk"
    assert main(["compile", str(model_file), "-o", str(plan), "--engines", "torch,numpy"]) == 0
    x = rand(1, 8, 6, 6)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    assert main(["run", str(plan), "--input", f"x={tmp_path / 'x.npy'}",
                 "--output-dir", str(out)]) == 0
    assert np.load(out / "y.npy").shape == (1, 288)
    assert main(["inspect", str(plan), "--json", str(tmp_path / "i.json")]) == 0
    doc = json.loads((tmp_path / "i.json").read_text())
    assert [n["op"] for n in doc["nodes"]] == ["FusedConv", "FusedConv", "Reshape"]
    assert doc["total_flops"] > 0


def test_bench_json(model_file, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["bench", str(model_file), "--against", "onnxruntime", "--runs", "3",
                 "--warmup", "1", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["runs"] == 3 and set(r["results"]) == {"woodpecker", "onnxruntime"}
    assert {"median_ms", "p10_ms", "p90_ms"} <= set(r["results"]["woodpecker"])
    assert set(r["paired_speedup_vs"]) == {"onnxruntime"}
    assert r["paired_speedup_vs"]["onnxruntime"] > 0
    assert r["max_rel_diff"] < 1e-4 and r["versions"]["onnxruntime"]


def test_bench_defaults_to_both_libraries_and_heads_with_the_faster(model_file, tmp_path):
    """Without --against: ONNX Runtime and OpenVINO (no torch for a model outside the zoo), and
    a 'fastest library' row, per round the faster of the two (so never slower than either)."""
    pytest.importorskip("openvino")
    out = tmp_path / "r.json"
    assert main(["bench", str(model_file), "--runs", "4", "--warmup", "1", "--json",
                 str(out)]) == 0
    r = json.loads(out.read_text())
    assert set(r["results"]) == {"woodpecker", "onnxruntime", "openvino", "fastest library"}
    fastest = r["results"]["fastest library"]["median_ms"]
    assert fastest <= min(r["results"][n]["median_ms"] for n in ("onnxruntime", "openvino"))
    assert r["paired_speedup_vs"]["fastest library"] > 0


def test_bench_torch_needs_zoo_model(model_file, capsys):
    assert main(["bench", str(model_file), "--against", "torch", "--runs", "1"]) == 1
    assert "needs a zoo model" in capsys.readouterr().err


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("woodpecker: error: ") and err.count("\n") == 1, err
    return err


def test_errors_are_one_line(model_file, tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage" * 100)
    assert main(["compile", str(bad), "-o", str(tmp_path / "p")]) == 1
    assert "not a valid ONNX model" in _err(capsys)

    plan = tmp_path / "m.wpk"
    assert main(["compile", str(model_file), "-o", str(plan)]) == 0
    capsys.readouterr()
    for arr, what in ((rand(1, 8, 6, 5), "has shape"), (rand(1, 8, 6, 6).astype(np.int32),
                                                        "has dtype int32")):
        np.save(tmp_path / "x.npy", arr)
        assert main(["run", str(plan), "--input", f"x={tmp_path / 'x.npy'}",
                     "--output-dir", str(tmp_path / "o")]) == 1
        assert what in _err(capsys)
    assert main(["run", str(plan), "--output-dir", str(tmp_path / "o")]) == 1
    assert "missing input 'x'" in _err(capsys)

    (plan / "plan.json").write_text((plan / "plan.json").read_text()[:100])
    assert main(["run", str(plan), "--output-dir", str(tmp_path / "o")]) == 1
    assert "not valid JSON" in _err(capsys)


def test_unsupported_op_exit_code(tmp_path):
    """A real process: one line on stderr, exit status 1, no traceback."""
    from tests.helpers import custom_op_model
    m = custom_op_model()
    p = tmp_path / "u.onnx"
    onnx.save(m, p)
    r = subprocess.run([sys.executable, "-m", "woodpecker.cli", "compile", str(p), "-o",
                        str(tmp_path / "u.wpk")], capture_output=True, text=True)
    assert r.returncode == 1
    err = r.stderr.strip()
    assert err.startswith("woodpecker: error: ") and "\n" not in err, err
    assert "example.custom.Frobnicate" in err and "onnxruntime: " in err


def test_block_interleaving_counts_runs():
    from woodpecker.bench.timing import time_interleaved

    calls = {"a": 0, "b": 0}

    def make(name):
        def fn():
            calls[name] += 1
        return fn
    times = time_interleaved({"a": make("a"), "b": make("b")}, runs=7, warmup=1, block=4)
    assert len(times["a"]) == len(times["b"]) == 7
    assert calls["a"] == calls["b"] == 1 + 7 + 3    # warm-up, timed, one discarded per round


def test_settle_runs_after_each_block_off_the_clock():
    import time

    from woodpecker.bench.timing import time_interleaved

    events = []
    times = time_interleaved({"a": lambda: events.append("a"), "b": lambda: events.append("b")},
                             runs=6, warmup=0, block=3,
                             settle={"a": lambda: (events.append("settle"), time.sleep(0.2))})
    blocks = "".join("s" if e == "settle" else e for e in events)
    assert blocks.count("s") == 3 and "aaas" in blocks and "bs" not in blocks
    assert max(times["a"] + times["b"]) < 200    # the 200 ms pauses are not timed


def test_rounds_put_each_runtime_after_each_other_equally_often():
    from collections import Counter

    from woodpecker.bench.timing import round_orders

    for n in (2, 3, 4):
        names = list("abcd"[:n])
        orders = round_orders(names, 12)
        assert all(sorted(order) == names for order in orders)
        sequence = [name for order in orders for name in order]
        follows = Counter(zip(sequence, sequence[1:]))
        pairs = [follows[(x, y)] for x in names for y in names if x != y]
        assert max(pairs) - min(pairs) <= (1 if n <= 3 else 2), (n, follows)


def test_paired_ratio_compares_calls_of_the_same_round():
    """A drift that doubles every runtime's time between rounds moves both medians by 2x but
    leaves each round's ratio, and so the paired ratio, where it was; a lone spike is
    discarded by the median."""
    from woodpecker.bench.timing import paired_ratio

    base = [1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 4.0]
    other = [0.9 * t for t in base]
    other[3] = 50.0
    assert abs(paired_ratio({"a": base, "b": other}, "a", "b") - 0.9) < 1e-12
    assert abs(paired_ratio({"a": base, "b": other}, "b", "a") - 1 / 0.9) < 1e-12


def test_openvino_is_compared_in_float32(model_file):
    """OpenVINO's CPU plugin computes in bfloat16 by default where the CPU has it (AVX512_BF16,
    AMX); the comparison runs it in f32, so it matches ONNX Runtime like an f32 runtime."""
    pytest.importorskip("openvino")
    from tests.helpers import ort_run
    from woodpecker.bench.runners import openvino_runner
    from woodpecker.frontend.onnx_import import load_model_proto

    proto = load_model_proto(str(model_file))
    feeds = {i.name: rand(*[d.dim_value for d in i.type.tensor_type.shape.dim], seed=3)
             for i in proto.graph.input}
    got = openvino_runner(proto.SerializeToString(), 1)(feeds)[0]
    want = ort_run(proto, feeds)[0]
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))


def test_run_gives_colliding_output_names_their_own_files(tmp_path, capsys):
    from onnx import helper

    from tests.helpers import make_model
    m = make_model([helper.make_node("Relu", ["x"], ["a/b"]),
                    helper.make_node("Sigmoid", ["x"], ["a_b"]),
                    helper.make_node("Tanh", ["x"], ["A_b"])],
                   [("x", [4])], [("a/b", [4]), ("a_b", [4]), ("A_b", [4])])
    onnx.save(m, tmp_path / "m.onnx")
    x = rand(4)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'x.npy'}",
                 "--output-dir", str(out)]) == 0
    np.testing.assert_array_equal(np.load(out / "a_b.npy"), np.maximum(x, 0))
    np.testing.assert_allclose(np.load(out / "a_b-2.npy"), 1 / (1 + np.exp(-x)), rtol=1e-5)
    np.testing.assert_allclose(np.load(out / "A_b-3.npy"), np.tanh(x), rtol=1e-5)


def test_compile_prints_a_digest_that_run_checks(model_file, tmp_path, capsys):
    plan = tmp_path / "m.wpk"
    assert main(["compile", str(model_file), "-o", str(plan), "--engines", "numpy"]) == 0
    digest = capsys.readouterr().out.split("plan digest ")[1].split()[0]
    np.save(tmp_path / "x.npy", rand(1, 8, 6, 6))
    args = ["run", str(plan), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir",
            str(tmp_path / "o"), "--digest"]
    assert main(args + [digest]) == 0
    assert main(args + ["sha256:" + "0" * 64]) == 1
    assert "not the plan you trusted" in capsys.readouterr().err
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main(["compile", str(model_file), "-o", str(mine), "--engines", "numpy"]) == 1
    assert "holds no Woodpecker plan" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_bad_command_lines_are_one_line(model_file, tmp_path, capsys):
    """Each a mistake a user makes: one line on stderr, exit status 1, nothing written."""
    plan = tmp_path / "m.wpk"
    assert main(["compile", str(model_file), "-o", str(plan), "--engines", "numpy"]) == 0
    np.save(tmp_path / "x.npy", rand(1, 8, 6, 6))
    np.savez(tmp_path / "x.npz", x=rand(1, 8, 6, 6))
    (tmp_path / "text.npy").write_text("hello")
    (tmp_path / "logdir").mkdir()
    x = f"x={tmp_path / 'x.npy'}"
    out = ["--output-dir", str(tmp_path / "o")]
    capsys.readouterr()
    for argv, message in [
        (["run", str(plan), "--input", f"x={tmp_path / 'x.npz'}", *out], "is an .npz archive"),
        (["run", str(plan), "--input", f"x={tmp_path / 'text.npy'}", *out], "not a .npy file"),
        (["run", str(plan), "--input", x, "--input", x, *out], "'x' is given twice"),
        (["run", str(plan), "--input", x, "--output-dir", "/proc/none/o"],
         "No such file or directory: /proc/none"),
        (["compile", str(model_file), "-o", "/proc/none/p.wpk", "--engines", "numpy"],
         "No such file or directory"),
        (["compile", str(model_file), "-o", str(tmp_path / "t.wpk"), "--tuning-log",
          str(tmp_path / "logdir")], "logdir is a folder; name its file"),
        (["compile", str(model_file), "-o", str(tmp_path / "s.wpk"), "--input-shape",
          "x=0x8x6x6"], "dimensions must be at least 1"),
        (["compile", str(model_file), "-o", str(tmp_path / "b.wpk"), "--tune", "--budget",
          "0s"], "more than 0 s"),
        (["compile", str(model_file), "-o", str(tmp_path / "h.wpk"), "--threads", "100000"],
         "more than the 256"),
    ]:
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert err.startswith("woodpecker: error: ") and err.count("\n") == 1, err
        assert message in err, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "logdir", "m.onnx", "m.wpk", "text.npy", "x.npy", "x.npz"]


def test_a_full_disk_while_tuning_is_one_line_and_keeps_the_log(model_file, tmp_path, capsys,
                                                                 monkeypatch):
    import errno

    from woodpecker.tune.records import TuningLog, TuningRecord

    log = tmp_path / "t.jsonl"
    TuningLog(log).append(TuningRecord(task="earlier", template="t", config={}, cost_s=1e-3,
                                       error=None))
    before = log.read_bytes()

    def full(self, record):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
    monkeypatch.setattr(TuningLog, "append", full)
    assert main(["tune", str(model_file), "--tuning-log", str(log), "--resume", "--budget",
                 "20s", "--max-trials", "2", "--threads", "1"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"woodpecker: error: No space left on device: {log}"
    assert log.read_bytes() == before


def test_bench_refuses_bad_counts_and_a_non_onnx_reference(model_file, tmp_path, capsys):
    plan = tmp_path / "m.wpk"
    assert main(["compile", str(model_file), "-o", str(plan), "--engines", "numpy"]) == 0
    np.save(tmp_path / "x.npy", rand(1, 8, 6, 6))
    capsys.readouterr()
    for runs in ("0", "-5", "x"):
        with pytest.raises(SystemExit):                  # argparse: usage and one error line
            main(["bench", str(plan), "--onnx", str(model_file), "--runs", runs])
        assert "argument --runs" in capsys.readouterr().err
    assert main(["bench", str(plan), "--onnx", str(tmp_path / "x.npy"), "--runs", "2"]) == 1
    assert "x.npy is not a valid ONNX model" in capsys.readouterr().err
    assert main(["bench", str(plan), "--onnx", str(model_file), "--runs", "2", "--warmup",
                 "-1", "--against", "onnxruntime"]) == 1
    assert "warmup >= 0" in capsys.readouterr().err


def test_compile_prints_a_library_plan_that_beat_the_generated_one(model_file, tmp_path,
                                                                   capsys):
    """A tuned compile whose generated kernels lose (here: every record computes wrong) ends
    on the library's session, which carries the selection's records but no layout of its
    own: the summary says 0 %, not a KeyError."""
    pytest.importorskip("halide")
    from dataclasses import replace

    from tests.helpers import seed_tuning_log
    from woodpecker.tune.records import TuningLog

    seeded = seed_tuning_log(onnx.load(model_file), tmp_path / "seed.jsonl")
    log = TuningLog(tmp_path / "wrong.jsonl")
    for r in seeded.records:
        log.append(replace(r, template="faulty", config={"mode": "wrong"}, time=None))
    plan = tmp_path / "p.wpk"
    assert main(["compile", str(model_file), "-o", str(plan), "--tuning-log", str(log.path),
                 "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "generated Halide kernels run 0% of the FLOPs; 0 layout conversion(s)" in out


def test_compile_with_a_precision(model_file, tmp_path, capsys, monkeypatch):
    """`--precision bf16` compiles and says its accuracy against float32 (where the CPU has
    bf16); on a CPU without it, one line naming what is missing, nothing written."""
    from woodpecker.options import Precision

    if Precision.BF16.unsupported() is None:
        assert main(["compile", str(model_file), "-o", str(tmp_path / "b.wpk"),
                     "--precision", "bf16"]) == 0
        said = "precision bf16 against ONNX Runtime float32 on 8 random inputs"
        assert said in capsys.readouterr().err
        assert main(["inspect", str(tmp_path / "b.wpk")]) == 0     # the plan keeps its report
        assert said in capsys.readouterr().out
        assert main(["report", str(tmp_path / "b.wpk"), "-o", str(tmp_path / "r.html")]) == 0
        assert "bf16 (against ONNX Runtime float32: SQNR" in (tmp_path / "r.html").read_text()
    monkeypatch.setattr("woodpecker.options.host_extensions", lambda: frozenset({"avx2"}))
    assert main(["compile", str(model_file), "-o", str(tmp_path / "c.wpk"),
                 "--precision", "bf16"]) == 1
    assert "precision bf16 needs a CPU with avx512_bf16 or amx_bf16" in _err(capsys)
    assert not (tmp_path / "c.wpk").exists()
