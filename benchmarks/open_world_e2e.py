"""Issue 50's acceptance run: every model of the real-world set (benchmarks/realworld.py: real
pretrained ONNX models from PyPI wheels, and timm / transformers / torchvision families not in
the zoo) and of the zoo, compiled as a user would — untuned, or `--tune --budget B` from an
empty tuning log — then checked against ONNX Runtime on the set's own inputs and timed
interleaved against ONNX Runtime and OpenVINO over the user's original file.

Per model: compile seconds, what the plan is (library-first engine, or Woodpecker's with its
generated share of the time, profiled, and of the FLOPs), max relative difference to ONNX
Runtime and ORT's own with its graph optimisations off (the model's float noise), medians of
every runtime, the ratio of our median to the faster library's median
(≤ 1.02 is the bar after a tune, ≤ 1.01 untuned) and the paired per-round ratio to the
faster library in each round. The table ends with the geomean over the non-zoo models of
(faster library's median ÷ ours).

    python benchmarks/realworld.py                       # builds the set once
    python benchmarks/open_world_e2e.py --runs 30 --json benchmarks/results/open_world_untuned.json
    python benchmarks/open_world_e2e.py --budget 3m --runs 30 --zoo \
        --json benchmarks/results/open_world_3m.json

The shipped tuning database (tune/database.py) joins every tuned compile unless
`WOODPECKER_DATABASE` says otherwise (`off`, or a file: e.g. one written by
`benchmarks/tuning_database.py --drop-target` without this machine's records); the result
names the database used. `--logs DIR` keeps the models' tuning logs (for the database).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import woodpecker  # noqa: E402
from benchmarks.realworld import input_shapes, load_manifest, make_inputs  # noqa: E402
from woodpecker import zoo  # noqa: E402
from woodpecker.bench.compare import FASTEST_LIBRARY, benchmark, write_json  # noqa: E402
from woodpecker.bench.runners import OPENVINO  # noqa: E402
from woodpecker.engines.names import ONNXRUNTIME  # noqa: E402
from woodpecker.options import TuneOptions  # noqa: E402
from woodpecker.tune.database import default_database  # noqa: E402


def _entries(args) -> list[dict]:
    """The models to run: the set's manifest entries (path absolute) and zoo models."""
    out = []
    if not args.zoo_only:
        for e in load_manifest(args.set)["models"]:
            out.append(dict(e, path=e["abs_path"]))
    if args.zoo or args.zoo_only:
        for name in zoo.MODELS:
            out.append({"name": name, "group": "zoo", "path": str(zoo.export(name)),
                        "inputs": None})
    if args.models:
        keep = set(args.models.split(","))
        out = [e for e in out if e["name"] in keep]
    return out


def _feeds(entry: dict, model) -> dict[str, np.ndarray]:
    if entry.get("inputs"):
        return make_inputs(entry, seed=1)
    return zoo_feeds(model)


def zoo_feeds(model) -> dict[str, np.ndarray]:
    from woodpecker.bench.compare import random_feeds

    return random_feeds(model, seed=1)


def _rel_diff(model, feeds: dict, onnx_path: str) -> tuple[float, float]:
    """Our largest difference from ONNX Runtime relative to ORT's largest output, and ORT's
    own with its graph optimisations off (the model's float noise, the same math in another
    order: selection/library_first.py)."""
    from woodpecker.engines.ort_engine import new_session
    from woodpecker.selection.library_first import relative_difference

    threads = model.plan.target.threads
    want = new_session(Path(onnx_path), threads).run(None, feeds)
    plain = new_session(Path(onnx_path), threads, optimize=False).run(None, feeds)
    got = list(model.run(feeds).values())

    def worst(outs) -> float:
        return max([min(relative_difference(np.asarray(g), np.asarray(w)), 1.0)
                    for g, w in zip(outs, want)], default=0.0)

    return worst(got), worst(plain)


def run_one(entry: dict, args, log_dir: Path) -> dict:
    shapes = input_shapes(entry) if entry.get("inputs") else None
    kwargs = {"threads": args.threads}
    if args.budget:
        kwargs.update(tune=TuneOptions(args.budget), resume=True,
                      tuning_log=str(log_dir / f"tuning_{entry['name']}.jsonl"))
    t0 = time.monotonic()
    model = woodpecker.compile(entry["path"], input_shapes=shapes, **kwargs)
    compile_s = time.monotonic() - t0
    meta = model.plan.meta
    first = meta.get("library_first", {})
    feeds = _feeds(entry, model)
    rel, ort_noise = _rel_diff(model, feeds, entry["path"])
    onnx_bytes = Path(entry["path"]).read_bytes()
    try:
        result = benchmark(model, onnx_bytes, [ONNXRUNTIME, OPENVINO], runs=args.runs,
                           warmup=3, block=3, seed=1, feeds=feeds)
    except Exception:  # noqa: BLE001 - OpenVINO cannot read it (silero VAD's dynamic rank)
        result = benchmark(model, onnx_bytes, [ONNXRUNTIME], runs=args.runs, warmup=3,
                           block=3, seed=1, feeds=feeds)
        result["paired_speedup_vs"][FASTEST_LIBRARY] = \
            result["paired_speedup_vs"][ONNXRUNTIME]
    res = result["results"]
    fastest = min(res[n]["median_ms"] for n in (ONNXRUNTIME, OPENVINO) if n in res)
    ours = res["woodpecker"]["median_ms"]
    return {
        "name": entry["name"], "group": entry["group"], "compile_s": round(compile_s, 1),
        "plan": _plan_kind(first),
        "engines": sorted(set(model.plan.engines)),
        "generated_flops_share": round(model.generated_flops_share(), 3),
        "generated_time_share": round(model.generated_time_share(feeds), 3),
        "library_first": first, "max_rel_diff_vs_ort": rel,
        "ort_unoptimized_rel_diff": ort_noise,
        "median_ms": {k: v["median_ms"] for k, v in res.items()},
        "ratio_to_faster_library": ours / fastest,
        "paired_vs_faster_library": 1 / result["paired_speedup_vs"][FASTEST_LIBRARY],
        "machine": result["machine"], "versions": result["versions"],
        "tuning": meta.get("tuning"),
    }


def _plan_kind(first: dict) -> str:
    """What the plan is: a library's session of the file, Woodpecker's graph on a library
    (`rewrite:<engine>`), or Woodpecker's plan with generated kernels."""
    if not first or (first.get("against") or {}).get("kept"):
        return "woodpecker"
    rewrite = first.get("rewrite") or {}
    if rewrite.get("kept"):
        return "rewrite:" + rewrite["best"].rsplit(" ", 1)[-1]
    return "library:" + first["engine"]


def _table(rows: list[dict]) -> str:
    lines = [f"{'model':<32} {'group':<7} {'plan':<22} {'gen t':>5} {'ours ms':>9} {'ORT ms':>9} "
             f"{'OV ms':>9} {'ratio':>6} {'paired':>6} {'rel diff':>9} {'ORT noise':>9} "
             f"{'compile s':>9}"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['name']:<32} {r['group']:<7} ERROR {r['error']}")
            continue
        m = r["median_ms"]
        lines.append(f"{r['name']:<32} {r['group']:<7} {r['plan']:<22} "
                     f"{r.get('generated_time_share', 0.0):>5.2f} {m['woodpecker']:>9.3f} "
                     f"{m[ONNXRUNTIME]:>9.3f} {m.get(OPENVINO, float('nan')):>9.3f} "
                     f"{r['ratio_to_faster_library']:>6.3f} {r['paired_vs_faster_library']:>6.3f} "
                     f"{r['max_rel_diff_vs_ort']:>9.1e} "
                     f"{r.get('ort_unoptimized_rel_diff', float('nan')):>9.1e} "
                     f"{r['compile_s']:>9.1f}")
    done = [r for r in rows if "error" not in r]
    outside = [r for r in done if r["group"] != "zoo"]
    for label, group in (("non-zoo", outside), ("zoo", [r for r in done if r["group"] == "zoo"])):
        if group:
            g = math.exp(np.mean([math.log(1 / r["ratio_to_faster_library"]) for r in group]))
            worst = max(r["ratio_to_faster_library"] for r in group)
            lines.append(f"{label}: {len(group)} models, geomean (faster library ÷ ours) "
                         f"{g:.3f}, worst ours ÷ faster library {worst:.3f}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--set", help="the real-world set's folder (default: realworld.py's)")
    p.add_argument("--zoo", action="store_true", help="also every zoo model")
    p.add_argument("--zoo-only", action="store_true")
    p.add_argument("--models", help="comma-separated names to run (default: all)")
    p.add_argument("--budget", help="compile --tune --budget B from an empty log (default: "
                   "untuned)")
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default="benchmarks/results/open_world_e2e.json")
    p.add_argument("--logs", help="keep each model's tuning log in this folder (for the tuning "
                                  "database: benchmarks/tuning_database.py); default: a "
                                  "temporary folder, removed")
    p.add_argument("--resume", action="store_true",
                   help="keep the models --json already holds (without an error) and run the "
                        "rest: a long run spread over several sittings")
    args = p.parse_args()
    rows = []
    if args.resume and Path(args.json).exists():
        rows = [r for r in json.loads(Path(args.json).read_text())["models"] if "error" not in r]
    done = {r["name"] for r in rows}
    db = default_database()      # the shipped tuning database (WOODPECKER_DATABASE chooses)
    used = {"source": db.source, "records": len(db), "targets": db.targets}
    with tempfile.TemporaryDirectory() as scratch:
        logs = args.logs or scratch
        Path(logs).mkdir(parents=True, exist_ok=True)
        held = [e["name"] for e in _entries(args) if e["name"] not in done
                and (Path(logs) / f"tuning_{e['name']}.jsonl").exists()]
        if held and args.budget:
            raise SystemExit(f"{logs} already holds the tuning logs of {', '.join(held)}: each "
                             "compile starts from an empty log (another --logs folder)")
        for entry in [e for e in _entries(args) if e["name"] not in done]:
            print(f"== {entry['name']}", flush=True)
            try:
                rows.append(run_one(entry, args, Path(logs)))
            except Exception as e:  # noqa: BLE001 - one model failing must not stop the run
                rows.append({"name": entry["name"], "group": entry["group"],
                             "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
            print(_table(rows[-1:]).splitlines()[1], flush=True)
            write_json(args.json, {"date": time.strftime("%Y-%m-%d %H:%M"),
                                   "budget": args.budget, "runs": args.runs,
                                   "database": used, "models": rows})
    print(_table(rows))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
