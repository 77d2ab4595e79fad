"""`woodpecker quantize`: a float ONNX model → a quantized one (quantization/ptq.py)."""

from __future__ import annotations

import json
from pathlib import Path

from woodpecker import config
from woodpecker.options import Calibration


def cmd_quantize(args) -> None:
    from woodpecker.options import QuantizeOptions
    from woodpecker.quantization import quantize

    options = QuantizeOptions(
        dynamic=args.dynamic, method=args.method, percentile=args.percentile,
        per_channel=not args.per_tensor, activations=args.activations,
        min_layer_sqnr_db=args.min_layer_sqnr,
        keep_fp32=tuple(n for n in (args.keep_fp32 or "").split(",") if n),
        preprocess=not args.no_preprocess, reduce_range=args.reduce_range)
    report = quantize(args.model, args.output, calibrate=args.calibrate, options=options,
                      evaluate=args.evaluate)
    for line in report.said():
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=1))


def add_parser(sub) -> None:
    q = sub.add_parser("quantize", help="quantize a float ONNX model (static QDQ with "
                                        "calibration, or dynamic) into a standard ONNX file")
    q.add_argument("model")
    q.add_argument("-o", "--output", required=True, help="the quantized ONNX file to write")
    q.add_argument("--calibrate", metavar="DATA",
                   help="calibration inputs: a .npy (one input), a .npz (arrays named by "
                        "input), or a folder of them; the first axis is samples")
    q.add_argument("--dynamic", action="store_true",
                   help="dynamic quantization of MatMul/Gemm weights (transformers); no "
                        "calibration")
    q.add_argument("--method", choices=[c.value for c in Calibration],
                   default=config.QUANT_CALIBRATION,
                   help=f"how activation ranges are set (default: {config.QUANT_CALIBRATION})")
    q.add_argument("--percentile", type=float, default=config.QUANT_PERCENTILE,
                   help="with --method percentile: the percentile kept")
    q.add_argument("--per-tensor", action="store_true",
                   help="one scale per weight tensor instead of per output channel")
    q.add_argument("--activations", choices=["uint8", "int8"], default="uint8")
    q.add_argument("--reduce-range", action="store_true",
                   help="7-bit weights: no 16-bit overflow on CPUs without VNNI (AVX2)")
    q.add_argument("--min-layer-sqnr", type=float, default=config.QUANT_MIN_LAYER_SQNR_DB,
                   metavar="DB", help="layers whose own quantization noise leaves a lower "
                                      "signal-to-noise ratio stay in fp32 (0: none)")
    q.add_argument("--keep-fp32", metavar="NODES", help="comma-separated node names to keep "
                                                         "in fp32")
    q.add_argument("--evaluate", metavar="DATA",
                   help="inputs to measure the quantized model's agreement on (default: the "
                        "calibration data)")
    q.add_argument("--no-preprocess", action="store_true",
                   help="skip ONNX Runtime's pre-processing (shape inference, optimisation)")
    q.add_argument("--json", help="write the report here")
    q.set_defaults(fn=cmd_quantize)
