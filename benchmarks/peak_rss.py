"""Peak resident memory of one inference in a fresh process: `woodpecker run` on plans (of any
build: its source tree first on PYTHONPATH) against ONNX Runtime and OpenVINO running the same
model once, each in its own process, the same thread count.

    python benchmarks/peak_rss.py --onnx resnet18.onnx --plan tuned=r18.wpk@. \\
        --plan untuned=r18_lib.wpk@. --repeats 3 --json benchmarks/results/peak_rss_resnet18.json

Each process is started `--repeats` times in turn; the median of its peak RSS (GNU time's
maximum resident set size) is reported, with the min and max.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from woodpecker.bench.compare import write_json
from woodpecker.bench.runners import versions
from woodpecker.target import machine_facts

ORT = r"""
import sys
import numpy as np
import onnxruntime as ort
so = ort.SessionOptions()
so.intra_op_num_threads = int(sys.argv[3])
so.inter_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
s.run(None, {s.get_inputs()[0].name: np.load(sys.argv[2])})
"""

OPENVINO = r"""
import sys
import numpy as np
import openvino as ov
core = ov.Core()
m = core.compile_model(sys.argv[1], "CPU", {"INFERENCE_NUM_THREADS": int(sys.argv[3]),
                                            "PERFORMANCE_HINT": "LATENCY"})
m.create_infer_request().infer([np.load(sys.argv[2])])
"""


TIME = "/usr/bin/time"   # GNU time (Debian's `time` package)


def peak_kib(cmd: list[str], env: dict | None = None) -> int:
    """The peak resident set (KiB) of one run of `cmd`, which must succeed. Measured by GNU
    time, a small process of its own: a child forked from this process would report at least
    this process's own peak (Linux keeps the pre-exec high-water mark in ru_maxrss)."""
    if not os.path.exists(TIME):
        raise SystemExit(f"{TIME} is missing: apt-get install time")
    with tempfile.NamedTemporaryFile("r") as out:
        proc = subprocess.run([TIME, "-f", "%M", "-o", out.name, *cmd], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              cwd=tempfile.gettempdir())
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd[:4])}… failed: {proc.stderr.strip()[-400:]}")
        return int(out.read().split()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--onnx", required=True)
    p.add_argument("--plan", action="append", default=[], metavar="NAME=PLAN@SOURCE")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json")
    args = p.parse_args(argv)

    tmp = Path(tempfile.mkdtemp())
    import onnxruntime as ort

    model_input = ort.InferenceSession(args.onnx, providers=["CPUExecutionProvider"]) \
        .get_inputs()[0]
    shape = model_input.shape
    np.save(tmp / "x.npy", np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    onnx_path = str(Path(args.onnx).resolve())
    commands: dict[str, tuple[list[str], dict | None]] = {
        "onnxruntime": ([sys.executable, "-c", ORT, onnx_path, str(tmp / "x.npy"),
                         str(args.threads)], None),
        "openvino": ([sys.executable, "-c", OPENVINO, onnx_path, str(tmp / "x.npy"),
                      str(args.threads)], None),
    }
    for spec in args.plan:
        name, _, rest = spec.partition("=")
        plan, _, source = rest.partition("@")
        env = dict(os.environ, PYTHONPATH=str(Path(source or ".").resolve()))
        commands[name] = ([sys.executable, "-m", "woodpecker.cli", "run",
                           str(Path(plan).resolve()), "--input",
                           f"{model_input.name}={tmp / 'x.npy'}", "--output-dir",
                           str(tmp / name)], env)
    peaks: dict[str, list[int]] = {n: [] for n in commands}
    for _ in range(args.repeats):
        for name, (cmd, env) in commands.items():
            peaks[name].append(peak_kib(cmd, env))
    doc = {"onnx": os.path.basename(args.onnx), "threads": args.threads,
           "repeats": args.repeats,
           "machine": machine_facts(),
           "versions": versions(), "plans": args.plan,
           "peak_rss_mib": {n: {"median": float(np.median(v)) / 1024,
                                "min": min(v) / 1024, "max": max(v) / 1024}
                            for n, v in peaks.items()}}
    print(f"{'process':<22} {'peak RSS MiB (median)':>22} {'min':>8} {'max':>8}")
    for n, r in doc["peak_rss_mib"].items():
        print(f"{n:<22} {r['median']:>22.1f} {r['min']:>8.1f} {r['max']:>8.1f}")
    if args.json:
        print(f"wrote {write_json(args.json, doc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
