"""Issue 53's `--precision bf16` measurement: a float32 model compiled by Woodpecker in bf16,
against ONNX Runtime (float32: its CPU provider has no bf16 mode) and OpenVINO in bf16 (its
precision hint) on the same file, and against Woodpecker's own float32 plan.

Per model (zoo exports and real-world set entries): both plans compile as a user's would
(library-first; `--budget 3m` tunes each that long); then interleaved rounds time Woodpecker's
bf16 plan, ONNX Runtime, OpenVINO bf16, OpenVINO f32 and Woodpecker's fp32 plan on one input.
The table gives medians, the paired ratio of ours to the faster of ONNX Runtime and OpenVINO
bf16 in each round (median and quartiles), bf16's speed-up over our fp32 plan, and accuracy on
32 inputs (photo crops for images, the set's own inputs otherwise) against ONNX Runtime's
float32 outputs: SQNR, the largest difference relative to the output's range, and top-1
agreement for class scores — for our plan and for OpenVINO bf16 alike.

    python benchmarks/precision.py --models hf_distilbert,resnet18 --budget 3m --runs 30 \\
        --json benchmarks/results/precision_bf16_emr.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import woodpecker  # noqa: E402
from benchmarks.quantized import _entries, _feeds, _input_names, save_rows  # noqa: E402
from benchmarks.realworld import input_shapes  # noqa: E402
from woodpecker.bench.runners import onnxruntime_runner, openvino_runner  # noqa: E402
from woodpecker.bench.timing import paired_ratios, time_interleaved  # noqa: E402
from woodpecker.options import Precision, TuneOptions  # noqa: E402
from woodpecker.selection.accuracy import output_accuracy  # noqa: E402

THREADS = 2


def _accuracy(run, reference: list[list[np.ndarray]], feeds: list[dict]) -> list[dict]:
    """Per float output of `run` (a list of arrays per feed) against `reference` on `feeds`
    (`selection.accuracy.output_accuracy`, named by the output's index)."""
    got = [[np.asarray(a) for a in run(f)] for f in feeds]
    return [asdict(output_accuracy(str(k), [r[k] for r in reference], [g[k] for g in got]))
            for k in range(len(reference[0])) if reference[0][k].dtype.kind == "f"]


def run_model(entry: dict, runs: int, tmp: Path, budget: str | None) -> dict:
    rng = np.random.default_rng(0)
    names = _input_names(entry["path"])
    ev = [_feeds(entry, rng, 100 + s, names) for s in range(32)]
    shapes = {n: tuple(a.shape) for n, a in ev[0].items()} if entry["group"] == "zoo" \
        else input_shapes(entry)
    plans, compile_s = {}, {}
    for precision in (Precision.BF16, Precision.FP32):
        t0 = time.perf_counter()
        tuned = {} if budget is None else {
            "tune": TuneOptions(budget),
            "tuning_log": str(tmp / f"{entry['name']}_{precision.value}.jsonl")}
        plans[precision.value] = woodpecker.compile(entry["path"], input_shapes=shapes,
                                                    threads=THREADS, precision=precision,
                                                    **tuned)
        compile_s[precision.value] = round(time.perf_counter() - t0, 1)
    source = Path(entry["path"]).read_bytes()
    ort = onnxruntime_runner(source, THREADS)
    ov16 = openvino_runner(source, THREADS, Precision.BF16)
    ov32 = openvino_runner(source, THREADS)
    feeds = ev[0]
    runners = {"woodpecker": lambda: plans["bf16"].run(feeds),
               "onnxruntime": lambda: ort(feeds), "openvino_bf16": lambda: ov16(feeds),
               "openvino_f32": lambda: ov32(feeds),
               "woodpecker_fp32": lambda: plans["fp32"].run(feeds)}
    times = time_interleaved(runners, runs, warmup=3)
    med = {k: float(np.median(v)) for k, v in times.items()}
    faster = [min(a, b) for a, b in zip(times["onnxruntime"], times["openvino_bf16"])]
    per_round = [w / f for w, f in zip(times["woodpecker"], faster)]
    reference = [[np.asarray(a) for a in ort(f)] for f in ev]
    bf16 = plans["bf16"]
    lf = bf16.plan.meta.get("library_first", {})
    return {"name": entry["name"], "compile_s": compile_s,
            # the library's session, or Woodpecker's graph on it where that rewrite was kept,
            # unless the last check kept Woodpecker's plan
            "plan": "woodpecker" if lf.get("against", {}).get("kept") else
                    lf["rewrite"]["best"] if lf.get("rewrite", {}).get("kept") else
                    lf.get("engine") or "woodpecker",
            "engines": sorted(set(bf16.plan.engines)),
            "generated_flops_share": round(bf16.generated_flops_share(), 3),
            "bf16_templates": sorted({c.kernel.template for c in bf16.plan.choices.values()
                                      if c.kernel is not None
                                      and c.kernel.template.endswith("bf16")}),
            "compile_report": bf16.plan.meta.get("precision"),
            "accuracy_vs_onnxruntime_fp32": {
                "woodpecker_bf16": _accuracy(lambda f: list(bf16.run(f).values()), reference,
                                             ev),
                "openvino_bf16": _accuracy(ov16, reference, ev)},
            "median_ms": {k: round(v, 4) for k, v in med.items()},
            "ours_over_faster_library": {
                "median": round(float(np.median(per_round)), 4),
                "quartiles": [round(float(q), 4) for q in np.percentile(per_round, [25, 75])],
                "per_round": [round(r, 4) for r in per_round]},
            "bf16_speedup_over_our_fp32": round(float(np.median(
                paired_ratios(times, "woodpecker", "woodpecker_fp32"))), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--budget", help="tune both plans this long each (e.g. 3m); untuned "
                    "(library-first) without")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for entry in _entries(args.models.split(",")):
            row = run_model(entry, args.runs, Path(tmp), args.budget)
            rows.append(row)
            print(_said(row), flush=True)
    save_rows(args, rows)


def _said(row: dict) -> str:
    """A row as one line of the printed table."""
    m = row["median_ms"]
    acc = row["accuracy_vs_onnxruntime_fp32"]["woodpecker_bf16"][0]
    top1 = "" if acc["top1_agreement"] is None else f" top-1 {100 * acc['top1_agreement']:.1f}%"
    times = " ".join(f"{label} {m[key]:8.3f}" for label, key in (
        ("ours", "woodpecker"), ("ORT", "onnxruntime"), ("OV-bf16", "openvino_bf16"),
        ("OV-f32", "openvino_f32"), ("fp32", "woodpecker_fp32")))
    return (f"{row['name']:16s} {row['plan']:12s} {times} | paired "
            f"{row['ours_over_faster_library']['median']:.3f} | "
            f"x{row['bf16_speedup_over_our_fp32']} over our fp32 | SQNR {acc['sqnr_db']} dB{top1}")

if __name__ == "__main__":
    main()
