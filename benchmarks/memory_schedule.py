"""SERENITY on the irregular networks (thesis §3.5): peak activation memory of the ONNX file's
order, Kahn's, the DP's and the DP's after identity rewriting; a proven lower bound on the least
peak of any order (so the largest reduction any schedule of the same graph could reach);
scheduling time with and without divide-and-conquer and soft budgeting; arena size against the
live-bytes lower bound for every zoo model; peak RSS of running a plan (inside its arena) next
to ONNX Runtime's.

    python benchmarks/memory_schedule.py [--json benchmarks/results/memory_schedule.json]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from woodpecker import zoo
from woodpecker.bench.runners import versions
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.passes import MEMORY, optimize
from woodpecker.schedule.arena import plan_arena
from woodpecker.schedule.memory import format_bytes, schedule_memory
from woodpecker.schedule.memory_dp import StepTimeout, least_peak_floor, memory_schedule
from woodpecker.schedule.memory_report import memory_report
from woodpecker.schedule.problem import graph_problem
from woodpecker.target import machine_facts

IRREGULAR = ["randwire_cifar", "randwire_imagenet", "darts_cifar", "swiftnet_vww"]
RSS_MODELS = ["resnet18", "randwire_imagenet"]

# Peak RSS from the kernel's high-water mark of this process's address space (VmHWM): unlike
# ru_maxrss it is not inherited from the parent that forked the process.
_HWM = ("print(int(next(line for line in open('/proc/self/status') "
        "if line.startswith('VmHWM')).split()[1]) * 1024)")
_RSS_WOODPECKER = """
import sys, numpy as np, woodpecker
m = woodpecker.load(sys.argv[1]); x = np.load(sys.argv[2])
for _ in range(5): m(x)
""" + _HWM
_RSS_ORT = """
import sys, numpy as np, onnxruntime as ort
so = ort.SessionOptions(); so.intra_op_num_threads = 2; so.inter_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
x = np.load(sys.argv[2])
for _ in range(5): s.run(None, {"input": x})
""" + _HWM


def graph_of(name: str):
    g = import_onnx(load_model_proto(str(zoo.export(name))))
    optimize(g, MEMORY)
    return g


def timings(graph, limit: float) -> dict:
    """Seconds to schedule (DP, no rewriting) with each speed-up switched on or off."""
    p = graph_problem(graph)
    out = {}
    for label, divide, soft in (("dp+dc+budget", True, True), ("dp+dc", True, False),
                                ("dp+budget", False, True), ("dp", False, False)):
        start = time.monotonic()
        try:
            _, rep = memory_schedule(p, divide=divide, soft_budget=soft, time_limit=limit)
            out[label] = {"seconds": round(time.monotonic() - start, 3), "peak_bytes": rep.peak,
                          "optimal": rep.optimal}
        except StepTimeout:
            out[label] = {"seconds": None, "timeout_s": limit}
    return out


def peak_rss(name: str, tmp: Path) -> dict:
    import numpy as np

    import woodpecker

    path = zoo.export(name)
    plan = tmp / f"{name}.wpk"
    woodpecker.compile(str(path), threads=2, schedule="memory").save(plan)
    np.save(tmp / "x.npy", zoo.model_input(name))
    out = {}
    for label, script, target in (("woodpecker", _RSS_WOODPECKER, plan),
                                  ("onnxruntime", _RSS_ORT, path)):
        r = subprocess.run([sys.executable, "-c", script, str(target), str(tmp / "x.npy")],
                           capture_output=True, text=True, check=True)
        out[label] = int(r.stdout.split()[-1])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", default="benchmarks/results/memory_schedule.json")
    ap.add_argument("--limit", type=float, default=60.0,
                    help="seconds allowed to each scheduling variant without speed-ups")
    ap.add_argument("--floor-seconds", type=float, default=120.0,
                    help="seconds per part not proven optimal to prove a floor on its peak")
    args = ap.parse_args()
    doc = {"date": time.strftime("%Y-%m-%d %H:%M"),
           "machine": machine_facts(),
           "versions": versions(), "irregular": {}, "arena": {}, "peak_rss": {}}
    print(f"{'network':<18} {'nodes':>5} {'file':>10} {'kahn':>10} {'dp':>10} {'dp+rw':>10} "
          f"{'file/dp':>8} {'file/dp+rw':>10} {'file/floor':>10} {'sched s':>8}")
    for name in IRREGULAR:
        g = graph_of(name)
        rep = memory_report(g)
        o = rep["orders"]
        for r in o.values():
            r.pop("timeline_bytes")
        total = o["dp_rewrite"]["schedule_seconds"]
        p = graph_problem(g)
        floor = least_peak_floor(p, memory_schedule(p)[1], args.floor_seconds)
        entry = {"orders": o, "ratio_dp": o["onnx"]["peak_bytes"] / o["dp"]["peak_bytes"],
                 "ratio_dp_rewrite": o["onnx"]["peak_bytes"] / o["dp_rewrite"]["peak_bytes"],
                 "least_peak_floor_bytes": floor,
                 "max_ratio_any_order": o["onnx"]["peak_bytes"] / floor,
                 "schedule_seconds_total": total,
                 "timings": timings(g, args.limit)}
        doc["irregular"][name] = entry
        print(f"{name:<18} {o['onnx']['nodes']:>5} "
              + " ".join(f"{format_bytes(o[k]['peak_bytes']):>10}" for k in o)
              + f" {entry['ratio_dp']:>8.2f} {entry['ratio_dp_rewrite']:>10.2f}"
              f" {entry['max_ratio_any_order']:>10.2f} {total:>8.2f}",
              flush=True)
    for key in ("ratio_dp", "ratio_dp_rewrite", "max_ratio_any_order"):
        vals = [e[key] for e in doc["irregular"].values()]
        doc[f"geomean_{key}"] = math.exp(sum(map(math.log, vals)) / len(vals))
    print(f"geomean peak reduction vs the file's order: DP {doc['geomean_ratio_dp']:.3f}x, "
          f"DP + rewriting {doc['geomean_ratio_dp_rewrite']:.3f}x; no order of the unrewritten "
          f"graphs can exceed {doc['geomean_max_ratio_any_order']:.3f}x (proven floors)")
    print("\nscheduling seconds (DP without rewriting): dp+dc+budget / dp+dc / dp+budget / dp")
    for name, e in doc["irregular"].items():
        t = e["timings"]
        print(f"{name:<18} " + " / ".join(
            f"{t[k]['seconds']:.2f}" if t[k]["seconds"] is not None else f">{args.limit:.0f}"
            for k in t))
    print(f"\n{'model':<22} {'order':<7} {'arena':>10} {'lower bound':>12} {'ratio':>6}")
    for name in zoo.MODELS:
        g = graph_of(name)
        for order in ("file", "memory"):
            h = g.copy()
            if order == "memory":
                schedule_memory(h)
            a = plan_arena(h)
            doc["arena"].setdefault(name, {})[order] = {
                "arena_bytes": a.size, "lower_bound_bytes": a.lower_bound,
                "ratio": a.size / a.lower_bound, "method": a.method}
            print(f"{name:<22} {order:<7} {format_bytes(a.size):>10} "
                  f"{format_bytes(a.lower_bound):>12} {a.size / a.lower_bound:>6.3f}", flush=True)
    print(f"\n{'model':<22} {'woodpecker RSS':>15} {'onnxruntime RSS':>16}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in RSS_MODELS:
            r = doc["peak_rss"][name] = peak_rss(name, Path(tmp))
            print(f"{name:<22} {format_bytes(r['woodpecker']):>15} "
                  f"{format_bytes(r['onnxruntime']):>16}", flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
