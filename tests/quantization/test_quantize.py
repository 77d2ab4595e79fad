"""`woodpecker.quantize`: a classifier trained on scikit-learn's digits keeps its answers once
quantized (issue 53's accuracy point, on data with real statistics); layers whose own noise is
too large stay in fp32; calibration data that does not fit the model is one line and writes
nothing."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import woodpecker
from woodpecker.errors import InputError, OptionsError
from woodpecker.options import QuantizeOptions
from woodpecker.quantization.layers import own_sqnr_db


@pytest.fixture(scope="module")
def digits():
    from woodpecker.zoo.digits import digits_classifier

    return digits_classifier(seed=0)


def _predict(model, images: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"image": images})[0]


def _ops(path) -> list[str]:
    return [n.op_type for n in onnx.load(path).graph.node]


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_digits_keep_their_answers(digits, tmp_path, method):
    out = tmp_path / "digits_int8.onnx"
    report = woodpecker.quantize(digits.onnx, out, calibrate=digits.train_images,
                                 options=QuantizeOptions(method=method),
                                 evaluate={"image": digits.test_images})
    ops = _ops(out)
    assert ops.count("Conv") == 2 and "QuantizeLinear" in ops and "DequantizeLinear" in ops
    fp32 = _predict(digits.onnx, digits.test_images).argmax(1)
    int8 = _predict(str(out), digits.test_images).argmax(1)
    agreement = float(np.mean(fp32 == int8))
    assert agreement >= 0.99, agreement
    assert report.outputs[0].top1_agreement == pytest.approx(agreement)
    assert float(np.mean(fp32 == digits.test_labels)) > 0.95     # the model learned
    assert report.kept_fp32 == ()
    assert {x.nodes[0] for x in report.layers} >= {"conv1", "conv2", "fc"}
    assert report.calibration_samples == len(digits.train_images)


def test_a_layer_below_the_bar_is_tried_in_fp32(digits, tmp_path):
    out = tmp_path / "q.onnx"
    cal = digits.train_images[:64]
    first = woodpecker.quantize(digits.onnx, out, calibrate=cal)
    assert first.fallbacks == ()                         # every layer above the bar
    conv1 = next(x for x in first.layers if x.nodes[0] == "conv1")
    report = woodpecker.quantize(digits.onnx, out, calibrate=cal,
                                 options=QuantizeOptions(min_layer_sqnr_db=conv1.own_sqnr_db
                                                         + 0.01))
    trial = next(t for t in report.fallbacks if "conv1" in t.nodes)
    assert trial.own_sqnr_db == conv1.own_sqnr_db
    # kept exactly where the outputs' worst SQNR gained the margin
    assert trial.kept == (trial.after_db >= trial.before_db + 0.5)
    model = onnx.load(out)
    conv = next(n for n in model.graph.node if n.name == "conv1")
    inits = {t.name for t in model.graph.initializer}
    assert (conv.input[1] in inits) == trial.kept         # a float weight where kept
    assert ("conv1" in report.kept_fp32) == trial.kept
    user = woodpecker.quantize(digits.onnx, out, calibrate=cal,
                               options=QuantizeOptions(keep_fp32=("fc",), min_layer_sqnr_db=0))
    assert user.kept_fp32 == ("fc",) and user.fallbacks == ()
    fc = next(n for n in onnx.load(out).graph.node if n.name == "fc")
    assert fc.input[1] in {t.name for t in onnx.load(out).graph.initializer}


def test_own_noise_is_what_the_layer_adds():
    assert own_sqnr_db(40.0, 120.0) == pytest.approx(40.0, abs=1e-6)
    # noise powers add: 40 dB in, 37 dB out → the layer's own ≈ 40 dB (1e-4 + 1e-4 ≈ 2e-4)
    assert own_sqnr_db(10 * np.log10(1 / 2e-4), 40.0) == pytest.approx(40.0, abs=0.01)
    assert own_sqnr_db(30.0, 30.0) == 120.0          # nothing added


def _matmul_model(batch=1) -> bytes:
    w = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_dynamic_quantizes_matmul_weights(tmp_path):
    x = np.random.default_rng(1).standard_normal((20, 16)).astype(np.float32)
    out = tmp_path / "dyn.onnx"
    report = woodpecker.quantize(_matmul_model(), out, options=QuantizeOptions(dynamic=True),
                                 evaluate=x)
    assert "MatMulInteger" in _ops(out) or "DynamicQuantizeLinear" in _ops(out)
    assert report.outputs[0].sqnr_db > 25


def test_files_and_folders_feed_a_batch_one_model(tmp_path):
    x = np.random.default_rng(1).standard_normal((6, 16)).astype(np.float32)
    np.save(tmp_path / "a.npy", x[:4])
    np.savez(tmp_path / "b.npz", x=x[4:].astype(np.float64))     # floats are cast
    report = woodpecker.quantize(_matmul_model(), tmp_path / "q.onnx", calibrate=tmp_path)
    assert report.calibration_samples == 6


@pytest.mark.parametrize("data, words", [
    ({"image": np.zeros((4, 16), np.float32), "mask": np.zeros(4, np.float32)},
     "missing input(s) x; unknown name(s) image, mask"),
    ({"x": np.zeros((4, 16), np.int64)}, "input x is int64"),
    ({"x": np.zeros((4, 15), np.float32)}, "has shape 4x15, the model takes 1x16"),
    ([], "gave no samples"),
    ("nowhere.npy", "no such file"),
    ("model.txt", "expected a .npy or .npz"),
    (42, "must be a .npy/.npz file or a folder of them"),            # was TypeError
    ([{"x": [[1.0] * 16, [2.0]]}], "input x is not an array"),         # was numpy's ValueError
])
def test_bad_calibration_data_is_one_line_and_writes_nothing(tmp_path, data, words):
    out = tmp_path / "q.onnx"
    if isinstance(data, str):
        data = str(tmp_path / data)
    with pytest.raises(InputError) as e:
        woodpecker.quantize(_matmul_model(), out, calibrate=data)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert not out.exists()


def test_the_input_model_is_never_overwritten(tmp_path):
    src = tmp_path / "m.onnx"
    src.write_bytes(_matmul_model())
    with pytest.raises(InputError, match="is the input model"):
        woodpecker.quantize(src, src, calibrate=np.zeros((2, 16), np.float32))
    assert src.read_bytes() == _matmul_model()
    with pytest.raises(InputError, match="needs calibration data"):
        woodpecker.quantize(src, tmp_path / "q.onnx")


@pytest.mark.parametrize("output, options, error, words", [
    (None, None, InputError, "the output must be a path"),                 # was TypeError
    ("", None, InputError, "the output must be a path"),
    (".", None, InputError, "is a folder; name the .onnx file"),  # was IsADirectoryError, after
    ("afile/q.onnx", None, InputError, "afile is a file, not a folder"),   # FileExistsError
    ("q.onnx", "dynamic", OptionsError, "options must be a QuantizeOptions, not a str"),
    ("q.onnx", {"dynamic": True}, OptionsError, "not a dict"),             # was AttributeError
])
def test_bad_output_or_options_is_one_line_before_any_work(tmp_path, output, options, error,
                                                           words):
    (tmp_path / "afile").write_text("x")
    if output is not None and output:
        output = str(tmp_path / output)
    with pytest.raises(error) as e:
        woodpecker.quantize(_matmul_model(), output, options=options,
                            calibrate=np.zeros((2, 16), np.float32))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_cli(tmp_path, capsys):
    from woodpecker.cli import main

    src = tmp_path / "m.onnx"
    src.write_bytes(_matmul_model())
    np.save(tmp_path / "cal.npy", np.random.default_rng(2).standard_normal((8, 16)).astype("f4"))
    assert main(["quantize", str(src), "-o", str(tmp_path / "q.onnx"), "--calibrate",
                 str(tmp_path / "cal.npy"), "--method", "percentile",
                 "--json", str(tmp_path / "r.json")]) == 0
    assert "SQNR" in capsys.readouterr().out
    assert (tmp_path / "r.json").exists()
    assert main(["quantize", str(src), "-o", str(tmp_path / "q2.onnx")]) == 1
    assert "needs calibration data" in capsys.readouterr().err


def _activation_scales(path) -> dict[str, float]:
    model = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return {n.input[0]: float(inits[n.input[1]]) for n in model.graph.node
            if n.op_type == "QuantizeLinear" and n.input[1] in inits}


def test_the_calibrations_set_different_ranges(digits, tmp_path):
    """Entropy calibration through quantize_static alone returns MinMax's ranges (128
    histogram bins for 128 quantized bins); ours calibrates with a finer histogram."""
    scales = {}
    for method in ("minmax", "percentile", "entropy"):
        out = tmp_path / f"{method}.onnx"
        woodpecker.quantize(digits.onnx, out, calibrate=digits.train_images[:256],
                            options=QuantizeOptions(method=method, min_layer_sqnr_db=0))
        scales[method] = _activation_scales(out)
    assert scales["minmax"].keys() == scales["entropy"].keys()
    for method in ("percentile", "entropy"):
        assert any(scales[method][k] != scales["minmax"][k] for k in scales["minmax"]), method
