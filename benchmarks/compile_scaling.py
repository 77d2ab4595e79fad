"""Untuned compile time against graph size (issue 76: compile time linear in the graph; a
10,000-node model and a 3,000-node transformer compile untuned in ≤ 60 s on 2 cores).

    python benchmarks/compile_scaling.py --json benchmarks/results/compile_scaling_zen5.json

Graphs: a chain of n Relus on (1, 64); a wide graph of n Relu branches of one input summed
pairwise (n-1 Adds); nn.TransformerEncoder exported by torch with L layers (d_model 64, 2
heads, FF 128, 32 tokens), when torch is installed. Each compile runs in a fresh process
(`woodpecker compile`, default options: library-first, ONNX Runtime and OpenVINO), timed
wall-clock; the plan's per-stage seconds (plan.meta["stages_s"], tuned compiles only; the
library-first comparison's seconds for every compile) and nodes are read back.
Timings: one run per graph (a compile is seconds to a minute; the scaling, not the last
percent, is the question) — the ratio of times at n and 3n says whether a stage grows
faster than the graph.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from woodpecker.bench.compare import write_json
from woodpecker.bench.runners import versions
from woodpecker.target import machine_facts


def chain(n: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"r{i}") for i in range(n)]
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [1, 64])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def wide(n: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], [f"b{i}"], name=f"r{i}") for i in range(n)]
    level = [f"b{i}" for i in range(n)]
    k = 0
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[::2], level[1::2]):
            nodes.append(helper.make_node("Add", [a, b], [f"s{k}"], name=f"a{k}"))
            nxt.append(f"s{k}")
            k += 1
        level = nxt + ([level[-1]] if len(level) % 2 else [])
    g = helper.make_graph(nodes, "wide",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info(level[0], TensorProto.FLOAT, [1, 64])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def transformer(layers: int, path: Path) -> Path:
    import torch

    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(64, 2, 128, batch_first=True, dropout=0.0), layers,
        enable_nested_tensor=False).eval()
    torch.onnx.export(enc, (torch.randn(1, 32, 64),), str(path), input_names=["input"],
                      output_names=["output"], dynamo=False, opset_version=17)
    return path


def compile_once(path: Path, out: Path) -> dict:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "woodpecker.cli", "compile", str(path), "-o",
                           str(out), "--force"], capture_output=True, text=True)
    wall = time.perf_counter() - t
    row = {"wall_s": round(wall, 2), "rc": done.returncode,
           "said": (done.stdout + done.stderr).strip().splitlines()[-3:]}
    if done.returncode == 0:
        doc = json.loads((out / "plan.json").read_text())
        row["stages_s"] = doc["model"].get("stages_s")
        # the libraries' sessions built and timed (library-first); the rest is import,
        # passes, selection and saving
        row["library_first_s"] = (doc["model"].get("library_first") or {}).get("seconds")
        row["plan_nodes"] = len(doc["nodes"])
        row["plan_engines"] = sorted({c["engine"] for c in doc["choices"].values()})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,3000,10000")
    ap.add_argument("--layers", default="11,34")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        graphs = []
        for n in (int(s) for s in args.sizes.split(",")):
            for name, make in (("chain", chain), ("wide", wide)):
                path = root / f"{name}{n}.onnx"
                onnx.save(make(n), path)
                graphs.append((name, path))
        try:
            for layers in (int(s) for s in args.layers.split(",") if s):
                graphs.append(("transformer", transformer(layers, root / f"tf{layers}.onnx")))
        except ImportError:
            print("no torch: transformers left out")
        for kind, path in graphs:
            nodes = len(onnx.load(path).graph.node)
            row = {"graph": kind, "file": path.name, "nodes": nodes,
                   **compile_once(path, root / "plan.wpk")}
            rows.append(row)
            print(f"{kind:12s} {nodes:6d} nodes  {row['wall_s']:7.2f} s  rc {row['rc']}  "
                  f"{row.get('plan_engines', '')}")
    if args.json:
        write_json(args.json, {"machine": machine_facts(), "versions": versions(),
                               "runs": rows})


if __name__ == "__main__":
    main()
