"""Library regions over the user's own nodes against regions over Woodpecker's rewrite of them
(issue 50, engines/onnx_step.original_region).

Each model is compiled node by node with every node on ONNX Runtime (`--engines
onnxruntime,numpy`, library-first off: the plan a tuned compile starts its regions from), and
the same plan is built twice: its regions from the file's nodes (as compiles do now) and from
Woodpecker's nodes (as they did before). Both are timed paired and interleaved with ONNX
Runtime running the file, on one input; the table gives medians and each plan's paired ratio
to ONNX Runtime (under 1: faster).

    python benchmarks/original_regions.py --json benchmarks/results/original_regions_zen4.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import woodpecker  # noqa: E402
from benchmarks.realworld import input_shapes, load_manifest, make_inputs  # noqa: E402
from woodpecker import zoo  # noqa: E402
from woodpecker.assembly import reordered  # noqa: E402
from woodpecker.bench.compare import benchmark, random_feeds, write_json  # noqa: E402
from woodpecker.engines.names import ONNXRUNTIME  # noqa: E402
from woodpecker.runtime.compiled import CompiledModel  # noqa: E402

ZOO = ("mobilenet_v2", "resnet18", "shufflenet_v2_x1_0", "squeezenet1_1", "efficientnet_b0",
       "transformer_encoder")
SET = ("hf_distilbert", "timm_mixnet_s", "rapidocr_ppocrv4_det", "timm_ghostnet_100")
REWRITE = "regions of Woodpecker's nodes"
FILE = "regions of the file's nodes"


def _models(names: list[str] | None):
    entries = {e["name"]: e for e in load_manifest()["models"]} if any(
        n not in zoo.MODELS for n in names or SET) else {}
    for name in names or [*ZOO, *SET]:
        if name in zoo.MODELS:
            yield name, str(zoo.export(name)), None
        elif name in entries:
            yield name, entries[name]["abs_path"], entries[name]


def run_one(name: str, path: str, entry: dict | None, runs: int, threads: int) -> dict:
    compiled = woodpecker.compile(path, threads=threads, engines="onnxruntime,numpy",
                                  library_first=False,
                                  input_shapes=input_shapes(entry) if entry else None)
    plan = reordered(compiled.plan, range(len(compiled.graph.nodes)))
    plan.graph.source = None       # the regions made from Woodpecker's nodes, as before
    rewrite = CompiledModel(plan)
    feeds = make_inputs(entry, seed=1) if entry else random_feeds(compiled, seed=1)
    result = benchmark(compiled, Path(path).read_bytes(), [ONNXRUNTIME], runs=runs, warmup=3,
                       block=3, seed=1, variants={REWRITE: rewrite}, feeds=feeds)
    res, paired = result["results"], result["paired_speedup_vs"]
    regions = [s for s in compiled.steps if len(s) > 1]
    return {"name": name, "steps": len(compiled.steps), "regions": len(regions),
            "median_ms": {k: v["median_ms"] for k, v in res.items()},
            # each plan's time over ONNX Runtime's, paired per round
            "paired_vs_onnxruntime": {FILE: 1 / paired[ONNXRUNTIME],
                                      REWRITE: paired[REWRITE] / paired[ONNXRUNTIME]},
            "max_rel_diff_vs_ort": result["max_rel_diff"],
            "machine": result["machine"], "versions": result["versions"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", help="comma-separated zoo or real-world set names")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default="benchmarks/results/original_regions.json")
    args = p.parse_args()
    rows = []
    print(f"{'model':<24} {'regions':>7} {'ORT ms':>8} {'file ms':>8} {'rewrite ms':>10} "
          f"{'file/ORT':>8} {'rewrite/ORT':>11}")
    for name, path, entry in _models(args.models.split(",") if args.models else None):
        r = run_one(name, path, entry, args.runs, args.threads)
        rows.append(r)
        m, pr = r["median_ms"], r["paired_vs_onnxruntime"]
        print(f"{name:<24} {r['regions']:>7} {m[ONNXRUNTIME]:>8.3f} {m['woodpecker']:>8.3f} "
              f"{m[REWRITE]:>10.3f} {pr[FILE]:>8.3f} "
              f"{pr[REWRITE]:>11.3f}", flush=True)
        write_json(args.json, {"date": time.strftime("%Y-%m-%d %H:%M"), "runs": args.runs,
                               "models": rows})
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
