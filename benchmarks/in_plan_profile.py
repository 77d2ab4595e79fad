"""Where a plan loses to ONNX Runtime, node by node, each timed inside its own whole model: the
plan's per-step times (`CompiledModel.profile`) beside ONNX Runtime's own profiler on the
whole model (its per-node kernel times, after its fusions). Per-node selection times each
node alone, which both inflates library times (a one-node session's overhead, cold caches)
and hides what a plan pays between nodes; this shows the in-plan picture. Rows are matched
by node name (ONNX Runtime keeps the first node's name for most fusions, as Woodpecker's
fused nodes do) or by an output's name (its NCHWc convolutions are named "<output>_nchwc");
what matches on neither side is summed as "unmatched".

    python benchmarks/in_plan_profile.py regnet_x_400mf --tuning-log logs/tuning_regnet.jsonl
    python benchmarks/in_plan_profile.py vit_tiny --tuning-log L.jsonl --engines halide,numpy
    python benchmarks/in_plan_profile.py hf_distilbert --tuning-log L.jsonl   # real-world set

Both profilers add time per step or node (a timer call per step here; ONNX Runtime's profiler
records events), which weighs on nodes of a few microseconds: the last line gives each side's
whole run unprofiled, interleaved, beside the sum of its profiled parts.

By default the plan may use generated kernels only (`--engines halide,numpy`), the plan the
plan check calls "every timed node". JSON: --json (optional). `--openvino` adds OpenVINO's
per-layer times from its performance counters (PERF_COUNT, f32, one stream), matched the same
way — issue 52 asks for per-layer measurements against both libraries.

`--alone` (issue 77, deliverable 1: "report per layer: alone, in our plan, and the library's
kernel at the same place in its own session") adds, per generated-kernel step, its kernel
alone in this process on the same threads: built from the plan's own spec, checked against
the task's reference, timed back to back ("hot": weights and output in cache) and as the tuner
times it (`tune/rotation.rotating_call`: weights read from rotated copies, out of L2), with
the cost the tuning log recorded for that very config (its worker process's measurement):
the gap between the tuner's number and the plan's is what issue 77 asks to close.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

import woodpecker
from woodpecker import zoo
from woodpecker.bench.compare import random_feeds, write_json
from woodpecker.bench.runners import versions
from woodpecker.bench.timing import time_interleaved
from woodpecker.engines.ort_engine import new_session, session_options
from woodpecker.target import machine_facts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.realworld import input_shapes, load_manifest, make_inputs  # noqa: E402

WARMUP = 5


def ort_node_ms(onnx_bytes: bytes, feeds: dict, threads: int, runs: int) -> dict[str, float]:
    """Mean ms per run of each node ONNX Runtime executes, from its profiler."""
    import onnxruntime as ort

    so = session_options(threads)
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(onnx_bytes, so, providers=["CPUExecutionProvider"])
        for _ in range(WARMUP + runs):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    durations: dict[str, list[float]] = defaultdict(list)   # per node, in call order
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            durations[e["name"][: -len("_kernel_time")]].append(e["dur"] / 1e3)
    # the first WARMUP runs are warm-up: the mean over each node's last `runs` calls
    return {n: float(np.mean(d[-runs:])) for n, d in durations.items()}


def openvino_layer_ms(onnx_bytes: bytes, feeds: dict, threads: int,
                      runs: int) -> dict[str, float]:
    """Mean ms per run of each layer OpenVINO's CPU plugin executes, from its performance
    counters (the benchmark's properties: f32, one stream, the threads), by layer name — the
    ONNX node's, or an output's, that a fused layer keeps; layers it optimised out or did not
    run are left out."""
    import openvino as ov

    from woodpecker.engines.openvino_engine import compile_config

    core = ov.Core()
    config = dict(compile_config(threads), PERF_COUNT=True)
    request = core.compile_model(core.read_model(onnx_bytes), "CPU", config) \
        .create_infer_request()
    totals: dict[str, float] = defaultdict(float)
    for i in range(WARMUP + runs):
        request.infer(feeds)
        if i < WARMUP:
            continue
        for info in request.get_profiling_info():
            if info.status == ov.ProfilingInfo.Status.EXECUTED:
                totals[info.node_name] += info.real_time.total_seconds() * 1e3
    return {n: t / runs for n, t in totals.items()}


def matched_rows(model, ours_ms: list[float], lib_ms: dict[str, float]
                 ) -> tuple[list[dict], float, float]:
    """Per step of the plan the library's time for the nodes it matches (by node or output
    name, `_nchwc` for ONNX Runtime's blocked convs, a last `/…` part left off for OpenVINO's
    layers), the plan's unmatched time, and the library's."""
    rows, unmatched, matched = [], 0.0, set()
    graph, engines = model.plan.graph, model.plan.engines
    for step, ms in zip(model.steps, ours_ms):
        nodes, engine = [graph.nodes[i] for i in step], engines[step[0]]
        names = [n.name for n in nodes]
        # the layout pass renames a value it holds in NHWC "<name>.held…" (assembly/layout.py)
        outs = {v.name.split(".held")[0] for n in nodes for v in n.outputs}
        known = set(names) | outs | {o + "_nchwc" for o in outs}
        # OpenVINO names a conv whose bias it fused "<node>/WithoutBiases"
        hit = [n for n in lib_ms if (n in known or n.rsplit("/", 1)[0] in known)
               and n not in matched]
        if not hit:
            unmatched += ms
            continue
        matched.update(hit)
        rows.append({"step": names[0], "op": nodes[0].op, "engine": engine,
                     "nodes": len(names), "ms": ms, "lib_ms": sum(lib_ms[n] for n in hit)})
    return rows, unmatched, sum(v for n, v in lib_ms.items() if n not in matched)


def alone_ms(model, log_path: str, threads: int, runs: int) -> dict[str, dict]:
    """Per generated-kernel step (by its first node's name): {"hot", "tuner"} ms of its kernel
    alone (median of `runs` calls each), and "recorded", the tuning log's cost of that config
    for that task (None where the log has none)."""
    from woodpecker.selection.finalists import checked_kernel
    from woodpecker.target import Target
    from woodpecker.tasks import spec_task
    from woodpecker.tune.database import PACKAGED, load_database
    from woodpecker.tune.records import TuningLog, TuningRecord
    from woodpecker.tune.rotation import rotating_call

    here = Target.parse("cpu", threads).record_key
    recorded: dict[tuple, float] = {}
    shipped = [r for r in load_database(PACKAGED).records if r.target == here]
    for r in [*shipped, *TuningLog(log_path).records]:    # the user's log speaks last
        if r.cost_s is not None:
            key = (r.task, r.template, json.dumps(dict(r.config), sort_keys=True))
            recorded[key] = r.cost_s * 1e3
    out = {}
    graph = model.plan.graph
    for step in model.steps:
        node = graph.nodes[step[0]]
        spec = model.plan.choices[node.name].kernel
        if spec is None:
            continue
        task = spec_task(spec.to_json())
        record = TuningRecord(task.key, spec.template, spec.config, None)
        kernel, args = checked_kernel(task, record, threads, task.random_inputs(0))
        row = {}
        for how, call in (("hot", lambda: kernel(*args)),
                          ("tuner", rotating_call(kernel, args))):
            times = []
            for _ in range(WARMUP + runs):
                t0 = time.perf_counter()
                call()
                times.append((time.perf_counter() - t0) * 1e3)
            row[how] = float(np.median(times[WARMUP:]))
        row["recorded"] = recorded.get((task.key, spec.template,
                                        json.dumps(dict(spec.config), sort_keys=True)))
        out[node.name] = row
    return out


def print_alone(rows: list[dict]) -> None:
    """The generated steps: alone (hot, as the tuner times it, as the log recorded) beside
    their time in the plan and the library's at the same place."""
    print(f"{'generated step':<44} {'hot':>6} {'tuner':>6} {'log':>6} {'plan':>6} {'OV':>6} "
          f"{'plan/tuner':>10}")
    for r in sorted(rows, key=lambda r: r["ms"] - r["alone"]["tuner"], reverse=True):
        a, rec = r["alone"], r["alone"]["recorded"]
        ov = r.get("openvino_ms")
        print(f"{r['step'][-44:]:<44} {a['hot']:>6.3f} {a['tuner']:>6.3f} "
              f"{rec if rec is None else round(rec, 3)!s:>6} {r['ms']:>6.3f} "
              f"{'' if ov is None else round(ov, 3)!s:>6} {r['ms'] / a['tuner']:>10.2f}")
    if rows:
        g = math.exp(sum(math.log(r["ms"] / r["alone"]["tuner"]) for r in rows) / len(rows))
        print(f"geomean in-plan ÷ alone (as the tuner times it): {g:.2f} over {len(rows)} steps")


def print_rows(rows: list[dict], unmatched: float, unmatched_lib: float, lib: str) -> None:
    print(f"{'step':<58} {'engine':>8} {'ms':>7} {lib + ' ms':>7} {'ratio':>6}")
    for r in sorted(rows, key=lambda r: r["ms"] - r["lib_ms"], reverse=True):
        print(f"{r['step'][-58:]:<58} {r['engine'][:8]:>8} {r['ms']:>7.3f} "
              f"{r['lib_ms']:>7.3f} {r['ms'] / max(r['lib_ms'], 1e-9):>6.2f}")
    ours, theirs = sum(r["ms"] for r in rows), sum(r["lib_ms"] for r in rows)
    print(f"{'matched steps':<58} {'':>8} {ours:>7.3f} {theirs:>7.3f} "
          f"{ours / max(theirs, 1e-9):>6.2f}")
    print(f"{'unmatched (movement, conversions, ' + lib + '-only nodes)':<58} {'':>8} "
          f"{unmatched:>7.3f} {unmatched_lib:>7.3f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model", help="a zoo model's name, or a model of the real-world set "
                                 "(benchmarks/realworld.py) at its recorded input shapes")
    p.add_argument("--tuning-log", required=True)
    p.add_argument("--engines", default="halide,numpy")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--openvino", action="store_true",
                   help="also OpenVINO's per-layer times (its performance counters)")
    p.add_argument("--alone", action="store_true",
                   help="also each generated kernel alone: hot, as the tuner times it, and "
                        "the tuning log's recorded cost")
    p.add_argument("--json")
    args = p.parse_args()
    entry = None
    if args.model not in zoo.MODELS:
        entry = next((e for e in load_manifest()["models"] if e["name"] == args.model), None)
        if entry is None:
            p.error(f"{args.model!r} is neither a zoo model nor in the real-world set")
    data = (zoo.export(args.model) if entry is None else Path(entry["abs_path"])).read_bytes()
    shapes = input_shapes(entry) if entry and entry.get("inputs") else None
    model = woodpecker.compile(data, threads=args.threads, tuning_log=args.tuning_log,
                               engines=args.engines, input_shapes=shapes)
    feeds = random_feeds(model) if shapes is None else make_inputs(entry)
    ours_ms = model.profile(feeds, args.runs)
    # alone before any library session exists in this process (their threads spin after runs)
    alone = alone_ms(model, args.tuning_log, args.threads, args.runs) if args.alone else {}
    ort_ms = ort_node_ms(data, feeds, args.threads, args.runs)
    rows, unmatched_ours, unmatched_ort = matched_rows(model, ours_ms, ort_ms)
    print_rows(rows, unmatched_ours, unmatched_ort, "ORT")
    for r in rows:
        r["onnxruntime_ms"] = r.pop("lib_ms")
    ov_ms = openvino_layer_ms(data, feeds, args.threads, args.runs) if args.openvino else {}
    ov = matched_rows(model, ours_ms, ov_ms) if ov_ms else ([], 0.0, 0.0)
    if ov_ms:
        print()
        print_rows(*ov, "OV")
    generated = []
    if alone:
        at_ov = {r["step"]: r["lib_ms"] for r in ov[0]}
        graph = model.plan.graph
        for step, ms in zip(model.steps, ours_ms):
            name = graph.nodes[step[0]].name
            if name in alone:
                generated.append({"step": name, "ms": ms, "alone": alone[name],
                                  **({"openvino_ms": at_ov[name]} if name in at_ov else {})})
        print()
        print_alone(generated)
    # what the profilers add: each side's whole run, unprofiled, interleaved
    sess = new_session(data, args.threads)
    runs = time_interleaved({"woodpecker": lambda: model.run(feeds),
                             "onnxruntime": lambda: sess.run(None, feeds)}, args.runs, WARMUP)
    whole = {k: float(np.median(v)) for k, v in runs.items()}
    print(f"whole run, no profiler (median ms): woodpecker {whole['woodpecker']:.3f} (its steps "
          f"sum to {sum(ours_ms):.3f}), onnxruntime {whole['onnxruntime']:.3f} (its profiled "
          f"nodes sum to {sum(ort_ms.values()):.3f})")
    if args.json:
        write_json(args.json, {"model": args.model, "engines": args.engines,
                               "machine": machine_facts(), "versions": versions(),
                               "rows": rows,
                               "unmatched_ms": unmatched_ours,
                               "unmatched_onnxruntime_ms": unmatched_ort,
                               "whole_run_ms": whole, "steps_sum_ms": sum(ours_ms),
                               "onnxruntime_nodes_sum_ms": sum(ort_ms.values()),
                               "openvino_rows": [dict(r, openvino_ms=r.pop("lib_ms"))
                                                 for r in ov[0]],
                               "unmatched_openvino_ms": ov[2],
                               "generated_steps": generated,
                               "openvino_layers_sum_ms": sum(ov_ms.values())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
