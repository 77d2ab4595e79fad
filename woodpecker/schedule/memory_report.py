"""`inspect --memory`: peak activation memory, arena size and off-chip traffic (Belady's
replacement, schedule/traffic.py) of the orders SERENITY compares (the file's, Kahn's, the
DP's, the DP's after rewriting), and the memory-over-time plot of thesis Fig. 3.12."""

from __future__ import annotations

import os
import time

from woodpecker.config import ARENA_EXACT_S
from woodpecker.errors import WoodpeckerError
from woodpecker.ir.graph import Graph
from woodpecker.schedule.arena import plan_arena
from woodpecker.schedule.memory import apply_order, format_bytes, schedule_memory
from woodpecker.schedule.problem import external_bytes, graph_problem
from woodpecker.schedule.traffic import l2_bytes, offchip_traffic

ORDERS = ("onnx", "kahn", "dp", "dp_rewrite")


def memory_report(graph: Graph) -> dict:
    """Per order: peak bytes, arena bytes, the bytes live at each step. `graph` is the model in
    its file order (as imported and optimised); it is not modified."""
    p = graph_problem(graph)
    caches = {"l2": l2_bytes(), "256k": 256 << 10}
    out: dict = {"orders": {}, **external_bytes(graph),
                 "cache_bytes": caches}
    for name in ORDERS:
        g = graph.copy()
        start = time.monotonic()
        extra: dict = {}
        if name == "kahn":
            apply_order(g, p.kahn())
        elif name in ("dp", "dp_rewrite"):
            result = schedule_memory(g, rewrite=name == "dp_rewrite")
            extra = {"optimal": result.report.optimal, "rewrites": result.rewrites,
                     "schedule_seconds": round(time.monotonic() - start, 3)}
        q = graph_problem(g)
        peak, timeline = q.simulate(list(range(q.n)))
        arena = plan_arena(g, exact_s=ARENA_EXACT_S if name.startswith("dp") else 0.0)
        out["orders"][name] = {"peak_bytes": peak, "arena_bytes": arena.size,
                               "lower_bound_bytes": arena.lower_bound, "nodes": q.n,
                               **{f"traffic_{label}_bytes": offchip_traffic(g, size).total
                                  for label, size in caches.items()},
                               **extra, "timeline_bytes": timeline}
    best = out["orders"]["dp_rewrite"]
    out.update(arena_bytes=best["arena_bytes"], lower_bound_bytes=best["lower_bound_bytes"],
               schedule_seconds=best["schedule_seconds"])
    return out


def format_report(doc: dict) -> str:
    onnx = doc["orders"]["onnx"]["peak_bytes"]
    caches = doc["cache_bytes"]
    lines = [f"{'order':<11} {'nodes':>6} {'peak':>11} {'arena':>11} {'vs file':>8} "
             f"{'traffic@L2':>11} {'traffic@256K':>12}  notes"]
    for name, r in doc["orders"].items():
        notes = []
        if "optimal" in r:
            notes.append("optimal" if r["optimal"] else "not proven optimal")
            notes.append(f"{r['schedule_seconds']:.2f}s")
        if r.get("rewrites"):
            notes.append(f"{r['rewrites']} concat rewrite(s)")
        lines.append(f"{name:<11} {r['nodes']:>6} {format_bytes(r['peak_bytes']):>11} "
                     f"{format_bytes(r['arena_bytes']):>11} {onnx / r['peak_bytes']:>7.2f}x "
                     f"{format_bytes(r['traffic_l2_bytes']):>11} "
                     f"{format_bytes(r['traffic_256k_bytes']):>12}  " + ", ".join(notes))
    lines.append(f"arena {format_bytes(doc['arena_bytes'])} vs live-bytes lower bound "
                 f"{format_bytes(doc['lower_bound_bytes'])}; graph inputs "
                 f"{format_bytes(doc['inputs_bytes'])} and weights "
                 f"{format_bytes(doc['weights_bytes'])} not counted; traffic: activation bytes "
                 f"moved to and from memory with a cache of {format_bytes(caches['l2'])} (this "
                 f"machine's L2) and 256 KiB, Belady's replacement")
    return "\n".join(lines)


def plot_report(doc: dict, path: "str | os.PathLike", title: str = "") -> None:
    """Live activation bytes over the steps of each order (PNG); needs matplotlib (the `plot`
    extra)."""
    try:
        import matplotlib
    except ImportError:
        raise WoodpeckerError("the memory plot needs matplotlib: pip install "
                              "'woodpecker[plot]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, r in doc["orders"].items():
        kib = [b / 1024 for b in r["timeline_bytes"]]
        ax.plot(range(len(kib)), kib, label=f"{name} (peak {format_bytes(r['peak_bytes'])})",
                linewidth=1.2)
    ax.set_xlabel("step (node executed)")
    ax.set_ylabel("live activations (KiB)")
    ax.set_title(title or "activation memory over time")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def show_report(graph: Graph, name: str, plot: str | None, json_path: str | None) -> dict:
    """`inspect --memory`'s output: the table printed, the plot (default: <name>_memory.png)
    and, with `json_path`, the report as JSON written; returns the report."""
    import json
    from pathlib import Path

    doc = memory_report(graph)
    print(format_report(doc))
    plot = plot or f"{name.removesuffix('.onnx')}_memory.png"
    plot_report(doc, plot, f"{name}: activation memory per order")
    print(f"wrote {plot}")
    if json_path:
        Path(json_path).write_text(json.dumps(doc, indent=1))
        print(f"wrote {json_path}")
    return doc
