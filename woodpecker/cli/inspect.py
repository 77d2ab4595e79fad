"""`woodpecker inspect`: a plan's (or model's) nodes, engines, FLOPs and time per node, kernel
choices; each library session's own per-op profile (bench/library_profile.py: a library-first
plan is one ONNX Runtime or OpenVINO session of the whole model, whose FLOPs come from its own
graph); `--memory` the activation memory per order; `--partition` AGO's partition."""

from __future__ import annotations

import json
from pathlib import Path

from woodpecker.cli.common import _is_plan, _load_or_compile, _reference_onnx, _shapes
from woodpecker.engines import names
from woodpecker.options import ScheduleKind
from woodpecker.selection.accuracy import PrecisionReport
from woodpecker.selection.compare import Decision


def _fastest_first(ms: dict[str, float]) -> str:
    """"name ms, …" for `inspect`, fastest first."""
    return ", ".join(f"{name} {t:.3f}" for name, t in sorted(ms.items(), key=lambda kv: kv[1]))


def cmd_inspect(args) -> None:
    from woodpecker.bench.compare import random_feeds

    if args.memory:
        return _inspect_memory(args)
    if args.partition:
        return _inspect_partition(args)
    model = _load_or_compile(args)
    rows = model.node_table()
    steps = model.steps
    ms = model.profile(random_feeds(model), args.runs) if args.runs > 0 else [0.0] * len(steps)
    profiles = library_profiles(model, rows, args.runs)
    selection = {r["node"]: r for r in model.plan.meta.get("selection", [])}
    in_plan = {name: r for r in model.plan.meta.get("in_plan", []) for name in r["nodes"]}
    total = sum(r["flops"] for r in rows) or 1
    total_ms = sum(ms) or 1.0
    if _is_plan(args.model):
        from woodpecker.runtime.plan import plan_digest

        print(f"plan {args.model}, digest {plan_digest(args.model)}")
    print(f"{'#':>3} {'node':<36} {'op':<18} {'engine':<12} {'output':<16} {'MFLOPs':>9} "
          f"{'ms':>7}")
    by_engine: dict[str, list[float]] = {}
    stages = [tuple(s) for s in model.plan.stages()]
    for k, (step, t) in enumerate(zip(steps, ms)):
        if tuple(step) in stages:
            print(f"    stage {k}: {len(step)} nodes at the same time, one thread each, "
                  f"{t:.3f} ms")
        elif len(step) > 1:
            print(f"    region {k}: {len(step)} nodes in one {rows[step[0]]['engine']} session, "
                  f"{t:.3f} ms")
        acc = by_engine.setdefault(rows[step[0]]["engine"], [0, 0.0])
        acc[1] += t
        for i in step:
            r = rows[i]
            r["step"] = k
            acc[0] += r["flops"]
            if len(step) == 1:
                r["ms"] = t
            op = "+".join(r["program"]) if r["program"] else \
                "+".join(r["prologue"] + [r["op"]] + r["epilogue"])
            out = "x".join(map(str, r["outputs"][0]))
            shown = f"{t:>7.3f}" if len(step) == 1 else f"{'(r' + str(k) + ')':>7}"
            print(f"{i:>3} {r['name'][:36]:<36} {op[:18]:<18} {r['engine']:<12} {out[:16]:<16} "
                  f"{r['flops'] / 1e6:>9.2f} {shown}")
            if r["why"] and r["why"] != "library preference":
                print(f"{'':>4} chosen by: {r['why']}")
            sel = selection.get(r["name"])
            if sel:
                r["selection"] = sel
                print(f"{'':>4} candidates (ms, conversions included): "
                      f"{_fastest_first(sel['total_ms'])} -> {sel['winner']}")
            fin = in_plan.get(r["name"])
            if fin and r["engine"] == names.HALIDE:
                r["in_plan"] = fin
                print(f"{'':>4} finalists in the plan (ms, summed over {len(fin['nodes'])} "
                      f"node(s)): {_fastest_first(fin['finalists_ms'])} -> {fin['chosen']}")
    for p in profiles:
        print(p.said())
        if p.rows:
            print(p.table())
    gen = by_engine.get(names.HALIDE, [0, 0.0])
    doc = {"model": model.graph.name, "nodes": rows, "total_flops": total,
           "flops_share": {e: f / total for e, (f, _) in by_engine.items()},
           "time_share": {e: t / total_ms for e, (_, t) in by_engine.items()},
           "profiled_ms": sum(ms), "steps": len(steps),
           "generated_flops_share": gen[0] / total,
           "generated_time_share": gen[1] / total_ms,
           "layout_conversions": model.plan.meta.get("layout_conversions", 0),
           "library_profiles": [p.to_json() for p in profiles]}
    print(f"total {total / 1e9:.3f} GFLOPs, {sum(ms):.2f} ms per run (sum of {len(steps)} "
          "steps); FLOPs: " +
          ", ".join(f"{e} {v:.1%}" for e, v in doc["flops_share"].items()) + "; time: " +
          ", ".join(f"{e} {v:.1%}" for e, v in doc["time_share"].items()))
    print(f"generated kernels: {doc['generated_flops_share']:.1%} of FLOPs, "
          f"{doc['generated_time_share']:.1%} of runtime; "
          f"{doc['layout_conversions']} layout conversion(s)")
    doc["fusion"] = model.plan.meta.get("fusion", [])
    for f in doc["fusion"]:       # AGO's fusions weighed against their parts (selection/fusion)
        fused = "no tuned kernel" if f["fused_ms"] is None else f"{f['fused_ms']:.3f} ms"
        apart = "" if f["parts_ms"] is None else f" vs apart {f['parts_ms']:.3f} ms"
        print(f"fusion {f['node']} ({f['op']}): fused {fused}{apart} -> "
              f"{'kept fused' if f['fused'] else 'run apart'}"
              f"{WHOLE_PLAN.get(f.get('whole_plan'), '')}")
    check = doc["fusion_check"] = model.plan.meta.get("fusion_check")
    if check:
        print(f"whole-plan fusion check of {len(check['nodes'])} fusion(s): "
              f"{Decision.said(check)}")
    doc["library_choice"] = model.plan.meta.get("library_choice", [])
    for r in doc["library_choice"]:   # regions moved between libraries (selection/libraries)
        print(f"library regions: {r['why'] if 'why' in r else Decision.said(r)}")
    doc["parallel"] = _show_parallel(model.plan.meta.get("parallel"))
    doc["library_first"] = _show_library_first(model.plan.meta.get("library_first"))
    doc["precision"] = model.plan.precision.value
    if "precision" in model.plan.meta:     # a --precision bf16/fp16 plan's measured accuracy
        print(PrecisionReport.from_json(model.plan.meta["precision"]).said())
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")


def library_profiles(model, rows: list[dict], runs: int) -> list:
    """Each library step's own profile (bench/library_profile.py); a step of one node (the
    whole model, an Opaque node of 0 FLOPs to Woodpecker) takes its graph's FLOPs in `rows`."""
    from woodpecker.bench.library_profile import profile_library_steps, with_step_flops

    profiles = profile_library_steps(model, runs)
    with_step_flops(profiles, model.steps, rows)
    return profiles


# why a fusion weighed fused ended apart (selection/pipeline._check_fusions)
WHOLE_PLAN = {"apart": " (whole-plan check)", "library": " (left on a library: taken apart)"}


def _show_library_first(record: dict | None) -> dict | None:
    """What the library-first comparisons measured (selection/library_first.py): each library
    on the original graph, the one kept, those dropped and why, and Woodpecker's plan against
    it."""
    if not record:
        return None
    times = ", ".join(f"{k} {ms:.3f} ms" for k, ms in record.get("median_ms", {}).items())
    print(f"library-first: {record['engine']} on the original graph"
          + (f" ({times})" if times else ""))
    for name, why in record.get("refused", {}).items():
        print(f"  {name} not used: {why}")
    if record.get("why"):
        print(f"  no node-level plan: {record['why']}")
    rewrite = record.get("rewrite")
    if rewrite:     # Woodpecker's graph on the libraries, timed in the same rounds
        print(f"  {rewrite['best']}: paired {rewrite['paired_ratio']:.3f} of "
              f"{record['engine']}'s session (bar {rewrite['bar']:.2f}) -> "
              f"{rewrite['best'] if rewrite['kept'] else 'the session'}")
    against = record.get("against")
    if against and "paired_ratio" in against:
        print(f"  {Decision.said(against)}")
    elif against:
        print(f"  kept the library: {against.get('why')}")
    return record


def _show_parallel(record: dict | None) -> dict | None:
    """DOS's schedule as the compile measured it (selection/parallel.py): each stage run
    together, its time together and in turn; the critical path; the whole-plan decision."""
    if not record:
        return None
    if "ratio" not in record:
        print(f"parallel schedule: not kept ({record.get('why')})")
        return record
    print(f"parallel schedule on {record['threads']} threads: "
          f"{'kept' if record['kept'] else 'not kept'}, whole plan {record['ratio']:.3f}x the "
          f"sequential time; steps {record['sequential_sum_ms']:.2f} ms in turn, "
          f"{record['dos_sum_ms']:.2f} ms by DOS's stages; critical path "
          f"{record['critical_path_ms']:.2f} ms through {len(record['critical_path'])} nodes; "
          f"no schedule of these kernels beats {record['floor_ms']:.2f} ms "
          f"({record['best_possible']:.3f}x)")
    for stage in record["stages"]:
        print(f"  stage ({stage['strategy']}): {stage['ms']:.3f} ms together vs "
              f"{stage['apart_ms']:.3f} in turn: " + ", ".join(stage["nodes"]))
    return {k: v for k, v in record.items() if k != "steps_ms"}


def _inspect_memory(args) -> None:
    """Memory of the file's order, Kahn's, the DP's and DP + rewriting
    (schedule/memory_report.py)."""
    from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
    from woodpecker.passes import MEMORY, optimize
    from woodpecker.schedule.memory_report import show_report

    if _is_plan(args.model):
        import woodpecker

        model = woodpecker.load(args.model, digest=getattr(args, "digest", None),
                                trust=getattr(args, "trust", False))
        if model.plan.schedule.kind is not ScheduleKind.MEMORY:
            graph = model.graph
        else:   # the plan is reordered: start again from the model file
            graph = import_onnx(load_model_proto(_reference_onnx(model, args.onnx, args.model)))
            optimize(graph, MEMORY)
    else:
        graph = import_onnx(load_model_proto(args.model), _shapes(args.input_shape))
        optimize(graph, MEMORY)
    show_report(graph, Path(args.model).name, args.plot, args.json)


def _inspect_partition(args) -> None:
    """AGO's partition of the plan's graph: subgraphs, operators, weight, kernels, time
    (partition/summary.py), and its picture."""
    from woodpecker.bench.compare import random_feeds
    from woodpecker.partition.ago import partition_graph
    from woodpecker.partition.summary import format_rows, partition_rows, plot_partition

    model = _load_or_compile(args)
    graph = model.graph
    choices = {n: (c.engine, c.kernel.template if c.kernel is not None else None)
               for n, c in model.plan.choices.items()}
    ms = {}
    if args.runs > 0:
        for step, t in zip(model.steps, model.profile(random_feeds(model), args.runs)):
            if len(step) == 1:
                ms[graph.nodes[step[0]].name] = t
    p = partition_graph(graph)
    rows = partition_rows(graph, choices, ms, p)
    print(format_rows(rows, p))
    plot = args.plot or f"{Path(args.model).name.removesuffix('.onnx')}_partition.png"
    plot_partition(graph, p, plot, f"{Path(args.model).name}: AGO partition")
    print(f"wrote {plot}")
    if args.json:
        Path(args.json).write_text(json.dumps({"threshold": p.threshold, "subgraphs": rows},
                                              indent=1))
        print(f"wrote {args.json}")
