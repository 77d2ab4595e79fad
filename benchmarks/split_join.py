"""AGO's reformer, measured (AGO §V): does a fused subgraph — a conv chain or attention — tuned
from its parts' composed schedules (Split, then Join: tune/reformer.py) reach the quality of
tuning it from scratch in fewer measurements?

For each chosen fused task of a zoo model (passes.AGO; the most work first) and seed:
**scratch** — `glimpse` on the fused template from an empty log, `--budget` measurements;
**joined** — each part (a conv; attention's products and softmax) tuned with `glimpse` on each
of its templates (`--part-budget` measurements per part, split among its templates), then
`glimpse` on the fused task from a space whose first seeds are join_seeds' compositions of the
parts' best configs. Every distinct configuration is
measured once and shared through a memo (as benchmarks/search_compare.py), so both runs see the
same costs. Reported per task: scratch's best; the measurements the joined run needed on the
chain to come within 5 % of it (and with the parts' measurements added); its best.

    python benchmarks/split_join.py --model mobilenet_v2 --tasks 3 --budget 60 \\
        --json benchmarks/results/split_join_zen3.json
    python benchmarks/split_join.py --model transformer_encoder --tasks 1 --budget 60 \\
        --json benchmarks/results/split_join_attention_zen3.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from search_compare import Memo, run_one

from woodpecker import zoo
from woodpecker.bench.compare import write_json
from woodpecker.bench.runners import versions
from woodpecker.engines.halide.host import host_vector_registers
from woodpecker.engines.halide.templates import template_module, templates_for
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.passes import AGO, optimize
from woodpecker.target import Target
from woodpecker.tasks.space import KnobSpace
from woodpecker.tune.build_pool import BuildPool
from woodpecker.tune.extract import extract_tasks
from woodpecker.tune.measure import Measurer
from woodpecker.tune.reformer import join_seeds, split

FUSED = ("convchain", "attention")
REACH = 0.95


def fused_tasks(model: str, n: int) -> list:
    """The model's `n` fused tasks (conv chains, attention) with the most work (FLOPs × nodes)
    that split into parts."""
    g = import_onnx(load_model_proto(str(zoo.export(model))))
    optimize(g, AGO)
    groups = [x for x in extract_tasks(g) if x.task.kind in FUSED and split(x.task)
              and all(templates_for(p) for p in split(x.task))]
    groups.sort(key=lambda x: -x.task.flops * len(x.nodes))
    return [x.task for x in groups[:n]]


def first_within(costs: list, target: float) -> int | None:
    best = float("inf")
    for i, c in enumerate(costs):
        if c:
            best = min(best, c)
        if best * REACH <= target:
            return i + 1
    return None


def common_arguments(doc: str, json_path: str) -> argparse.ArgumentParser:
    """The options of the benchmarks measuring a model's fused tasks through a memo."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="mobilenet_v2")
    p.add_argument("--tasks", type=int, default=3)
    p.add_argument("--memo", default="benchmarks/results/split_join_memo.jsonl")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=json_path)
    return p


@contextlib.contextmanager
def measuring(args):
    """(memo, vector registers, target): every distinct config measured once, in a worker."""
    target = Target.parse("cpu", args.threads)
    with Measurer(threads=target.threads, timeout_s=30) as measurer, \
            BuildPool(2, 60) as pool:
        yield Memo(Path(args.memo), measurer, pool, 2), host_vector_registers(target.isa), target


def main() -> int:
    p = common_arguments(__doc__, "benchmarks/results/split_join.json")
    p.add_argument("--budget", type=int, default=60, help="measurements on the chain")
    p.add_argument("--part-budget", type=int, default=20, help="measurements per part")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--first-seed", type=int, default=0,
                   help="seeds --first-seed .. --first-seed + --seeds - 1")
    p.add_argument("--match", default="",
                   help="only the chosen tasks whose description contains this")
    args = p.parse_args()
    rows = []
    with measuring(args) as (memo, regs, target):
        for task in [t for t in fused_tasks(args.model, args.tasks)
                     if args.match in t.describe()]:
            template = templates_for(task)[0]
            pair = {"task": task, "template": template, "name": task.describe()}
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                scratch = run_one(pair, "glimpse", seed, None, args.budget, memo, regs, target)
                part_configs, part_meas = [], 0
                for part in split(task):
                    best = None
                    templates = templates_for(part)
                    for t in templates:
                        run = run_one({"task": part, "template": t, "name": "part"}, "glimpse",
                                      seed, None, max(1, args.part_budget // len(templates)),
                                      memo, regs, target)
                        part_meas += len(run["costs"])
                        for c, cfg in zip(run["costs"], run["configs"]):
                            if c and (best is None or c < best[0]):
                                best = (c, cfg)
                    part_configs.append(best[1] if best else None)
                space = template_module(template).space(task, regs)
                seeds = join_seeds(task, space, part_configs)
                joined_space = KnobSpace(space.knobs, space.constraints,
                                         tuple(seeds) + tuple(space.seeds))
                joined = run_one(pair, "glimpse", seed, None, args.budget, memo, regs, target,
                                 space=joined_space)
                target_cost = min(c for c in scratch["costs"] if c)
                reach = first_within(joined["costs"], target_cost)
                row = {"task": task.describe(), "seed": seed,
                       "scratch_best_ms": target_cost * 1e3,
                       "scratch_to_95": first_within(scratch["costs"], target_cost),
                       "joined_best_ms": min(c for c in joined["costs"] if c) * 1e3,
                       "joined_to_95": reach, "part_measurements": part_meas,
                       "composed_seeds": len(seeds),
                       "best_composed_ms": min((r["cost_s"] for r in memo.get(
                           task, template, seeds) if r["cost_s"]), default=0.0) * 1e3}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"{'task':<72} {'scratch':>8} {'→95%':>5} | {'joined':>8} {'→95%':>5} {'+parts':>6}")
    for r in rows:
        jt = r["joined_to_95"]
        print(f"{r['task'][:72]:<72} {r['scratch_best_ms']:>8.4f} {r['scratch_to_95']:>5} | "
              f"{r['joined_best_ms']:>8.4f} {jt if jt else '-':>5} "
              f"{(jt + r['part_measurements']) if jt else '-':>6}")
    t = Target.parse("cpu", args.threads)
    write_json(args.json, {"machine": {"cpu": t.cpu, "isa": list(t.isa)},
                           "versions": versions(), "model": args.model,
                           "budget": args.budget, "part_budget": args.part_budget,
                           "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
