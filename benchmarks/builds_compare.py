"""Plans of several Woodpecker builds against each other, ONNX Runtime and OpenVINO, interleaved.

Each plan runs in a worker process of its own build (its source tree first on PYTHONPATH), so
two versions of Woodpecker — before and after a change — are timed side by side on the same
input, with ONNX Runtime and OpenVINO in this process as the common references. Every round runs
each runtime twice in a row, times the second call (the first absorbs the previous runtime's
lingering threads) and rotates the order so each runtime follows each other one about equally
often (bench/timing.round_orders). Workers time their own call (no pipe in the measurement) and
then wait on a pipe, idle.

    python benchmarks/builds_compare.py --onnx resnet18.onnx \\
        --plan before=old.wpk@/path/to/old/checkout --plan after=new.wpk@. \\
        --runs 40 --json benchmarks/results/refactor_parity_resnet18.json

Reported: per runtime the median, p10, p90 ms; per plan the paired ratios (the median over
rounds of plan ÷ other within the round) to ONNX Runtime, to OpenVINO, to the faster of the
two in each round (the headline), and between plans (each ÷ the first); each plan's largest
difference from ONNX Runtime's output.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from woodpecker.bench.compare import write_json
from woodpecker.bench.runners import OPENVINO, make_runner, versions
from woodpecker.bench.timing import round_orders
from woodpecker.engines.ort_engine import new_session
from woodpecker.target import machine_facts

WORKER = r"""
import sys, time
import numpy as np
import woodpecker
model = woodpecker.load(sys.argv[1])
feeds = {model.inputs[0][0]: np.load(sys.argv[2])}
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "run":
        t0 = time.perf_counter()
        model.run(feeds)
        print(f"{(time.perf_counter() - t0) * 1e3:.6f}", flush=True)
    elif cmd[0] == "out":
        out = model.run(feeds)
        np.save(cmd[1], out[model.outputs[0][0]])
        print("saved", flush=True)
"""


class Worker:
    def __init__(self, name: str, plan: str, source: str, x_path: str, threads: int) -> None:
        env = dict(os.environ, PYTHONPATH=str(Path(source).resolve()),
                   OMP_NUM_THREADS=str(threads))
        self.name = name
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, plan, x_path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env, cwd=tempfile.gettempdir())
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"worker {name} did not start")

    def ask(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def run(self) -> float:
        return float(self.ask("run"))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--onnx", required=True)
    p.add_argument("--plan", action="append", required=True, metavar="NAME=PLAN@SOURCE")
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    args = p.parse_args(argv)

    sess = new_session(Path(args.onnx).read_bytes(), args.threads)
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(args.seed).standard_normal(inp.shape).astype(np.float32)
    tmp = Path(tempfile.mkdtemp())
    np.save(tmp / "x.npy", x)
    want = sess.run(None, {inp.name: x})[0]
    workers = {}
    for spec in args.plan:
        name, _, rest = spec.partition("=")
        plan, _, source = rest.partition("@")
        workers[name] = Worker(name, plan, source or ".", str(tmp / "x.npy"), args.threads)

    def ort() -> float:
        t0 = time.perf_counter()
        sess.run(None, {inp.name: x})
        return (time.perf_counter() - t0) * 1e3

    ov_run = make_runner(OPENVINO, Path(args.onnx).read_bytes(), None, args.threads)

    def openvino() -> float:
        t0 = time.perf_counter()
        ov_run({inp.name: x})
        return (time.perf_counter() - t0) * 1e3

    calls = {"onnxruntime": ort, OPENVINO: openvino, **{n: w.run for n, w in workers.items()}}
    diffs = {}
    for name, w in workers.items():
        w.ask(f"out {tmp / (name + '.npy')}")
        got = np.load(tmp / (name + ".npy"))
        diffs[name] = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
    for fn in calls.values():
        for _ in range(args.warmup):
            fn()
    times: dict[str, list[float]] = {n: [] for n in calls}
    for order in round_orders(list(calls), args.runs):
        for name in order:
            calls[name]()                      # absorbs the previous runtime's threads
            times[name].append(calls[name]())
    for w in workers.values():
        w.close()

    def paired(base: str, other: str) -> float:
        return float(np.median([b / a for a, b in zip(times[base], times[other])]))

    times["fastest library"] = [min(a, b) for a, b in zip(times["onnxruntime"],
                                                          times[OPENVINO])]

    names = list(workers)
    doc = {
        "onnx": os.path.basename(args.onnx), "runs": args.runs, "threads": args.threads,
        "machine": machine_facts(),
        "versions": versions(),
        "plans": {n: spec for n, spec in zip(names, args.plan)},
        "results": {n: {"median_ms": float(np.median(t)), "p10_ms": float(np.percentile(t, 10)),
                        "p90_ms": float(np.percentile(t, 90))} for n, t in times.items()},
        "paired_vs_onnxruntime": {n: paired("onnxruntime", n) for n in names},
        "paired_vs_openvino": {n: paired(OPENVINO, n) for n in names},
        "paired_vs_fastest_library": {n: paired("fastest library", n) for n in names},
        "paired_vs_first": {n: paired(names[0], n) for n in names[1:]},
        "max_rel_diff_vs_onnxruntime": diffs,
    }
    columns = [("÷ORT", "paired_vs_onnxruntime"), ("÷OpenVINO", "paired_vs_openvino"),
               ("÷fastest lib", "paired_vs_fastest_library"), (f"÷{names[0]}", "paired_vs_first")]
    print(f"{'runtime':<16} {'median ms':>10} {'p10':>8} {'p90':>8} "
          + " ".join(f"{c:>13}" for c, _ in columns) + f" {'max rel diff':>12}")
    for n, r in doc["results"].items():
        ratios = [doc[key].get(n) for _, key in columns]
        print(f"{n:<16} {r['median_ms']:>10.3f} {r['p10_ms']:>8.3f} {r['p90_ms']:>8.3f} "
              + " ".join(f"{'' if v is None else f'{v:.3f}':>13}" for v in ratios)
              + f" {'' if n not in diffs else f'{diffs[n]:.1e}':>12}")
    print(f"(paired: the median over {args.runs} rounds of the row's time ÷ the column's, "
          "in the same round)")
    if args.json:
        print(f"wrote {write_json(args.json, doc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
