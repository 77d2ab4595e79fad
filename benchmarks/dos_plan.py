"""DOS on a saved tuned plan (issue 32): its parallel schedule against its sequential one, with
the same kernels; the stages measured, how much any schedule could gain here, and what the
measured stage widths promise on 8 and 32 cores.

For `--plan P` (compiled with `--schedule parallel`, or any tuned plan): the sequential plan is
P's order with no stage run together; the parallel plan is P's kept stages, or those
`schedule_parallel(..., always=True)` finds (even where the whole plan is not faster). Both are
saved under `--out` for `benchmarks/builds_compare.py`, which times them against ONNX Runtime
and OpenVINO in one interleaved run:

    python benchmarks/dos_plan.py --plan /tmp/dos/rw-par.wpk --out /tmp/dos/rw \\
        --json benchmarks/results/dos_plan_randwire_imagenet_zen3.json
    python benchmarks/builds_compare.py --onnx randwire_imagenet.onnx \\
        --plan sequential=/tmp/dos/rw/sequential.wpk@. --plan parallel=/tmp/dos/rw/parallel.wpk@. \\
        --runs 40 --json benchmarks/results/dos_e2e_randwire_imagenet_zen3.json

Reported besides the stages (and the greedy baseline: the first ready steps, as many as there
are threads, always together): `best_possible`, the sequential sum of step times over the least
time any schedule of these kernels could take on the plan's cores (the longest path, or all the
work — each Halide step on one core, the rest on all — spread without loss), and the
projection: each Halide step's time on p cores fitted to Amdahl's law from its measured time on
one core and on two (t(p) = a + w/p), a stage of k steps given p // k cores each and costing its
slowest member, DOS's DP (blocks of 10 steps, stages of at most 4) against the sequential sum.
Library and movement steps keep their measured time (they are not scaled: conservative).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import woodpecker
from woodpecker.assembly import reordered
from woodpecker.bench.compare import write_json
from woodpecker.bench.runners import versions
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.schedule.dos import optimal_in_blocks
from woodpecker.schedule.dos_steps import step_edges
from woodpecker.selection.parallel import schedule_parallel
from woodpecker.target import machine_facts


def projection(alone: list[float], one: list, edges, cores: int, block: int = 10,
               widest: int = 4) -> dict:
    """Sequential and DOS time of the steps on `cores` cores, by the fitted Amdahl model."""
    def t(s: int, p: int) -> float:
        if one[s] is None:
            return alone[s]
        serial = max(0.0, 2 * alone[s] - one[s])
        return serial + max(0.0, one[s] - serial) / p

    def cost(stage: frozenset) -> tuple[float, str]:
        k = len(stage)
        if k > 1 and any(one[s] is None for s in stage):
            return math.inf, "impossible"
        share = max(1, cores // k)
        return max(t(s, share) for s in stage), "concurrent" if k > 1 else "sequential"

    total = optimal_in_blocks(range(len(alone)), edges, cost, block, min(widest, cores)).cost
    sequential = sum(t(s, cores) for s in range(len(alone)))
    return {"cores": cores, "sequential_ms": round(sequential, 4), "dos_ms": round(total, 4),
            "gain": round(sequential / total, 4)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True)
    p.add_argument("--out", required=True, help="folder for sequential.wpk and parallel.wpk")
    p.add_argument("--json")
    args = p.parse_args()
    model = woodpecker.load(args.plan)
    record = model.plan.meta.get("parallel") or {}
    if not record.get("kept"):
        model = schedule_parallel(model, always=True)
        record = model.plan.meta["parallel"]
    if not record.get("kept"):
        raise SystemExit(f"no parallel schedule: {record.get('why')}")
    plan = model.plan
    sequential = CompiledModel(reordered(plan, range(len(plan.graph.nodes)),
                                         parallel=dict(record, kept=False)))
    out = Path(args.out)
    model.save(out / "parallel.wpk", force=True)
    sequential.save(out / "sequential.wpk", force=True)

    steps = sequential.steps
    names = [plan.graph.nodes[step[0]].name for step in steps]
    times = [record["steps_ms"][n] for n in names]
    alone, one = [a for a, _ in times], [b for _, b in times]
    edges = step_edges(sequential.graph, steps)
    projections = [projection(alone, one, edges, c) for c in (2, 8, 32)]
    doc = {"plan": args.plan, "machine": machine_facts(), "versions": versions(),
           **{k: v for k, v in record.items() if k not in ("steps_ms", "critical_path")},
           "projection": projections}
    print(f"{len(steps)} steps, {sum(o is not None for o in one)} Halide; "
          f"sequential sum {record['sequential_sum_ms']:.2f} ms, DOS "
          f"{record['dos_sum_ms']:.2f} ms ({len(record['stages'])} stages together), greedy "
          f"{record['greedy_sum_ms']:.2f} ms; "
          f"critical path {record['critical_path_ms']:.2f} ms; best possible on "
          f"{record['threads']} cores {record['best_possible']:.3f}x")
    print(f"whole plan in the scheduler's check: {record['ratio']:.3f}x the sequential time")
    for stage in record["stages"]:
        print(f"  {stage['ms']:.3f} ms together, {stage['apart_ms']:.3f} in turn: "
              + ", ".join(stage["nodes"]))
    for row in projections:
        print(f"projected on {row['cores']:2d} cores: sequential {row['sequential_ms']:.2f} ms, "
              f"DOS {row['dos_ms']:.2f} ms, {row['gain']:.3f}x")
    if args.json:
        write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
