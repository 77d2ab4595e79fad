"""SERENITY against the baselines people run (issue 33, deliverable 1): per irregular network and
per cell (DARTS and SwiftNet cells, RandWire stages), the activation footprint of

  (a) the ONNX file's order in TensorFlow Lite's arena (schedule/tflite_arena.py: the offsets
      TFLite's ArenaPlanner + SimpleMemoryArena give; the thesis's "simple memory arena"),
  (b) Kahn's order (FIFO; the thesis's "basic topological ordering") in the same arena,
  (c) ONNX Runtime's own peak, measured: a fresh process's resident-set high-water mark during
      its first run minus its resident set just before it (session built, input made, freed
      heap pages given back with malloc_trim and the mark reset; whole networks),
  (d) Woodpecker: SERENITY's order (the DP, with concat rewriting and the separable pairs it
      leaves fused where the peak allows, as `compile --schedule memory` does) in Woodpecker's
      arena (placed exactly where its greedy placements leave a gap: schedule/arena.py),

beside the most bytes live at once in (d)'s order and the proven floor on the least peak of any
order of the (unrewritten) graph. Graph inputs and weights are left out of every arena. For the
file's, Kahn's and (d)'s orders, the off-chip traffic of activations with this machine's L2 and
a 256 KiB cache under Belady's replacement (schedule/traffic.py).

    python benchmarks/memory_baselines.py --json benchmarks/results/memory_baselines_zen3.json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

from woodpecker import zoo
from woodpecker.bench.compare import write_json
from woodpecker.bench.runners import versions
from woodpecker.config import ARENA_EXACT_S
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.ir.graph import Graph
from woodpecker.passes import MEMORY, optimize
from woodpecker.schedule.arena import plan_arena
from woodpecker.schedule.memory import apply_order, format_bytes, schedule_memory
from woodpecker.schedule.memory_dp import least_peak_floor, memory_schedule
from woodpecker.schedule.problem import graph_problem
from woodpecker.schedule.tflite_arena import tflite_arena
from woodpecker.schedule.traffic import l2_bytes, offchip_traffic
from woodpecker.target import machine_facts

NETWORKS = ["darts_cifar", "swiftnet_vww", "randwire_cifar", "randwire_imagenet"]
MIN_CELL = 5     # nodes sharing a name prefix that count as a cell

_PEAK = """
import ctypes, sys, numpy as np
def status(key):
    return int(next(l for l in open('/proc/self/status') if l.startswith(key)).split()[1]) * 1024
rng = np.random.default_rng(0)
if sys.argv[1] == "onnx":
    import onnxruntime as ort
    so = ort.SessionOptions(); so.intra_op_num_threads = 2; so.inter_op_num_threads = 1
    s = ort.InferenceSession(sys.argv[2], so, providers=["CPUExecutionProvider"])
    kinds = {"tensor(float)": np.float32, "tensor(double)": np.float64,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
             "tensor(float16)": np.float16}
    feeds = {i.name: rng.standard_normal(i.shape).astype(kinds.get(i.type, np.float32))
             for i in s.get_inputs()}
    run = lambda: s.run(None, feeds)
else:
    import woodpecker
    m = woodpecker.load(sys.argv[2])
    feeds = {n: rng.standard_normal(shape).astype(dtype) for n, shape, dtype in m.inputs}
    run = lambda: m.run(feeds)
ctypes.CDLL("libc.so.6").malloc_trim(0)        # pages freed while building are given back
open('/proc/self/clear_refs', 'w').write('5')   # the high-water mark starts again from here
before = status('VmRSS')
run()
print(status('VmHWM') - before)
"""


def network(name: str) -> Graph:
    g = import_onnx(load_model_proto(str(zoo.export(name))))
    optimize(g, MEMORY)
    return g


def cells(g: Graph) -> dict[str, list[int]]:
    """Node indices per cell: the first component of the node names ('/cells.3/…' → cells.3);
    a node named otherwise joins the cell of the node that produced its first input."""
    owner: dict[int, str] = {}
    by_value = {}
    for i, n in enumerate(g.nodes):
        if n.name.startswith("/") and n.name.count("/") >= 2:
            owner[i] = n.name.split("/")[1]
        else:
            src = next((by_value[v.name] for v in n.inputs
                        if v is not None and v.name in by_value), None)
            owner[i] = owner.get(src, "") if src is not None else ""
        for v in n.outputs:
            by_value[v.name] = i
    groups: dict[str, list[int]] = {}
    for i, c in owner.items():
        groups.setdefault(c, []).append(i)
    return {c: idx for c, idx in groups.items() if c and len(idx) >= MIN_CELL}


def cell_graph(g: Graph, idx: list[int], name: str) -> Graph:
    """The cell as a graph of its own: what it reads from outside are its inputs, what is read
    outside it (or is a graph output) its outputs."""
    inside = {id(g.nodes[i]) for i in idx}
    c = Graph(name)
    c.opset = g.opset
    made = {v.name for i in idx for v in g.nodes[i].outputs}
    outputs = {v.name for v in g.outputs}
    for i in idx:
        n = g.nodes[i]
        for v in n.inputs:
            if v is None or v.name in c.values:
                continue
            c.values[v.name] = v
            if not v.is_const and v.name not in made:
                c.inputs.append(v)
        for v in n.outputs:
            c.values[v.name] = v
    for i in idx:
        n = g.nodes[i]
        c.nodes.append(n)
        for v in n.outputs:
            if v.name in outputs or any(id(r) not in inside for r in v.consumers):
                c.outputs.append(v)
    return c.copy()


def footprints(g: Graph, floor_seconds: float) -> dict:
    """(a), (b), (d), the live peak of (d)'s order and the proven floor, for graph `g`."""
    p = graph_problem(g)
    kahn = g.copy()
    apply_order(kahn, p.kahn())
    ours = g.copy()
    result = schedule_memory(ours, rewrite=True, fuse=True)   # as `compile` does
    base = memory_schedule(p)[1]
    floor = least_peak_floor(p, base, floor_seconds)
    arena = plan_arena(ours, exact_s=ARENA_EXACT_S)
    caches = {"l2": l2_bytes(), "256k": 256 << 10}
    traffic = {label: {order: offchip_traffic(h, size).total
                       for order, h in (("file", g), ("kahn", kahn), ("woodpecker", ours))}
               for label, size in caches.items()}
    return {"nodes": len(g.nodes), "traffic_bytes": traffic, "cache_bytes": caches,
            "tflite_file_bytes": tflite_arena(g).size,
            "tflite_kahn_bytes": tflite_arena(kahn).size,
            "woodpecker_arena_bytes": arena.size,
            "woodpecker_live_peak_bytes": arena.lower_bound,
            "schedule_optimal": result.report.optimal,
            "least_peak_floor_bytes": floor}


def first_run_peak(kind: str, path: "str | os.PathLike", runs: int = 1) -> int:
    """The resident-set growth over the first run of an ONNX file in ONNX Runtime (`kind`
    "onnx") or of a saved Woodpecker plan ("plan"), in a fresh process after loading, freed
    heap given back and the high-water mark reset: the least over `runs` processes."""
    return min(int(subprocess.run([sys.executable, "-c", _PEAK, kind, str(path)],
                                  capture_output=True, text=True, check=True,
                                  cwd=tempfile.gettempdir()).stdout.split()[-1])
               for _ in range(runs))


def ort_peak(model: "str | os.PathLike", runs: int = 1) -> int:
    """ONNX Runtime's first-run peak for the model file (the least over `runs` processes)."""
    return first_run_peak("onnx", model, runs)


def row(label: str, f: dict, ort: int | None = None) -> str:
    ours = f["woodpecker_arena_bytes"]
    return (f"{label:<26} {f['nodes']:>5} {format_bytes(f['tflite_file_bytes']):>10} "
            f"{format_bytes(f['tflite_kahn_bytes']):>10} "
            f"{format_bytes(ort) if ort is not None else '':>10} {format_bytes(ours):>10} "
            f"{format_bytes(f['least_peak_floor_bytes']):>10} "
            f"{f['tflite_file_bytes'] / ours:>7.2f}x {f['tflite_kahn_bytes'] / ours:>7.2f}x "
            f"{ours / f['least_peak_floor_bytes']:>8.3f}"
            + ("" if ort is None else f" {ort / ours:>7.2f}x"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    ap.add_argument("--floor-seconds", type=float, default=30.0,
                    help="seconds per part not proven optimal to prove a floor on its peak")
    args = ap.parse_args()
    doc = {"machine": machine_facts(),
           "versions": versions(), "networks": {}}
    print(f"{'network / cell':<26} {'nodes':>5} {'TFL file':>10} {'TFL kahn':>10} "
          f"{'ORT peak':>10} {'ours':>10} {'floor':>10} {'file/us':>8} {'kahn/us':>8} "
          f"{'us/floor':>8} {'ORT/us':>8}")
    for name in NETWORKS:
        g = network(name)
        f = footprints(g, args.floor_seconds)
        f["onnxruntime_peak_bytes"] = ort = ort_peak(zoo.export(name))
        f["cells"] = {}
        print(row(name, f, ort), flush=True)
        for cell, idx in cells(g).items():
            c = footprints(cell_graph(g, idx, f"{name}/{cell}"), args.floor_seconds)
            f["cells"][cell] = c
            print(row(f"  {cell}", c), flush=True)
        doc["networks"][name] = f
    print(f"\n{'off-chip traffic':<22} {'cache':>8} {'file':>10} {'kahn':>10} {'ours':>10}")
    for name, f in doc["networks"].items():
        for label, t in f["traffic_bytes"].items():
            print(f"{name:<22} {format_bytes(f['cache_bytes'][label]):>8} "
                  + " ".join(f"{format_bytes(t[k]):>10}" for k in ("file", "kahn", "woodpecker")))
    if args.json:
        write_json(args.json, doc)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
