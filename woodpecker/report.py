"""`woodpecker report PLAN -o report.html`: one self-contained HTML page about a plan — no
external file, script or font, so it can be mailed or attached to an issue.

Sections: the plan (model, target, threads, schedule, digest); time by op type and by engine
(a library session's time split by its own profile's op types); each library step's own
per-op profile — ONNX Runtime's profiler, OpenVINO's performance counters, and its FLOPs from
its graph (bench/library_profile.py: a library-first plan is one session of the whole model);
the memory timeline (bytes live at each step against the arena); tuning curves per task from a
tuning log (best time so far against the measurements made); the parallel stages and AGO fusion
decisions where the plan has them; per node its engine, kernel and time (the table sorts by any
column). Charts are inline SVG drawn here (no plotting package needed); the only
script sorts the table and marks the page rendered (`data-rendered` on <body>).
"""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path
from typing import Any

from woodpecker.bench.library_profile import LibraryProfile, profile_library_steps, with_step_flops
from woodpecker.engines import names
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.schedule.arena import lifetimes
from woodpecker.selection.accuracy import PrecisionReport
from woodpecker.selection.compare import Decision
from woodpecker.tasks import spec_task, task_from_key
from woodpecker.version import __version__

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1180px;color:#1d2330}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #dde}
table{border-collapse:collapse;font-size:12.5px}td,th{padding:2px 8px;text-align:left}
th{background:#eef0f6;cursor:pointer;position:sticky;top:0}tr:nth-child(even){background:#f7f8fb}
td.n{text-align:right;font-variant-numeric:tabular-nums}.kv td:first-child{color:#667}
.small{display:inline-block;margin:4px 10px 10px 0;vertical-align:top;width:350px}
.chart{display:inline-block;margin:4px 24px 10px 0;vertical-align:top}
.title{font-size:12px;font-weight:600;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.tag{padding:0 5px;border-radius:3px;color:#fff;font-size:11px}
.scroll{max-height:560px;overflow:auto;border:1px solid #dde}
"""

_JS = """
document.querySelectorAll('table.sortable').forEach(function (t) {
  t.querySelectorAll('th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = t.tBodies[0], rows = Array.from(body.rows);
      var dir = th.dataset.dir === 'asc' ? -1 : 1; th.dataset.dir = dir > 0 ? 'asc' : 'desc';
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.v || a.cells[col].textContent;
        var y = b.cells[col].dataset.v || b.cells[col].textContent;
        var nx = parseFloat(x), ny = parseFloat(y);
        return dir * (isNaN(nx) || isNaN(ny) ? x.localeCompare(y) : nx - ny);
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
document.body.dataset.rendered = '1';
"""

CURVES = 12    # tuning curves drawn at most

COLORS = {names.HALIDE: "#2a7de1", names.ONNXRUNTIME: "#7a4fd0", names.TORCH: "#e0622a",
          names.OPENVINO: "#1f9e89", names.NUMPY: "#6b7788"}


def _e(x: Any) -> str:
    return html.escape(str(x))


def _color(engine: str) -> str:
    return COLORS.get(engine, "#999")


def build_report(model: CompiledModel, tuning_log: "str | Path | None" = None,
                 runs: int = 20, digest: str | None = None) -> str:
    """The report's HTML for `model` (each step profiled over `runs` runs; 0: no times)."""
    from woodpecker.bench.compare import random_feeds

    plan = model.plan
    rows = model.node_table()
    steps = model.steps
    ms = model.profile(random_feeds(model), runs) if runs > 0 else [0.0] * len(steps)
    profiles = profile_library_steps(model, runs)
    with_step_flops(profiles, steps, rows)
    for k, (step, t) in enumerate(zip(steps, ms)):
        for i in step:
            rows[i]["step"], rows[i]["step_ms"], rows[i]["step_size"] = k, t, len(step)
            spec = plan.choices[rows[i]["name"]].kernel
            rows[i]["kernel"] = spec.template if spec is not None else ""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Woodpecker report: "
             f"{_e(model.graph.name)}</title><style>{_CSS}</style></head><body>",
             f"<h1>Woodpecker plan report — {_e(model.graph.name)}</h1>",
             _summary(model, ms, digest), _by_type(rows, steps, ms, profiles),
             _library(profiles), _memory(model),
             _tuning(plan, tuning_log), _partition(model), _decisions(plan), _nodes(rows),
             f"<script>{_JS}</script></body></html>"]
    return "\n".join(parts)


def _summary(model: CompiledModel, ms: list[float], digest: str | None) -> str:
    plan, t = model.plan, model.plan.target
    items = [("Woodpecker", __version__), ("target", f"{t.cpu} ({t.arch}; "
                                                   f"{', '.join(t.isa) or 'no vector ISA'})"),
             ("threads", t.threads), ("nodes / steps", f"{len(model.graph.nodes)} / "
                                                      f"{len(model.steps)}"),
             ("schedule", plan.schedule.kind.value), ("precision", _precision(plan)),
             ("arena", f"{plan.arena.size / 1024:.1f} KiB" if plan.arena else "none"),
             ("profiled time", f"{sum(ms):.3f} ms per run (sum of steps)"),
             ("generated FLOPs share", f"{model.generated_flops_share():.1%}")]
    if digest:
        items.append(("plan digest", digest))
    body = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in items)
    return f"<h2>Plan</h2><table class='kv'>{body}</table>"


def _precision(plan) -> str:
    """The plan's precision, with the accuracy its compile measured against float32."""
    recorded = plan.meta.get("precision")
    worst = PrecisionReport.from_json(recorded).worst() if recorded else None
    if worst is None:
        return plan.precision.value
    return (f"{plan.precision.value} (against ONNX Runtime float32: SQNR {worst.sqnr_db:.1f} "
            f"dB, largest difference {worst.max_rel_diff:.2g} of the output's range)")


def _nodes(rows: list[dict]) -> str:
    head = ["#", "node", "op", "engine", "kernel", "output", "MFLOPs", "step", "ms"]
    out = ["<h2>Nodes</h2><p>Click a column to sort. A region's or stage's nodes share one "
           "step's time.</p><div class='scroll'><table class='sortable'><thead><tr>" +
           "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    for i, r in enumerate(rows):
        op = "+".join(r["program"]) if r["program"] else \
            "+".join(r["prologue"] + [r["op"]] + r["epilogue"])
        shape = "x".join(map(str, r["outputs"][0])) if r["outputs"] else ""
        t = r.get("step_ms", 0.0) if r.get("step_size", 1) == 1 else None
        out.append(
            f"<tr><td class='n'>{i}</td><td>{_e(r['name'])}</td><td>{_e(op)}</td>"
            f"<td><span class='tag' style='background:{_color(r['engine'])}'>"
            f"{_e(r['engine'])}</span></td><td>{_e(r.get('kernel', ''))}</td>"
            f"<td>{_e(shape)}</td><td class='n'>{r['flops'] / 1e6:.2f}</td>"
            f"<td class='n'>{r.get('step', '')}</td>"
            f"<td class='n' data-v='{r.get('step_ms', 0.0):.6f}'>"
            f"{'' if t is None else f'{t:.3f}'}</td></tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _bars(items: list[tuple[str, float, str]], unit: str, width: int = 560) -> str:
    """A horizontal bar chart (label, value, colour) as inline SVG."""
    if not items:
        return "<p>(nothing to show)</p>"
    top = max(v for _, v, _ in items) or 1.0
    h = 20 * len(items) + 10
    rows = []
    for k, (label, v, color) in enumerate(items):
        w = max(1.0, (width - 260) * v / top)
        y = 5 + 20 * k
        rows.append(f"<text x='0' y='{y + 13}' font-size='12'>{_e(label[:30])}</text>"
                    f"<rect x='200' y='{y}' width='{w:.1f}' height='15' fill='{color}'/>"
                    f"<text x='{205 + w:.1f}' y='{y + 13}' font-size='11'>{v:.3f} {unit}</text>")
    return f"<svg width='{width}' height='{h}' role='img'>{''.join(rows)}</svg>"


def _by_type(rows: list[dict], steps: list[list[int]], ms: list[float],
             profiles: list[LibraryProfile]) -> str:
    by_op: dict[str, float] = defaultdict(float)
    by_engine: dict[str, float] = defaultdict(float)
    profiled = {p.step: p for p in profiles if p.rows}
    for k, (step, t) in enumerate(zip(steps, ms)):
        by_engine[rows[step[0]]["engine"]] += t
        if k in profiled:            # a library session's time split as its profile splits it
            for r in profiled[k].rows:
                by_op[r.op_type] += t * r.share
            continue
        for i in step:               # a region's time split evenly among its nodes
            by_op[rows[i]["op"]] += t / len(step)
    ops = sorted(by_op.items(), key=lambda kv: -kv[1])
    engines = sorted(by_engine.items(), key=lambda kv: -kv[1])
    return ("<h2>Time by op type and by engine</h2><div class='chart'>" +
            _bars([(k, v, "#4b8bbe") for k, v in ops], "ms") + "</div><div class='chart'>" +
            _bars([(k, v, _color(k)) for k, v in engines], "ms") + "</div>")


def _library(profiles: list[LibraryProfile]) -> str:
    """Each library step's own per-op profile (bench/library_profile.py)."""
    if not profiles:
        return ""
    out = ["<h2>Library steps</h2><p>Each ONNX Runtime or OpenVINO session of the plan, "
           "profiled by its library (op types as the library names them after its own graph "
           "optimisations; the profiler's times, for the split between op types).</p>"]
    for p in profiles:
        out.append(f"<p>{_e(p.said())}</p>")
        if not p.rows:
            continue
        out.append("<table class='sortable'><thead><tr><th>op type</th><th>count</th>"
                   "<th>ms per run</th><th>% of the step</th><th>kernels</th></tr></thead><tbody>"
                   + "".join(f"<tr><td>{_e(r.op_type)}</td><td class='n'>{r.count}</td>"
                             f"<td class='n'>{r.ms:.3f}</td><td class='n'>{r.share:.1%}</td>"
                             f"<td>{_e(', '.join(r.kernels))}</td></tr>" for r in p.rows)
                   + "</tbody></table>")
    return "".join(out)


def _curve(costs: list[float], width: int = 340, height: int = 110) -> str:
    """Best time so far (ms) against measurements, as an inline SVG polyline."""
    best, pts = float("inf"), []
    for c in costs:
        best = min(best, c)
        pts.append(best * 1e3)
    lo, hi = min(pts), max(pts)
    span = (hi - lo) or 1.0
    n = max(len(pts) - 1, 1)
    xy = " ".join(f"{30 + (width - 40) * k / n:.1f},{10 + (height - 30) * (hi - p) / span:.1f}"
                  for k, p in enumerate(pts))
    return (f"<svg width='{width}' height='{height}'><polyline points='{xy}' fill='none' "
            f"stroke='#2a7de1' stroke-width='1.6'/><text x='30' y='{height - 4}' "
            f"font-size='10'>{len(pts)} measured; best {lo:.4f} ms, first {pts[0]:.4f} ms"
            f"</text></svg>")


def _tuning(plan, tuning_log: "str | Path | None") -> str:
    if tuning_log is None:
        return ("<h2>Tuning</h2><p>No tuning log given (<code>--tuning-log</code>) — the "
                "curves of each task's search are drawn from one.</p>")
    from woodpecker.tune.records import TuningLog

    log = TuningLog(tuning_log)
    used = set()
    for choice in plan.choices.values():
        if choice.kernel is not None:
            try:
                used.add(spec_task(choice.kernel.to_json()).key)
            except (ValueError, KeyError, TypeError):
                continue
    costs: dict[str, list[float]] = defaultdict(list)
    for r in log.records:
        if r.cost_s:
            costs[r.task].append(r.cost_s)
    keys = [k for k in costs if k in used] or list(costs)
    keys = sorted(keys, key=lambda k: -len(costs[k]))[:CURVES]
    figs = "".join(f"<div class='small'><div class='title'>{_e(_describe(k))}</div>"
                   f"{_curve(costs[k])}</div>" for k in keys)
    return (f"<h2>Tuning curves</h2><p>{len(log.records)} records in {_e(tuning_log)}; the "
            f"{len(keys)} most searched of the plan's kernels' tasks (best time so far against "
            f"the measurements).</p>" + (figs or "<p>(no valid records)</p>"))


def _describe(key: str) -> str:
    try:
        return task_from_key(key).describe()
    except (ValueError, KeyError, TypeError):
        return key[:60]


def _memory(model: CompiledModel) -> str:
    plan = model.plan
    life = lifetimes(model.graph, model.steps, plan.arena.aliases if plan.arena else None,
                     plan.every)
    n = len(model.steps)
    live = [0] * max(n + 1, 1)
    for _, size, first, last in life:
        for k in range(first, min(last, n) + 1):
            live[k] += size
    top = max(max(live), plan.arena.size if plan.arena else 0, 1)
    width, height = 900, 180
    step = (width - 60) / max(len(live) - 1, 1)
    xy = " ".join(f"{50 + k * step:.1f},{height - 20 - (height - 40) * v / top:.1f}"
                  for k, v in enumerate(live))
    arena = ""
    if plan.arena is not None:
        y = height - 20 - (height - 40) * plan.arena.size / top
        arena = (f"<line x1='50' x2='{width - 10}' y1='{y:.1f}' y2='{y:.1f}' stroke='#e0622a' "
                 f"stroke-dasharray='4 3'/><text x='{width - 200}' y='{y - 4:.1f}' "
                 f"font-size='11'>arena {plan.arena.size / 1024:.1f} KiB</text>")
    return (f"<h2>Memory timeline</h2><p>Activation bytes live at each step (peak "
            f"{max(live) / 1024:.1f} KiB) against the arena.</p><svg width='{width}' "
            f"height='{height}'><polyline points='{xy}' fill='none' stroke='#2a7de1' "
            f"stroke-width='1.5'/>{arena}<text x='50' y='{height - 4}' font-size='10'>step 0"
            f"</text><text x='{width - 60}' y='{height - 4}' font-size='10'>step {n - 1}</text>"
            "</svg>")


PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")


def _partition(model: CompiledModel) -> str:
    """AGO's partition of the plan's graph (partition/): operators by topological stage,
    coloured by subgraph, edges inside a subgraph drawn bold; a parallel stage's operators
    ringed in black."""
    from woodpecker.partition.ago import partition_graph
    from woodpecker.partition.summary import layout

    graph = model.graph
    p = partition_graph(graph)
    of = p.of()
    pos, edges = layout(graph)
    staged = {graph.nodes[i].name for s in model.plan.stages() for i in s}
    sx = 18 if len(pos) < 150 else 12
    width = 40 + sx * max(x for x, _ in pos.values())
    height = 30 + 16 * max(y for _, y in pos.values())

    def xy(n):
        x, y = pos[n]
        return 20 + sx * (x - 1), 15 + 16 * (y - 1)

    parts = []
    for u, v in edges:
        (x0, y0), (x1, y1) = xy(u), xy(v)
        same = of[u] == of[v]
        color = PALETTE[of[u] % len(PALETTE)] if same else "#ccc"
        parts.append(f"<line x1='{x0}' y1='{y0}' x2='{x1}' y2='{y1}' stroke='{color}' "
                     f"stroke-width='{2 if same else 0.7}'/>")
    for n in pos:
        x, y = xy(n)
        ring = "#000" if n in staged else "#fff"
        parts.append(f"<circle cx='{x}' cy='{y}' r='5' fill='{PALETTE[of[n] % len(PALETTE)]}' "
                     f"stroke='{ring}'><title>{_e(n)}</title></circle>")
    return (f"<h2>Partition</h2><p>AGO's partition of the plan's graph: "
            f"{len(p.subgraphs)} subgraphs of {len(pos)} operators (colours; bold edges inside "
            f"a subgraph), by topological stage left to right"
            f"{'; parallel stages ringed' if staged else ''}. Hover an operator for its name."
            f"</p><div class='scroll'><svg width='{width}' height='{height}'>{''.join(parts)}"
            f"</svg></div>")


def _decisions(plan) -> str:
    out = []
    parallel = plan.meta.get("parallel") or {}
    if parallel.get("stages"):
        kept = "kept" if parallel.get("kept") else "not kept (the sequential plan was faster)"
        items = "".join(f"<li>{_e(s.get('strategy', ''))}: {_e(', '.join(s['nodes']))} — "
                        f"{s.get('ms', 0):.3f} ms together, {s.get('apart_ms', 0):.3f} in turn"
                        "</li>" for s in parallel["stages"])
        out.append(f"<h2>Parallel stages (DOS)</h2><p>Schedule {kept}.</p><ul>{items}</ul>")
    fusion = plan.meta.get("fusion") or []
    if fusion:
        items = "".join(f"<li>{_e(f['node'])} ({_e(f['op'])}): "
                        f"{'kept fused' if f['fused'] else 'run apart'}</li>" for f in fusion)
        check = plan.meta.get("fusion_check")
        said = "" if not check else (
            f"<p>Whole plan with its {len(check['nodes'])} generated fusion(s): "
            f"{_e(Decision.said(check))}.</p>")
        out.append(f"<h2>AGO fusions</h2><ul>{items}</ul>{said}")
    return "".join(out)
