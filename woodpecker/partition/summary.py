"""`inspect --partition`: AGO's partition of a plan's (or model's) graph — each subgraph, its
operators, weight, the engines and kernels its nodes run and their time — and a picture of the
partitioned graph (matplotlib): operators placed by topological stage, coloured by subgraph.

Contract: `partition_rows(graph, choices, ms)` gives one dict per subgraph; `format_rows` the
table; `plot_partition(graph, partition, path)` writes the PNG. `choices` maps node names to
(engine, kernel template or None); `ms` node names to profiled milliseconds (a node run inside
a multi-node library region has none)."""

from __future__ import annotations

from woodpecker.ir.graph import Graph
from woodpecker.partition.ago import (
    Partition,
    graph_edges,
    partition_graph,
    partition_stats,
    topological_stages,
)
from woodpecker.partition.weights import is_complex


def partition_rows(graph: Graph, choices: dict[str, tuple[str, str | None]],
                   ms: dict[str, float], partition: Partition | None = None) -> list[dict]:
    p = partition or partition_graph(graph)
    nodes = {n.name: n for n in graph.nodes}
    rows = []
    for i, s in enumerate(p.subgraphs):
        kernels = sorted({f"{choices[n][0]}" + (f":{choices[n][1]}"
                                                if choices[n][1] else "")
                          for n in s.nodes if n in choices})
        rows.append({"subgraph": i, "nodes": list(s.nodes),
                     "ops": [nodes[n].op for n in s.nodes], "weight": s.weight,
                     "complex": sum(is_complex(nodes[n]) for n in s.nodes),
                     "kernels": kernels,
                     "ms": sum(ms[n] for n in s.nodes if n in ms) if ms else None})
    return rows


def format_rows(rows: list[dict], partition: Partition) -> str:
    st = partition_stats(partition)
    out = [f"{st.subgraphs} subgraphs (threshold {partition.threshold:g}): mean weight "
           f"{st.mean_weight:.1f}, median {st.median_weight:.1f}, Jain's index {st.jain:.2f}",
           f"{'#':>3} {'weight':>7} {'ms':>7}  {'operators':<48} kernels"]
    for r in rows:
        ops = "+".join(r["ops"])
        ms = f"{r['ms']:7.3f}" if r["ms"] is not None else f"{'-':>7}"
        out.append(f"{r['subgraph']:>3} {r['weight']:7.1f} {ms}  {ops[:48]:<48} "
                   f"{', '.join(r['kernels'])}")
    return "\n".join(out)


def layout(graph: Graph) -> tuple[dict[str, tuple[int, int]], list[tuple[str, str]]]:
    """Each operator's place in the picture — (topological stage, row within the stage) — and
    the edges (`plot_partition`, and the report's SVG)."""
    names = [n.name for n in graph.nodes]
    succ: dict[str, set[str]] = {n: set() for n in names}
    edges = graph_edges(graph)
    for u, v in edges:
        succ[u].add(v)
    stage = topological_stages(names, succ)
    row: dict[int, int] = {}
    pos = {}
    for n in names:
        row[stage[n]] = row.get(stage[n], 0) + 1
        pos[n] = (stage[n], row[stage[n]])
    return pos, edges


def plot_partition(graph: Graph, partition: Partition, path: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pos, edges = layout(graph)
    names = list(pos)
    stage = {n: x for n, (x, _) in pos.items()}
    row: dict[int, int] = {}
    for x, y in pos.values():
        row[x] = max(row.get(x, 0), y)
    of = partition.of()
    cmap = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * max(stage.values())),
                                    max(3, 0.5 * max(row.values()))))
    for u, v in edges:
        (x0, y0), (x1, y1) = pos[u], pos[v]
        same = of[u] == of[v]
        ax.plot([x0, x1], [y0, y1], color=cmap(of[u] % 20) if same else "0.8",
                lw=2.0 if same else 0.6, zorder=1)
    for n in names:
        x, y = pos[n]
        ax.scatter([x], [y], s=60, color=cmap(of[n] % 20), edgecolor="k", lw=0.4, zorder=2)
    ax.set(xlabel="topological stage", ylabel="", title=title or
           f"{len(partition.subgraphs)} subgraphs (colours), edges inside a subgraph bold")
    ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
