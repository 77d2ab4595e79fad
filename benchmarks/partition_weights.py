"""Fit AGO Eq. (1)'s constants to the tuning effort measured on this machine.

For each zoo model with a 15-minute `ga` tuning log (default: benchmarks/results/fresh15m), each
task and template in the log: the effort is the number of measurements until the best came
within 5 % of that template's final best (AGO §IV-A: "the total number of explored schedules
to obtain stable performance"). The task's operators (the graph nodes it stands for; a
separable conv is two) give Σ Π log(s_l) and the operator count n, and least squares fits

    effort ≈ c × Σ_v Π_{l ∈ L_v} log(s_l) + b × n                 (Eq. 1 summed over the ops)

Prints c, b, R² and the data; writes JSON. The constants go to `config.WEIGHT_SLOPE` /
`config.WEIGHT_BIAS` by hand, with the numbers.

    python benchmarks/partition_weights.py --json benchmarks/results/partition_weights_zen3.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

from woodpecker import zoo
from woodpecker.bench.compare import write_json
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.partition.weights import COMPOSITE, complexity, composite_parts
from woodpecker.passes import DEFAULT, optimize
from woodpecker.target import machine_facts
from woodpecker.tune.extract import extract_tasks

ROOT = Path(__file__).resolve().parent.parent

STABLE = 0.95


def efforts(log: Path) -> dict[tuple[str, str], tuple[int, int]]:
    """(task, template) -> (measurements to within 5 % of the final best, measurements)."""
    costs: dict[tuple[str, str], list[float | None]] = {}
    opener = gzip.open if log.suffix == ".gz" else open
    for line in opener(log, "rt"):
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        costs.setdefault((r["task"], r["template"]), []).append(r.get("cost_s"))
    out = {}
    for key, cs in costs.items():
        valid = [c for c in cs if c]
        if not valid:
            continue
        final = min(valid)
        out[key] = (next(i + 1 for i, c in enumerate(cs) if c and c * STABLE <= final), len(cs))
    return out


def node_terms(node) -> tuple[float, int]:
    """(Σ Π log s over the node's loop nests, how many operators)."""
    if node.op in COMPOSITE:
        parts = composite_parts(node)
        return sum(complexity(p) for p in parts), len(parts)
    return complexity(node), 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", default=str(ROOT / "benchmarks/results/fresh15m"))
    ap.add_argument("--json", help="write the fit and its data here")
    args = ap.parse_args(argv)
    rows = []
    for log in sorted(Path(args.logs).glob("tuning_*.jsonl*")):
        model = log.name.split(".")[0].removeprefix("tuning_")
        if model not in zoo.MODELS:
            continue
        graph = import_onnx(load_model_proto(str(zoo.export(model))))
        optimize(graph, DEFAULT)
        nodes = {n.name: n for n in graph.nodes}
        tasks = {g.task.key: nodes[g.nodes[0]] for g in extract_tasks(graph)}
        for (task, template), (effort, n) in efforts(log).items():
            if task not in tasks:
                continue
            x, ops = node_terms(tasks[task])
            rows.append({"model": model, "task": task, "template": template.rsplit(".", 1)[-1],
                         "effort": effort, "measured": n, "complexity": x, "ops": ops})
    if len(rows) < 3:
        print(f"only {len(rows)} (task, template) pairs matched: nothing to fit", file=sys.stderr)
        return 1
    a = np.array([[r["complexity"], r["ops"]] for r in rows])
    y = np.array([r["effort"] for r in rows], dtype=float)
    (c, b), *_ = np.linalg.lstsq(a, y, rcond=None)
    pred = a @ np.array([c, b])
    r2 = 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    corr = float(np.corrcoef(a[:, 0] / a[:, 1], y / a[:, 1])[0, 1])
    print(f"{len(rows)} (task, template) pairs from {len({r['model'] for r in rows})} models")
    print(f"effort ≈ {c:.4f} × Σ Π log(s) + {b:.2f} × ops    R² {r2:.3f}  "
          f"(per-op correlation {corr:.3f}); effort median {np.median(y):.0f}, "
          f"max {y.max():.0f}")
    by_template: dict[str, list[float]] = {}
    for r in rows:
        by_template.setdefault(r["template"], []).append(r["effort"])
    for t, es in sorted(by_template.items()):
        print(f"  {t:<22} {len(es):4d} pairs, effort median {np.median(es):5.1f}")
    if args.json:
        write_json(args.json, {
            "machine": machine_facts(), "logs": args.logs,
            "stable": STABLE, "slope": float(c), "bias": float(b), "r2": float(r2),
            "pairs": len(rows), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
