"""Speed against footprint per irregular network (issue 33, deliverable 4): a tuned speed plan and
a tuned memory plan of the same model, the memory plan's regions allowed to hold more (budgets
between), ONNX Runtime and OpenVINO, timed in one interleaved run.

    python benchmarks/memory_tradeoff.py --plans darts_cifar=SPEED.wpk,MEMORY.wpk [...] \\
        --budgets 1.5,2,4 --runs 30 --json benchmarks/results/memory_tradeoff_<machine>.json

Rows per network:
- speed: the speed plan (the file's order; ONNX Runtime regions allocate their inner
  activations themselves);
- memory: the memory plan (SERENITY's order; its regions write every value into the arena and
  are cut where they would hold more than the order's peak: runtime/steps.py);
- memory, a step per node: the same plan without regions (what memory plans were before);
- library memory ≤ f×: the memory order compiled for the library engines alone (ONNX Runtime
  regions, no generated kernels), its regions allowed to hold f × the order's peak (f = 1: the
  default; more: what `compile --memory-budget` with that budget gives — fewer, larger
  regions);
- onnxruntime, openvino: the model file, as a user runs it.
Time: the median, and the paired median ratio to the speed plan. Footprint, measured the same way
for every row: the resident-set growth over the first run in a fresh process after loading
(freed heap given back, high-water mark reset; memory_baselines.first_run_peak) — the arena's
pages, ONNX Runtime's own allocations, Halide's scratch, the outputs; the least of 3 processes.
Beside it each plan's arena.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from memory_baselines import first_run_peak

import woodpecker
from woodpecker import zoo
from woodpecker.assembly import reordered
from woodpecker.bench.compare import write_json
from woodpecker.bench.runners import OPENVINO, make_runner, versions
from woodpecker.bench.timing import paired_ratio, time_interleaved
from woodpecker.engines.names import ONNXRUNTIME
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.schedule.memory import format_bytes
from woodpecker.target import machine_facts


def variants(memory: CompiledModel, onnx_path, factors: list[float]
             ) -> dict[str, CompiledModel]:
    """The memory plan without regions, and the library engines' memory plan with its regions
    allowed to hold f × the order's peak (built from the nodes: ONNX Runtime's step models,
    Halide's kernels from the cache)."""
    plan = memory.plan
    p = reordered(plan, range(len(plan.graph.nodes)), library_regions=False)
    p.directory = None
    out = {"memory, a step per node": CompiledModel(p)}
    library = woodpecker.compile(onnx_path, threads=2, schedule="memory",
                                 engines="onnxruntime,numpy").plan
    peak = library.meta["schedule"]["peak_bytes"]
    for f in factors:
        p = reordered(library, range(len(library.graph.nodes)),
                      schedule=dict(library.meta["schedule"], region_bytes=int(f * peak)))
        out[f"library memory ≤ {f:g}×"] = CompiledModel(p)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans", action="append", required=True, metavar="MODEL=SPEED,MEMORY")
    ap.add_argument("--budgets", default="1,1.5,2,4",
                    help="region limits of the library memory plan, × the order's peak")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    factors = [float(f) for f in args.budgets.split(",") if f]
    doc = {"machine": machine_facts(), "versions": versions(), "networks": {}}
    tmp = Path(tempfile.mkdtemp())
    print(f"{'network':<18} {'row':<26} {'steps':>5} {'ms':>8} {'÷speed':>7} {'arena':>10} "
          f"{'footprint':>10}")
    for spec in args.plans:
        name, paths = spec.split("=", 1)
        speed_path, memory_path = paths.split(",")
        onnx_path = zoo.export(name)
        plans = {"speed": Path(speed_path), "memory": Path(memory_path)}
        models = {k: woodpecker.load(p) for k, p in plans.items()}
        for label, m in variants(models["memory"], onnx_path, factors).items():
            plans[label] = tmp / name / label.replace(" ", "_")
            m.save(plans[label])
            models[label] = woodpecker.load(plans[label])
        x = {models["speed"].inputs[0][0]: zoo.model_input(name)}
        ref = make_runner(ONNXRUNTIME, onnx_path.read_bytes(), None, 2)(x)[0]
        runners = {k: (lambda m=m: m.run(x)) for k, m in models.items()}
        for lib in (ONNXRUNTIME, OPENVINO):
            run = make_runner(lib, onnx_path.read_bytes(), None, 2)
            runners[lib] = lambda run=run: run(x)
        times = time_interleaved(runners, runs=args.runs, warmup=3)
        rows = doc["networks"][name] = {}
        for label in runners:
            m = models.get(label)
            footprint = first_run_peak("plan", plans[label], 3) if m is not None else \
                first_run_peak("onnx", onnx_path, 3) if label == ONNXRUNTIME else None
            row = rows[label] = {
                "median_ms": float(np.median(times[label])),
                "ratio_to_speed": paired_ratio(times, "speed", label),
                "first_run_peak_bytes": footprint}
            if m is not None:
                out = next(iter(m.run(x).values()))
                row.update(steps=len(m.steps), arena_bytes=m.plan.arena.size,
                           engines={e: m.plan.engines.count(e) for e in set(m.plan.engines)},
                           max_abs_diff_vs_ort=float(np.max(np.abs(out - ref))),
                           plan=str(plans[label]))
            print(f"{name:<18} {label:<26} {row.get('steps', ''):>5} {row['median_ms']:>8.3f} "
                  f"{row['ratio_to_speed']:>7.3f} "
                  f"{format_bytes(row['arena_bytes']) if m is not None else '':>10} "
                  f"{format_bytes(footprint) if footprint is not None else '':>10}", flush=True)
    if args.json:
        write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
