"""Searchers compared on the same tasks at the same measurement budget (issue: sample-efficient
tuning): best cost against measurements and against wall seconds, measurements to reach 95 %
of the best any run found, and the share of invalid candidates measured — for every searcher ×
seed, from an empty log, from a log holding other models' records (transfer) and, for the
searchers named by `--hidden`, with the templates' constraints hidden from the searcher (hidden:
a candidate breaking one is refused, measured invalid — the invalid configurations AutoTVM-style
spaces are full of, which the knob spaces here exclude by construction).

Tasks: (task, template) pairs, each the heaviest task of its model computed by that template
(direct, GEMM and Winograd convs, depthwise, separable, dense, rows, pool, element-wise) over
five zoo models.

Measurements are real — built in a pool of processes, one per core, then timed in the isolated
worker paired with the pair's reference config (its template's first seed), as tuning does —
and shared: a memo (`--memo`, JSON lines) keeps each (task, template, config)'s cost, compile
and timing seconds, so a config any run asks for is built and timed once, every run that asks
for it again gets the same number, and an interrupted benchmark resumes where it stopped.
Since a memo hit costs no time, a run's wall seconds are simulated: for each measurement its
recorded compile seconds over the build workers plus its timing seconds, plus the searcher's
own time (model fitting, exploration), measured live.

    python benchmarks/search_compare.py --budget 150 --seeds 3 \
        --transfer-log /path/other_models.jsonl --hidden ga,random,xgb,glimpse \
        --json benchmarks/results/search_compare.json

`--database shipped` (or a file from benchmarks/tuning_database.py, e.g. one without this
machine's records) adds the database scenario: an empty log joined by the tuning database minus
the benchmark's own tasks (with `--unseen-models`, every task of their models), so the
searchers learn only about tasks they have not seen; the model-based searchers take each
task's first batch from the cost model pre-trained on it (tune/pretrained.py). The
database-fit scenario is the same log with that off (`pretrained=False`: a per-task fit on the
transfer sample from the first batch).

The committed Zen 3 run resumes with `--memo benchmarks/results/search_memo_zen3.jsonl --json
benchmarks/results/search_compare_zen3.json --transfer-log
benchmarks/results/search_transfer_zen3.jsonl` (its runs: `<json>.runs.jsonl`); the committed
logs are gzip-compressed (`.jsonl.gz`, to keep the repository small enough to travel to a GPU
machine): gunzip the memo and runs first to resume them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from woodpecker import zoo
from woodpecker.bench.compare import write_json
from woodpecker.bench.runners import versions
from woodpecker.engines.halide.host import host_vector_registers
from woodpecker.engines.halide.templates import template_module
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.passes import DEFAULT, optimize
from woodpecker.target import Target, machine_facts
from woodpecker.tasks.space import KnobSpace
from woodpecker.tune.build_pool import BuildPool
from woodpecker.tune.context import TuningContext
from woodpecker.tune.database import PACKAGED, load_database
from woodpecker.tune.extract import extract_tasks
from woodpecker.tune.measure import Measurer
from woodpecker.tune.records import TuningLog, TuningRecord
from woodpecker.tune.searchers import SEARCHERS, make_searcher, prepare
from woodpecker.tune.searchers.model_based import is_model_based

H = ""   # templates are named by their short identity (engines/halide/templates.py)
PAIRS = [("resnet18", "conv_direct"), ("resnet18", "conv_winograd"), ("resnet18", "conv_gemm"),
         ("mobilenet_v2", "conv_depthwise"), ("mobilenet_v2", "conv_separable"),
         ("mobilenet_v2", "conv_gemm"), ("shufflenet_v2_x1_0", "conv_separable"),
         ("shufflenet_v2_x1_0", "pool"), ("transformer_encoder", "dense"),
         ("transformer_encoder", "rows"), ("darts_cifar", "elementwise")]
REACH = 0.95
FIT = "database-fit"      # the database scenario without the pre-trained first batch


def pick_tasks(pairs) -> list[dict]:
    """Per (model, template): the model's task with the most work that the template computes."""
    out, graphs = [], {}
    for model, short in pairs:
        if model not in graphs:
            g = import_onnx(load_model_proto(str(zoo.export(model))))
            optimize(g, DEFAULT)
            graphs[model] = extract_tasks(g)
        groups = [g for g in graphs[model] if H + short in g.templates]
        if not groups:
            raise SystemExit(f"{model} has no task for template {short}")
        g = max(groups, key=lambda g: g.task.flops * len(g.nodes))
        out.append({"model": model, "template": H + short, "task": g.task,
                    "name": f"{model}/{short}",
                    "model_tasks": {x.task.key for x in graphs[model]}})
    return out


class Memo:
    """Shared measurements: (task, template, config) → cost, error, compile_s, time_s."""

    def __init__(self, path: Path, measurer: Measurer, pool: BuildPool | None,
                 workers: int) -> None:
        self.path, self.measurer, self.pool, self.workers = path, measurer, pool, workers
        self.rows: dict[tuple, dict] = {}
        self.new = 0
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    r = json.loads(line)
                    self.rows[(r["task"], r["template"], r["key"])] = r
                except (ValueError, KeyError):
                    continue

    def _ref(self, task, template) -> TuningRecord:
        """The pair's reference: its template's first seed, else its first valid config."""
        space = template_module(template).space(
            task, host_vector_registers(Target.parse("cpu").isa))
        return TuningRecord(task.key, template,
                            space.seeds[0] if space.seeds else next(space.valid_configs()))

    def get(self, task, template, configs: list[dict]) -> list[dict]:
        keys = [(task.key, template, KnobSpace.key(c)) for c in configs]
        ref = self._ref(task, template)
        ref_key = (task.key, template, ref.key)
        if ref_key not in self.rows:
            m = self.measurer.measure(template, task, dict(ref.config))
            self._add(ref_key, m.cost_s, m.error, m.compile_s, m.cost_s or 0.0)
        fresh = [(k, c) for k, c in zip(keys, configs) if k not in self.rows]
        fresh = list({k: (k, c) for k, c in fresh}.values())
        for i in range(0, len(fresh), self.workers):
            chunk = fresh[i:i + self.workers]
            built = self.pool.build(task, template, [c for _, c in chunk]) if self.pool \
                else [None] * len(chunk)
            for (k, c), b in zip(chunk, built):
                if b is not None and b.error:
                    self._add(k, None, b.error, b.compile_s, 0.0)
                    continue
                t0 = time.perf_counter()
                m = self.measurer.measure(template, task, c, ref)
                took = time.perf_counter() - t0
                base = self.rows[ref_key]["cost_s"]
                cost = m.ratio * base if m.ok and m.ratio and base else m.cost_s
                compile_s = b.compile_s if b is not None else (m.compile_s or 0.0)
                self._add(k, cost, m.error, compile_s,
                          max(0.0, took - (0.0 if b is not None else compile_s)))
        return [self.rows[k] for k in keys]

    def _add(self, key, cost, error, compile_s, time_s) -> None:
        row = {"task": key[0], "template": key[1], "key": key[2], "cost_s": cost,
               "error": error, "compile_s": compile_s or 0.0, "time_s": time_s}
        self.rows[key] = row
        self.new += 1
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")


def transfer_log(paths: list[str], exclude: set[str], target: Target, tmp: Path) -> TuningLog:
    """One log of the given logs' records for `target`, minus the benchmark's own tasks."""
    if any(Path(p).resolve() == tmp.resolve() for p in paths):
        raise SystemExit(f"{tmp} is where the merged transfer log is written; pass a copy")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "w") as out:
        for p in paths:
            for r in TuningLog(p, target.record_key).records:
                if r.task not in exclude:
                    out.write(TuningLog.line(r))
    return TuningLog(tmp, target.record_key)


def database_log(path: str, exclude: set[str], target: Target, tmp: Path) -> TuningLog:
    """An empty log for `target` joined by the tuning database at `path` ("shipped": the
    packaged one) minus the benchmark's own tasks: the searchers learn from it, as a compile's
    do, about tasks they have not seen (tune/database.py)."""
    db = load_database(PACKAGED if path == "shipped" else path)
    if not len(db):
        raise SystemExit(f"no tuning database records in {path}")
    tmp.unlink(missing_ok=True)
    log = TuningLog(tmp, target.record_key)
    log.attach(r for r in db.records if r.task not in exclude)
    return log


def refused(space: KnobSpace, config: dict) -> dict | None:
    """The row of a candidate that breaks one of the template's constraints (the hidden
    scenario): refused before it is compiled, at no cost."""
    broken = space.violations(config)
    return {"cost_s": None, "error": f"breaks {', '.join(broken)}", "compile_s": 0.0,
            "time_s": 0.0} if broken else None


def run_one(pair, searcher: str, seed: int, log: TuningLog | None, budget: int, memo: Memo,
            regs: int, target: Target, hidden: bool = False,
            space: KnobSpace | None = None, params: dict | None = None) -> dict:
    """One searcher's run on one pair. `hidden`: the searcher sees the knobs without the
    template's constraints (the raw Cartesian product, as AutoTVM's spaces are), and a
    candidate breaking one is measured invalid — where a validity predictor earns its keep.
    `space`: the template's space with other seeds (default: the template's own); `params`:
    the searcher's keyword arguments."""
    task, template = pair["task"], pair["template"]
    space = space or template_module(template).space(task, regs)
    seen = KnobSpace(space.knobs, [], tuple(space.seeds)) if hidden else space
    ctx = TuningContext(task, template, seen, seed=seed, log=log, target=target,
                        vector_registers=regs)
    t0 = time.perf_counter()
    s = make_searcher(searcher, ctx, **(params or {}))
    own = time.perf_counter() - t0
    costs, walls, measured, wall = [], [], [], 0.0
    while len(costs) < budget:
        t0 = time.perf_counter()
        configs = s.ask()[: budget - len(costs)]
        own_step = time.perf_counter() - t0
        if not configs:
            break
        bad = [refused(space, c) for c in configs]
        ok = iter(memo.get(task, template, [c for c, b in zip(configs, bad) if b is None]))
        rows = [b or next(ok) for b in bad]
        t0 = time.perf_counter()
        s.tell(configs, [r["cost_s"] for r in rows])
        own_step += time.perf_counter() - t0
        wall += own + own_step
        own = 0.0
        for r in rows:
            wall += r["compile_s"] / memo.workers + r["time_s"]
            costs.append(r["cost_s"])
            walls.append(round(wall, 3))
        measured += configs
    return {"pair": pair["name"], "searcher": searcher, "seed": seed, "costs": costs,
            "wall_s": walls, "params": s.params, "configs": measured}


def best_so_far(costs: list) -> list[float]:
    out, b = [], math.inf
    for c in costs:
        b = min(b, c) if c else b
        out.append(b)
    return out


def summarize(runs: list[dict], budget: int) -> tuple[dict, dict]:
    best_any: dict[str, float] = {}
    for r in runs:
        for c in r["costs"]:
            if c and c < best_any.get(r["pair"], math.inf):
                best_any[r["pair"]] = c
    table: dict[tuple, dict] = {}
    for r in runs:
        curve = best_so_far(r["costs"])
        goal = best_any[r["pair"]] / REACH
        reach = next((i + 1 for i, b in enumerate(curve) if b <= goal), None)
        t = table.setdefault((r["scenario"], r["searcher"]),
                             {"reach": [], "censored": 0, "final": [], "invalid": 0, "n": 0,
                              "wall": []})
        t["reach"].append(reach or budget + 1)
        t["censored"] += reach is None
        t["final"].append(best_any[r["pair"]] / curve[-1] if curve and curve[-1] < math.inf
                          else 0.0)
        t["invalid"] += sum(1 for c in r["costs"] if not c)
        t["n"] += len(r["costs"])
        if reach:
            t["wall"].append(r["wall_s"][reach - 1])
    ga = {(r["scenario"], r["pair"], r["seed"]): r["costs"] for r in runs
          if r["searcher"] == "ga"}
    for r in runs:           # at equal measurements (as many as both made): ends as fast as ga?
        other = ga.get((r["scenario"], r["pair"], r["seed"]))
        if other is None or not r["costs"]:
            continue
        n = min(len(other), len(r["costs"]))
        mine, theirs = best_so_far(r["costs"][:n])[-1], best_so_far(other[:n])[-1]
        t = table[(r["scenario"], r["searcher"])]
        t.setdefault("vs_ga", []).append(mine <= theirs * 1.005)
    out = {}
    for (scenario, searcher), t in sorted(table.items()):
        out.setdefault(scenario, {})[searcher] = {
            "measurements_to_95pct_geomean": float(np.exp(np.mean(np.log(t["reach"])))),
            "runs_not_reaching_95pct": t["censored"], "runs": len(t["reach"]),
            "final_quality_geomean": float(np.exp(np.mean(np.log(np.maximum(t["final"],
                                                                             1e-9))))),
            "invalid_share": t["invalid"] / max(1, t["n"]),
            "ends_at_least_as_fast_as_ga": float(np.mean(t["vs_ga"])) if t.get("vs_ga")
            else None,
            "wall_s_to_95pct_median": float(np.median(t["wall"])) if t["wall"] else None}
    return out, best_any


def plot(runs: list[dict], best_any: dict, path: Path, budget: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = sorted({r["scenario"] for r in runs})
    fig, axes = plt.subplots(len(scenarios), 2, figsize=(12, 4.2 * len(scenarios)),
                             squeeze=False)
    for row, scenario in zip(axes, scenarios):
        for searcher in sorted({r["searcher"] for r in runs}):
            mine = [r for r in runs if r["scenario"] == scenario and r["searcher"] == searcher]
            if not mine:
                continue
            q = np.full((len(mine), budget), np.nan)
            grid = np.geomspace(0.5, max((r["wall_s"][-1] for r in runs if r["wall_s"]),
                                         default=1), 200)
            qw = np.full((len(mine), len(grid)), np.nan)
            for i, r in enumerate(mine):
                curve = [best_any[r["pair"]] / b if b < math.inf else 0.0
                         for b in best_so_far(r["costs"])]
                q[i, :len(curve)] = curve
                q[i, len(curve):] = curve[-1] if curve else 0.0
                idx = np.searchsorted(r["wall_s"], grid, side="right") - 1
                qw[i] = [curve[j] if j >= 0 else 0.0 for j in idx]
            row[0].plot(np.arange(1, budget + 1), np.nanmean(q, 0), label=searcher)
            row[1].plot(grid, np.nanmean(qw, 0), label=searcher)
        row[0].set(xlabel="measurements", ylabel="best found / best any run found",
                   title=f"{scenario}: quality against measurements")
        row[1].set(xlabel="wall seconds (simulated)", ylabel="best found / best any run",
                   title=f"{scenario}: quality against time", xscale="log")
        for ax in row:
            ax.set_ylim(0.5, 1.01)
            ax.grid(alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--searchers", default=",".join(SEARCHERS))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--budget", type=int, default=150, help="measurements per run")
    p.add_argument("--pairs", default="", help="comma-separated model/template names "
                   "(default: all)")
    p.add_argument("--transfer-log", action="append", default=[],
                   help="logs of other models (repeatable): adds the transfer scenario")
    p.add_argument("--database", metavar="FILE",
                   help="a tuning database ('shipped': the packaged one), the benchmark's own "
                        "tasks left out: adds the database scenario")
    p.add_argument("--unseen-models", action="store_true",
                   help="leave every task of the benchmark's models out of the database, not "
                        "only the benchmarked ones (models the database knows nothing of)")
    p.add_argument("--hidden", default="",
                   help="comma-separated searchers to run also with the constraints hidden "
                   "(the hidden scenario: invalid candidates possible)")
    p.add_argument("--memo", default="benchmarks/results/search_memo.jsonl")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default="benchmarks/results/search_compare.json")
    p.add_argument("--report-only", action="store_true",
                   help="summarize the runs finished so far (`<json>.runs.jsonl`), measure "
                   "nothing")
    args = p.parse_args()
    target = Target.parse("cpu", args.threads)
    regs = host_vector_registers(target.isa)
    pairs = pick_tasks(PAIRS)
    if args.pairs:
        want = set(args.pairs.split(","))
        pairs = [x for x in pairs if x["name"] in want]
    searchers = args.searchers.split(",")
    scenarios: dict[str, TuningLog | None] = {"empty": None}
    if args.transfer_log:
        scenarios["transfer"] = transfer_log(
            args.transfer_log, {x["task"].key for x in pairs}, target,
            Path(args.memo).with_suffix(".transfer.jsonl"))
    if args.database:
        scenarios["database"] = database_log(
            args.database, {k for x in pairs for k in x["model_tasks"]}
            if args.unseen_models else {x["task"].key for x in pairs}, target,
            Path(args.memo).with_suffix(".database.jsonl"))
        scenarios[FIT] = scenarios["database"]
    hidden = set(args.hidden.split(",")) - {""}
    if hidden:
        scenarios["hidden"] = None
    done_path = Path(args.json).with_suffix(".runs.jsonl")
    runs = [json.loads(line) for line in done_path.read_text().splitlines()] \
        if done_path.exists() else []
    done = {(r["scenario"], r["pair"], r["searcher"], r["seed"]) for r in runs}
    workers = min(2, args.threads)
    if args.report_only:
        scenarios = {}
    with Measurer(threads=args.threads) as measurer, BuildPool(workers) as pool:
        memo = Memo(Path(args.memo), measurer, pool, workers)
        for seed in range(args.seeds):
            for pair in pairs:
                for scenario, log in scenarios.items():
                    for searcher in searchers:
                        model_based = is_model_based(prepare(searcher))
                        if (scenario, pair["name"], searcher, seed) in done or \
                                scenario == "hidden" and searcher not in hidden or \
                                scenario == FIT and not model_based:
                            continue
                        t0 = time.time()
                        r = run_one(pair, searcher, seed, log, args.budget, memo, regs, target,
                                    hidden=scenario == "hidden",
                                    params={"pretrained": False} if scenario == FIT else None)
                        r["scenario"] = scenario
                        runs.append(r)
                        r.pop("configs")
                        with open(done_path, "a") as f:
                            f.write(json.dumps(r) + "\n")
                        b = min((c for c in r["costs"] if c), default=None)
                        print(f"{scenario:<8} {pair['name']:<36} {searcher:<9} seed {seed} "
                              f"best {b and b * 1e3:.4f} ms  {len(r['costs'])} meas  "
                              f"{time.time() - t0:.0f}s real ({memo.new} new measured)",
                              flush=True)
    runs = [r for r in runs if r["pair"] in {x["name"] for x in pairs}
            and r["searcher"] in searchers]
    summary, best_any = summarize(runs, args.budget)
    print(f"\n{'scenario':<9} {'searcher':<10} {'meas to 95%':>11} {'not reached':>11} "
          f"{'final':>6} {'invalid':>8} {'wall s to 95%':>13} {'>= ga':>6}")
    for scenario, rows in summary.items():
        for name, s in rows.items():
            w = s["wall_s_to_95pct_median"]
            print(f"{scenario:<9} {name:<10} {s['measurements_to_95pct_geomean']:>11.1f} "
                  f"{s['runs_not_reaching_95pct']:>5}/{s['runs']:<5} "
                  f"{s['final_quality_geomean']:>6.3f} {s['invalid_share']:>8.3f} "
                  f"{'' if w is None else f'{w:.0f}':>13} "
                  f"{s['ends_at_least_as_fast_as_ga'] or 0:>6.2f}")
    counts: dict[str, int] = {}
    for r in runs:
        counts[r["searcher"]] = counts.get(r["searcher"], 0) + 1
    doc = {"machine": {**machine_facts(), "threads": args.threads},
           "versions": versions(), "budget": args.budget, "seeds": args.seeds,
           "runs_per_searcher": counts,
           "pairs": [{"name": x["name"], "task": x["task"].key, "template": x["template"]}
                     for x in pairs],
           "transfer_logs": args.transfer_log, "reach": REACH, "summary": summary,
           "best_any": best_any}
    out = write_json(args.json, doc)
    plot(runs, best_any, out.with_suffix(".png"), args.budget)
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
