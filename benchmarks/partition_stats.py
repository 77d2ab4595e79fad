"""AGO's partition statistics (AGO §IV, as its table of subgraphs): for every zoo model, the
partition of Algorithm 1 (partition/ago.py, threshold `config.PARTITION_THRESHOLD`, weights of
Eq. (1)) against one operator per subgraph — how many subgraphs, their mean and median weight,
Jain's fairness index — and whether the partition's quotient graph is acyclic. No timing: the
numbers do not depend on the machine's load.

    python benchmarks/partition_stats.py --json benchmarks/results/partition_stats.json
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from woodpecker import zoo
from woodpecker.bench.compare import write_json
from woodpecker.config import PARTITION_THRESHOLD, WEIGHT_BIAS, WEIGHT_SLOPE
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.partition.ago import (
    graph_edges,
    is_acyclic_partition,
    partition_graph,
    partition_stats,
    singletons,
)
from woodpecker.partition.weights import is_complex
from woodpecker.passes import DEFAULT, optimize


def model_stats(name: str, threshold: float) -> dict:
    graph = import_onnx(load_model_proto(str(zoo.export(name))))
    optimize(graph, DEFAULT)
    p = partition_graph(graph, threshold)
    nodes = {n.name: n for n in graph.nodes}
    acyclic = is_acyclic_partition(list(nodes), graph_edges(graph),
                                   [s.nodes for s in p.subgraphs])
    multi = [s for s in p.subgraphs if sum(is_complex(nodes[n]) for n in s.nodes) >= 2]
    return {"model": name, "nodes": len(graph.nodes), "acyclic": acyclic,
            "ops": asdict(partition_stats(singletons(graph))),
            "ago": asdict(partition_stats(p)),
            "with_two_complex": len(multi)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(zoo.MODELS))
    ap.add_argument("--threshold", type=float, default=PARTITION_THRESHOLD)
    ap.add_argument("--json", help="write the table here")
    args = ap.parse_args(argv)
    rows = [model_stats(m, args.threshold) for m in args.models.split(",")]
    head = (f"{'model':<20} {'nodes':>5} | {'subgraphs':>9} {'mean w':>7} {'median':>7} "
            f"{'Jain':>5} | {'AGO':>5} {'mean w':>7} {'median':>7} {'Jain':>5} {'2+cx':>4} acyclic")
    print(f"threshold {args.threshold:g}, weight = {WEIGHT_SLOPE:g} × Π log s + {WEIGHT_BIAS:g}")
    print(head)
    for r in rows:
        o, a = r["ops"], r["ago"]
        print(f"{r['model']:<20} {r['nodes']:>5} | {o['subgraphs']:>9} {o['mean_weight']:>7.1f} "
              f"{o['median_weight']:>7.1f} {o['jain']:>5.2f} | {a['subgraphs']:>5} "
              f"{a['mean_weight']:>7.1f} {a['median_weight']:>7.1f} {a['jain']:>5.2f} "
              f"{r['with_two_complex']:>4} {r['acyclic']}")
    if args.json:
        write_json(args.json, {"threshold": args.threshold, "slope": WEIGHT_SLOPE,
                               "bias": WEIGHT_BIAS, "models": rows})
    return 0 if all(r["acyclic"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
