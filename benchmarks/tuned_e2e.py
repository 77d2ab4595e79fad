"""End-to-end latency of tuned plans (issue 3 (b), (c)): per zoo model, `compile --tune` under a
budget (tuning log <log-dir>/tuning_<model>.jsonl, continued, so earlier tuning — e.g.
conv_layers.py's — is reused; an empty --log-dir measures what the budget alone buys), then the
plan vs ONNX Runtime vs OpenVINO vs PyTorch eager, interleaved; the headline is the paired
ratio to the faster of ONNX Runtime and OpenVINO in each round.
Reports the ratio of medians and the paired ratio (bench.timing.paired_ratio: the median of
per-round ratios, robust to the machine's drift), tuning wall time and measurements, selection,
generated FLOP/time shares, plan load time, and max_rel_diff against ONNX
Runtime. JSON: benchmarks/results/tuned_e2e.json.

    python benchmarks/tuned_e2e.py --models resnet18,mobilenet_v2 --budget 5m --runs 30
    python benchmarks/tuned_e2e.py --models resnet18 --budget 15m --log-dir fresh_logs/
    python benchmarks/tuned_e2e.py --models densenet121 --budget 5m --log-dir L/ --plan-dir P/
    woodpecker bench P/densenet121.wpk --onnx densenet121.onnx --against onnxruntime,openvino
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import woodpecker
from woodpecker import zoo
from woodpecker.bench.compare import (
    FASTEST_LIBRARY,
    benchmark,
    format_table,
    random_feeds,
    write_json,
)
from woodpecker.bench.runners import OPENVINO
from woodpecker.engines.names import HALIDE, ONNXRUNTIME, TORCH
from woodpecker.options import SEARCHES, TuneOptions
from woodpecker.tune.records import TuningLog


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default=",".join(zoo.MODELS))
    p.add_argument("--budget", default="15m", help="compile budget per model (tuning and "
                   "selection)")
    p.add_argument("--search", default="ga", choices=SEARCHES)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--block", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default="benchmarks/results/tuned_e2e.json")
    p.add_argument("--log-dir", default="benchmarks/results",
                   help="folder of the tuning logs tuning_<model>.jsonl (created if missing)")
    p.add_argument("--plan-dir", help="keep each model's plan there as <model>.wpk, to time it "
                                      "again (woodpecker bench) without recompiling")
    args = p.parse_args()
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "budget": args.budget,
              "search": args.search, "models": {}}
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    for name in args.models.split(","):
        data = zoo.export(name).read_bytes()
        log_path = str(Path(args.log_dir) / f"tuning_{name}.jsonl")
        records_before = len(TuningLog(log_path).records)
        t0 = time.perf_counter()
        model = woodpecker.compile(data, threads=args.threads, tuning_log=log_path, resume=True,
                                   tune=TuneOptions(args.budget, args.search))
        compile_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            where = Path(args.plan_dir) / f"{name}.wpk" if args.plan_dir else Path(tmp)
            model.save(where)
            t0 = time.perf_counter()
            model = woodpecker.load(where)
            load_s = time.perf_counter() - t0
            ms = model.profile(random_feeds(model), 10)
            halide_ms = sum(t for t, step in zip(ms, model.steps)
                            if model.plan.engines[step[0]] == HALIDE)
            meta = {"woodpecker.zoo": name, "woodpecker.zoo.seed": "0"}
            r = benchmark(model, data, [ONNXRUNTIME, OPENVINO, TORCH], runs=args.runs,
                          warmup=5, zoo_meta=meta, block=args.block)
        tuning = model.plan.meta.get("tuning", {})
        r.update(compile_seconds=compile_s, load_seconds=load_s, tuning=tuning,
                 tuning_log_records_before=records_before,
                 generated_flops_share=model.generated_flops_share(),
                 generated_time_share=halide_ms / sum(ms),
                 layout_conversions=model.plan.meta.get("layout_conversions", 0),
                 plan_check=model.plan.meta.get("plan_check", []),
                 in_plan=model.plan.meta.get("in_plan", []),
                 selection=model.plan.meta.get("selection", []))
        print(format_table(r), flush=True)
        report["models"][name] = r
        report["machine"], report["versions"] = r["machine"], r["versions"]
        write_json(args.json, report)   # after each model: a cut-short run keeps what it did
    print(f"\n{'model':<21} {'wp/best':>7} {'wp/ort':>7} {'wp/ov':>7} {'wp/torch':>9} "
          f"{'gen FLOPs':>10} {'gen time':>9} "
          f"{'compile s':>9} {'tune s':>7} {'meas.':>6} {'load s':>7} {'max_rel_diff':>13}")
    for name, r in report["models"].items():
        t = r["tuning"]
        paired = r["paired_speedup_vs"]
        print(f"{name:<21} {1 / paired[FASTEST_LIBRARY]:>7.3f} {1 / paired[ONNXRUNTIME]:>7.3f} "
              f"{1 / paired[OPENVINO]:>7.3f} {1 / paired[TORCH]:>9.3f} "
              f"{r['generated_flops_share']:>10.1%} "
              f"{r['generated_time_share']:>9.1%} {r['compile_seconds']:>9.0f} "
              f"{t.get('seconds', 0):>7.0f} "
              f"{t.get('measurements', 0):>6} {r['load_seconds']:>7.2f} "
              f"{r['max_rel_diff']:>13.2e}")
    ratios = [1 / r["paired_speedup_vs"][FASTEST_LIBRARY] for r in report["models"].values()]
    report["geomean_wp_over_best"] = float(np.exp(np.mean(np.log(ratios))))
    print(f"{'geomean':<21} {report['geomean_wp_over_best']:>7.3f}")
    print("(wp/x: the median over rounds of Woodpecker's time over x's in the same round; best: "
          "the faster of onnxruntime and openvino in each round; compile s: the whole compile, "
          "which --budget bounds)")
    print(f"wrote {write_json(args.json, report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
