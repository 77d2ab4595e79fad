"""Speed against footprint per irregular network (issue 33, deliverable 4): the speed plan (the
file's order, ONNX Runtime regions), the memory plan (SERENITY's order, one step per node, every
activation in Woodpecker's arena) and the memory order run with ONNX Runtime regions, timed in
one interleaved run (paired median ratio to the speed plan) beside each plan's activation
footprint: Woodpecker's arena plus, for every ONNX Runtime region of several nodes, that
session's own first-run peak (a fresh process's resident-set high-water mark over the run, as in
benchmarks/memory_baselines.py), since a region allocates its inner activations itself (a
region's peak includes its outputs, which the plan writes into the arena: an overcount).

    python benchmarks/memory_tradeoff.py [--tuning-log MODEL=LOG.jsonl ...] \\
        --json benchmarks/results/memory_tradeoff_zen3.json

With a tuning log for a model, its plans are selected from it (generated kernels write into the
arena, so a memory-ordered plan need not give up their speed).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from memory_baselines import NETWORKS, ort_peak

import woodpecker
from woodpecker import zoo
from woodpecker.bench.compare import cpu_info, write_json
from woodpecker.bench.runners import versions
from woodpecker.bench.timing import paired_ratio, time_interleaved
from woodpecker.schedule.memory import format_bytes

PLANS = {"speed": {}, "memory": {"schedule": "memory"},
         "memory+regions": {"schedule": "memory", "library_regions": True}}


def region_peaks(model, plan_dir: Path) -> int:
    """The summed first-run peaks of the plan's ONNX Runtime regions (steps of several graph
    nodes; a one-node step writes into the arena and its workspace is not counted)."""
    files = json.loads((plan_dir / "plan.json").read_text())["engines"].get(
        "onnxruntime", {}).get("models", {})
    total = 0
    for step in model.steps:
        first = model.graph.nodes[step[0]].name
        if len(step) < 2 or first not in files:
            continue
        total += ort_peak(plan_dir / files[first]["file"], runs=3)
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tuning-log", action="append", default=[], metavar="MODEL=LOG")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    logs = dict(spec.split("=", 1) for spec in args.tuning_log)
    cpu, isa = cpu_info()
    doc = {"machine": {"cpu": cpu, "isa": isa}, "versions": versions(), "networks": {}}
    tmp = Path(tempfile.mkdtemp())
    print(f"{'network':<18} {'plan':<15} {'engines':<28} {'ms':>8} {'÷speed':>7} "
          f"{'arena':>10} {'+regions':>10} {'footprint':>10}")
    for name in NETWORKS:
        path = str(zoo.export(name))
        models = {}
        for label, kw in PLANS.items():
            extra = {"tuning_log": logs[name]} if name in logs else {}
            m = woodpecker.compile(path, threads=2, **kw, **extra)
            m.save(tmp / name / label)
            models[label] = m
        x = {models["speed"].inputs[0][0]: zoo.model_input(name)}
        times = time_interleaved({k: (lambda m=m: m.run(x)) for k, m in models.items()},
                                 runs=args.runs, warmup=3)
        rows = doc["networks"][name] = {}
        for label, m in models.items():
            arena = m.plan.arena.size if m.plan.arena is not None else 0
            regions = region_peaks(m, tmp / name / label)
            engines = {e: m.plan.engines.count(e) for e in sorted(set(m.plan.engines))}
            rows[label] = {"median_ms": float(np.median(times[label])),
                           "ratio_to_speed": paired_ratio(times, "speed", label),
                           "arena_bytes": arena, "region_peak_bytes": regions,
                           "footprint_bytes": arena + regions, "engines": engines,
                           "tuning_log": logs.get(name)}
            r = rows[label]
            print(f"{name:<18} {label:<15} {str(engines)[:28]:<28} {r['median_ms']:>8.3f} "
                  f"{r['ratio_to_speed']:>7.3f} {format_bytes(arena):>10} "
                  f"{format_bytes(regions):>10} {format_bytes(arena + regions):>10}",
                  flush=True)
    if args.json:
        write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
