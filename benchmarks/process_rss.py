"""Peak resident memory of a process running a saved plan once, against ONNX Runtime's (issue 33,
deliverable 5), each in a fresh process measured the same way (`/usr/bin/time -v`, "Maximum
resident set size"): `woodpecker run PLAN --input …` (the CLI), a Python process doing
`woodpecker.load(PLAN).run(…)` (the API), and a Python process building an ONNX Runtime
session for the model (2 intra-op threads) and running it once.

    python benchmarks/process_rss.py --plan randwire_imagenet=/tmp/rw.wpk \\
        --plan resnet18=/tmp/r18.wpk --json benchmarks/results/process_rss_zen3.json

A plan named after a zoo model is compared with that model's ONNX file; `MODEL@LABEL=PLAN`
names a second plan of the model (e.g. `resnet18@memory=…`, a memory-scheduled plan).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from woodpecker import zoo
from woodpecker.bench.compare import write_json
from woodpecker.bench.runners import versions
from woodpecker.target import machine_facts

_API = """
import sys, numpy as np, woodpecker
m = woodpecker.load(sys.argv[1])
m.run({m.inputs[0][0]: np.load(sys.argv[2])})
"""
_ORT = """
import sys, numpy as np, onnxruntime as ort
so = ort.SessionOptions(); so.intra_op_num_threads = 2; so.inter_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
s.run(None, {s.get_inputs()[0].name: np.load(sys.argv[2])})
"""


def max_rss(cmd: list[str]) -> int:
    """Bytes: the peak resident set of `cmd`, as GNU time reports it."""
    r = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True,
                       cwd=tempfile.gettempdir())
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed: {r.stderr.strip().splitlines()[-1]}")
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)[1]) * 1024


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", action="append", required=True, metavar="MODEL=PLAN")
    p.add_argument("--json")
    args = p.parse_args()
    import woodpecker

    doc = {"machine": machine_facts(), "versions": versions(), "models": {}}
    tmp = Path(tempfile.mkdtemp())
    print(f"{'model':<20} {'engines':<22} {'CLI':>9} {'API':>9} {'ORT':>9} {'CLI/ORT':>8} "
          f"{'API/ORT':>8}")
    for spec in args.plan:
        name, _, plan = spec.partition("=")
        model = woodpecker.load(plan)
        engines = {e: model.plan.engines.count(e) for e in sorted(set(model.plan.engines))}
        inp, shape, dtype = model.inputs[0]
        x = tmp / f"{name}.npy"
        np.save(x, np.random.default_rng(0).standard_normal(shape).astype(dtype))
        cli = max_rss([sys.executable, "-m", "woodpecker.cli", "run", plan, "--input",
                       f"{inp}={x}", "--output-dir", str(tmp / "out")])
        api = max_rss([sys.executable, "-c", _API, plan, str(x)])
        ort = max_rss([sys.executable, "-c", _ORT, str(zoo.export(name.partition("@")[0])),
                       str(x)])
        doc["models"][name] = {"plan": plan, "engines": engines, "cli_bytes": cli,
                               "api_bytes": api, "onnxruntime_bytes": ort}
        print(f"{name:<20} {str(engines)[:22]:<22} {cli / 2**20:>7.0f}Mi {api / 2**20:>7.0f}Mi "
              f"{ort / 2**20:>7.0f}Mi {cli / ort:>8.2f} {api / ort:>8.2f}", flush=True)
    if args.json:
        write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
