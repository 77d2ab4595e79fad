"""End-to-end latency of every zoo model: Woodpecker (default engines) vs ONNX Runtime vs
PyTorch eager (vs OpenVINO when installed), and Woodpecker restricted to the torch engine vs
PyTorch eager (executor overhead). Interleaved, 2 threads each; JSON under benchmarks/results/.

    python benchmarks/zoo_e2e.py --runs 50 [--block 5] [--models resnet18,mobilenet_v2]
"""

from __future__ import annotations

import argparse
import sys
import time

import woodpecker
from woodpecker import zoo
from woodpecker.bench.compare import benchmark, format_table, write_json


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default=",".join(zoo.MODELS))
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--block", type=int, default=5,
                   help="consecutive calls per runtime per round, the first discarded: torch's "
                        "OpenMP and OpenVINO's threads spin after a call and slow the next "
                        "runtime's first one")
    p.add_argument("--json", default="benchmarks/results/zoo_e2e.json")
    args = p.parse_args()
    try:
        import openvino  # noqa: F401
        against = ["onnxruntime", "torch", "openvino"]
    except ImportError:
        against = ["onnxruntime", "torch"]
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "models": {}}
    for name in args.models.split(","):
        path = zoo.export(name)
        data = path.read_bytes()
        meta = {"woodpecker.zoo": name, "woodpecker.zoo.seed": "0"}
        entry = {}
        for label, engines, vs in (("default", None, against), ("torch_only", "torch", ["torch"])):
            model = woodpecker.compile(data, engines=engines, threads=args.threads)
            r = benchmark(model, data, vs, runs=args.runs, warmup=5, zoo_meta=meta,
                          block=args.block)
            print(f"[{label}] " + format_table(r), flush=True)
            entry[label] = r
        report["models"][name] = entry
        report["machine"], report["versions"] = r["machine"], r["versions"]
    print("\nmodel                 wp/ort  wp/torch  wp(torch only)/torch  max_rel_diff")
    for name, e in report["models"].items():
        d, t = e["default"], e["torch_only"]
        print(f"{name:<21} {1 / d['speedup_vs']['onnxruntime']:>6.3f} "
              f"{1 / d['speedup_vs']['torch']:>9.3f} {1 / t['speedup_vs']['torch']:>21.3f} "
              f"{d['max_rel_diff']:>13.2e}")
    print(f"wrote {write_json(args.json, report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
