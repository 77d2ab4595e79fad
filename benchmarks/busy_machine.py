"""A plan against ONNX Runtime and OpenVINO on a quiet machine and on a busy one.

Users' machines are rarely idle. This runs `woodpecker bench`'s interleaved comparison
(bench/compare.benchmark: Woodpecker, ONNX Runtime, OpenVINO, the faster of the two per round)
three times: quiet, with `--load` background processes each spinning a core (a pure-Python busy
loop, so it competes for the core and not for memory bandwidth), and quiet again (the machine's
speed drifts; the two quiet phases bound it). Reported per phase: medians and the paired ratios.
With `--single-thread` the same plan on one thread is timed in the same rounds ("wp 1t"):
whether a busy machine costs the plan more than the parallelism it gains when quiet.

    python benchmarks/busy_machine.py --plan mobilenet_v2.wpk --onnx mobilenet_v2.onnx \\
        --runs 40 --load 1 --json benchmarks/results/busy_mobilenet_v2.json
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import woodpecker
from woodpecker.bench.compare import FASTEST_LIBRARY, benchmark, write_json
from woodpecker.bench.runners import OPENVINO
from woodpecker.engines.names import ONNXRUNTIME
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.runtime.plan import load_plan

SPIN = "while True: pass"
SINGLE = "woodpecker 1 thread"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True)
    p.add_argument("--onnx", required=True)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--block", type=int, default=3)
    p.add_argument("--load", type=int, default=1, help="background processes spinning a core")
    p.add_argument("--single-thread", action="store_true",
                   help="also time the same plan on one thread")
    p.add_argument("--json")
    args = p.parse_args(argv)

    model = woodpecker.load(args.plan)
    variants = {}
    if args.single_thread:
        plan = load_plan(args.plan)   # its kernels as saved; only the thread count differs
        plan.target = dataclasses.replace(plan.target, threads=1)
        variants[SINGLE] = CompiledModel(plan)
    onnx_bytes = Path(args.onnx).read_bytes()
    phases = {}
    for phase in ("quiet", "busy", "quiet again"):
        hogs = [subprocess.Popen([sys.executable, "-c", SPIN])
                for _ in range(args.load if phase == "busy" else 0)]
        try:
            time.sleep(0.5 if hogs else 0.0)   # let the load start
            phases[phase] = benchmark(model, onnx_bytes, [ONNXRUNTIME, OPENVINO],
                                      runs=args.runs, warmup=5, block=args.block,
                                      variants=variants)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    single = f"{'wp 1t ms':>9} {'wp/wp 1t':>9}" if variants else ""
    print(f"{'phase':<12} {'wp ms':>8} {'ORT ms':>8} {'OV ms':>8} {'wp/ORT':>8} {'wp/OV':>8} "
          f"{'wp/best':>8} {single}")
    for phase, r in phases.items():
        res, paired = r["results"], r["paired_speedup_vs"]
        single = f"{res[SINGLE]['median_ms']:>9.3f} {1 / paired[SINGLE]:>9.3f}" \
            if variants else ""
        print(f"{phase:<12} {res['woodpecker']['median_ms']:>8.3f} "
              f"{res[ONNXRUNTIME]['median_ms']:>8.3f} {res[OPENVINO]['median_ms']:>8.3f} "
              f"{1 / paired[ONNXRUNTIME]:>8.3f} {1 / paired[OPENVINO]:>8.3f} "
              f"{1 / paired[FASTEST_LIBRARY]:>8.3f} {single}")
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
