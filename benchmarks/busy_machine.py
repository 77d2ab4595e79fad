"""A plan against ONNX Runtime and OpenVINO on a quiet machine and on a busy one.

Users' machines are rarely idle. This runs `woodpecker bench`'s interleaved comparison
(bench/compare.benchmark: Woodpecker, ONNX Runtime, OpenVINO, the faster of the two per round)
three times: quiet, with `--load` background processes each spinning a core (a pure-Python busy
loop, so it competes for the core and not for memory bandwidth), and quiet again (the machine's
speed drifts; the two quiet phases bound it). Reported per phase: medians and the paired ratios.

    python benchmarks/busy_machine.py --plan mobilenet_v2.wpk --onnx mobilenet_v2.onnx \\
        --runs 40 --load 1 --json benchmarks/results/busy_mobilenet_v2.json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import woodpecker
from woodpecker.bench.compare import FASTEST_LIBRARY, benchmark, write_json
from woodpecker.bench.runners import OPENVINO
from woodpecker.engines.names import ONNXRUNTIME

SPIN = "while True: pass"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True)
    p.add_argument("--onnx", required=True)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--block", type=int, default=3)
    p.add_argument("--load", type=int, default=1, help="background processes spinning a core")
    p.add_argument("--json")
    args = p.parse_args(argv)

    model = woodpecker.load(args.plan)
    onnx_bytes = Path(args.onnx).read_bytes()
    phases = {}
    for phase in ("quiet", "busy", "quiet again"):
        hogs = [subprocess.Popen([sys.executable, "-c", SPIN])
                for _ in range(args.load if phase == "busy" else 0)]
        try:
            time.sleep(0.5 if hogs else 0.0)   # let the load start
            phases[phase] = benchmark(model, onnx_bytes, [ONNXRUNTIME, OPENVINO],
                                      runs=args.runs, warmup=5, block=args.block)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    print(f"{'phase':<12} {'wp ms':>8} {'ORT ms':>8} {'OV ms':>8} {'wp/ORT':>8} {'wp/OV':>8} "
          f"{'wp/best':>8}")
    for phase, r in phases.items():
        res, paired = r["results"], r["paired_speedup_vs"]
        print(f"{phase:<12} {res['woodpecker']['median_ms']:>8.3f} "
              f"{res[ONNXRUNTIME]['median_ms']:>8.3f} {res[OPENVINO]['median_ms']:>8.3f} "
              f"{1 / paired[ONNXRUNTIME]:>8.3f} {1 / paired[OPENVINO]:>8.3f} "
              f"{1 / paired[FASTEST_LIBRARY]:>8.3f}")
    print("(wp/x: the median over rounds of Woodpecker's time over x's in the same round; best: "
          f"the faster of onnxruntime and openvino in each round; busy: {args.load} spinning "
          "process(es))")
    if args.json:
        doc = {"plan": args.plan, "onnx": Path(args.onnx).name, "load": args.load,
               "phases": phases}
        print(f"wrote {write_json(args.json, doc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
