"""AGO's intensive fusion (conv chains, attention) against ONNX Runtime on every zoo model: each
model is compiled with `passes.AGO`, its fused nodes run on generated kernels (each fused task's
first hand seed from a fresh tuning log; the other nodes on the numpy reference, so no library
computes a fused node), and the output on the model's seeded input is compared with ONNX
Runtime's. No timing.

    python benchmarks/fusion_outputs.py --json benchmarks/results/fusion_outputs_zen3.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import woodpecker
from woodpecker import zoo
from woodpecker.bench.compare import write_json
from woodpecker.engines.halide.templates import template_module
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.ops import INTENSIVE
from woodpecker.passes import AGO, optimize
from woodpecker.target import Target
from woodpecker.tune.extract import extract_tasks
from woodpecker.tune.records import TuningLog, TuningRecord

FUSED = ("convchain", "attention")


def check(name: str, tmp: Path) -> dict:
    import onnxruntime as ort

    path = str(zoo.export(name))
    graph = import_onnx(load_model_proto(path))
    optimize(graph, AGO)
    chains = [g for g in extract_tasks(graph) if g.task.kind in FUSED]
    row = {"model": name, "chain_tasks": len(chains),
           "chain_nodes": sum(len(g.nodes) for g in chains),
           "attention_nodes": sum(len(g.nodes) for g in chains if g.task.kind == "attention")}
    if not chains:
        return row
    log = TuningLog(tmp / f"{name}.jsonl", Target.parse("cpu").record_key)
    for g in chains:
        space = template_module(g.templates[0]).space(g.task)
        log.append(TuningRecord(g.task.key, g.templates[0], space.seeds[0], 1e-4))
    t0 = time.perf_counter()
    model = woodpecker.compile(path, engines="halide,numpy", passes=AGO, threads=2,
                               tuning_log=str(log.path), progress=open("/dev/null", "w"))
    on_halide = sum(1 for n in model.graph.nodes if n.op in INTENSIVE
                    and model.plan.choices[n.name].engine == "halide")
    x = zoo.model_input(name)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    got = model(x)
    row.update(on_halide=on_halide, compile_s=round(time.perf_counter() - t0, 1),
               max_rel_diff=float(np.abs(got - want).max() / np.abs(want).max()))
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(zoo.MODELS))
    p.add_argument("--json")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for m in args.models.split(","):
            rows.append(check(m, Path(d)))
            r = rows[-1]
            print(f"{m:<20} fused {r['chain_nodes']:>3} ({r['chain_tasks']} tasks, "
                  f"{r['attention_nodes']} attention)"
                  + (f", {r['on_halide']} on Halide, max rel diff {r['max_rel_diff']:.1e}"
                     if "max_rel_diff" in r else ""), flush=True)
    if args.json:
        write_json(args.json, {"models": rows})
    return 0 if all(r.get("max_rel_diff", 0) <= 1e-4 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
