"""What a tuning log buys a model, without timing a plan: per task of the model (graph passes
applied, as a compile sees it), the best kernel time in the log, times the nodes sharing the
task, summed — the generated kernels' estimated time, each kernel timed alone. Used to compare
tuning runs of one model (a searcher change, say). Tasks with no valid record in a log are
listed and left out of the sums.

Each log's costs are on its own scale (tune/tuner.py anchors a task's costs to its first
timed record, and this machine's speed drifts by tens of percent between runs: two 225 s
tunings of RegNet-X-400MF by the same code summed to 8.8 and 12.4 ms). So with two or more
logs, `--paired` (the default) times each later log's best kernel of a task paired with the
first log's (the tuning worker's interleaved rounds, tune/measure.py) and reports the later
log's sum on the first log's scale: Σ nodes × cost₁ × (time of its kernel / time of log 1's).

    python benchmarks/tuned_kernel_time.py regnet_x_400mf logA.jsonl logB.jsonl
"""

from __future__ import annotations

import argparse
import sys

from woodpecker import zoo
from woodpecker.bench.compare import write_json
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.passes import DEFAULT, optimize
from woodpecker.target import Target, machine_facts
from woodpecker.tune.extract import extract_tasks
from woodpecker.tune.measure import Measurer
from woodpecker.tune.records import TuningLog


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model", help="a zoo model's name")
    p.add_argument("logs", nargs="+")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-paired", dest="paired", action="store_false",
                   help="sum each log's own costs, no re-timing")
    p.add_argument("--json")
    args = p.parse_args()
    graph = import_onnx(load_model_proto(str(zoo.export(args.model))))
    optimize(graph, DEFAULT)
    groups = extract_tasks(graph)
    key = Target.parse("cpu", args.threads).record_key
    logs = [TuningLog(path, key) for path in args.logs]
    paired = args.paired and len(logs) > 1
    totals = [0.0] * len(logs)
    rows = []
    print(f"{'task':<60} {'nodes':>5} " + " ".join(f"{'log ' + str(i + 1):>9}"
                                                   for i in range(len(logs))))
    with Measurer(threads=args.threads) as measurer:
        for g in groups:
            best = [log.best(g.task.key) for log in logs]
            if any(b is None for b in best):
                print(f"{g.task.describe()[:60]:<60} no valid record in log(s) "
                      f"{[i + 1 for i, b in enumerate(best) if b is None]}")
                continue
            ms = [b.cost_s * 1e3 * len(g.nodes) for b in best]
            if paired:
                ref = best[0]
                for i, b in enumerate(best[1:], 1):
                    same = b.template == ref.template and b.config == ref.config
                    m = None if same else measurer.measure(b.template, g.task, dict(b.config),
                                                           ref)
                    ratio = 1.0 if same else (m.ratio if m is not None and m.ok else None)
                    ms[i] = ms[0] * ratio if ratio else float("nan")
            totals = [t + m for t, m in zip(totals, ms)]
            rows.append({"task": g.task.describe(), "nodes": len(g.nodes), "ms": ms})
            print(f"{g.task.describe()[:60]:<60} {len(g.nodes):>5} "
                  + " ".join(f"{m:>9.3f}" for m in ms), flush=True)
    scale = " (later logs re-timed paired, on log 1's scale)" if paired else ""
    print(f"{'sum over tasks with a record in every log (ms)':<66} "
          + " ".join(f"{t:>9.3f}" for t in totals) + scale)
    if args.json:
        write_json(args.json, {"model": args.model, "logs": args.logs, "paired": paired,
                               "machine": machine_facts(),
                               "rows": rows, "totals_ms": totals})
    return 0


if __name__ == "__main__":
    sys.exit(main())
