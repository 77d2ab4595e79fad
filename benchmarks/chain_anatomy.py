"""Where a conv chain kernel (AGO's intensive fusion, engines/halide/conv_chain.py) loses to its
parts: for a zoo model's largest fused chains, the best chain kernel found with every earlier
stage computed per strip or per channel tile (`strip`: the intermediate stays in cache — the
locality fusion buys) and with every earlier stage at the root (`root`: the same loop nests,
each intermediate written whole and read back, as separate kernels do), against the parts'
best separate kernels — over all their templates, and over the templates whose loop nests the
chain's stages mirror (conv_direct for a dense conv, conv_depthwise for a depthwise one).

    strip vs root       what locality is worth with the chain's own stage loop nests
    root vs mirrored    what calling the stages from one kernel costs or saves
    mirrored vs best    what the parts' other templates (conv_gemm: pixels flattened across
                        rows, weights packed per channel tile) gain over those loop nests

Each search is `glimpse` from an empty log, `--budget` measurements (the parts: per
template), every distinct config measured once through a shared memo (split_join.py's), so a
config's cost is the same wherever it appears.

    python benchmarks/chain_anatomy.py --model mobilenet_v2 --tasks 3 \\
        --memo benchmarks/results/split_join_memo_emr.jsonl \\
        --json benchmarks/results/chain_anatomy_emr.json

(the committed memo is gzip-compressed, `split_join_memo_emr.jsonl.gz`: gunzip it first.)
"""

from __future__ import annotations

import sys

from search_compare import run_one
from split_join import common_arguments, fused_tasks, measuring

from woodpecker.bench.compare import write_json
from woodpecker.bench.runners import versions
from woodpecker.engines.halide.templates import template_module, templates_for
from woodpecker.target import machine_facts
from woodpecker.tasks.space import Constraint, KnobSpace
from woodpecker.tune.reformer import split

CHAIN = "conv_chain"
MIRRORED = ("conv_direct", "conv_depthwise")


def placed(space: KnobSpace, stages: int, where: str) -> KnobSpace:
    """`space` with every earlier stage at the root (`root`) or at least one per strip."""
    if where == "root":
        ok = Constraint("every earlier stage at the root",
                        lambda c: all(c[f"s{i}_at"] == "root" for i in range(stages)))
    else:
        ok = Constraint("an earlier stage per strip",
                        lambda c: any(c[f"s{i}_at"] == "strip" for i in range(stages)))
    return KnobSpace(space.knobs, [*space.constraints, ok],
                     tuple(s for s in space.seeds if ok.check(s)))


def best(run: dict) -> float:
    return min((c for c in run["costs"] if c), default=float("inf"))


def main() -> int:
    p = common_arguments(__doc__, "benchmarks/results/chain_anatomy.json")
    p.add_argument("--budget", type=int, default=40, help="measurements per search")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    rows = []
    with measuring(args) as (memo, regs, target):
        for task in fused_tasks(args.model, args.tasks):
            if task.kind != "convchain":
                continue
            space = template_module(CHAIN).space(task, regs)
            row = {"task": task.describe()}
            for where in ("strip", "root"):
                run = run_one({"task": task, "template": CHAIN, "name": where}, "glimpse",
                              args.seed, None, args.budget,
                              memo, regs, target, space=placed(space, len(task.convs) - 1, where))
                row[f"chain_{where}_ms"] = best(run) * 1e3
            parts_best, parts_mirrored = 0.0, 0.0
            for part in split(task):
                per = {t: best(run_one({"task": part, "template": t, "name": "part"},
                                       "glimpse", args.seed, None, args.budget, memo, regs,
                                       target))
                       for t in templates_for(part)}
                parts_best += min(per.values())
                parts_mirrored += min(v for t, v in per.items() if t in MIRRORED)
            row.update(parts_best_ms=parts_best * 1e3, parts_mirrored_ms=parts_mirrored * 1e3)
            rows.append(row)
            print(row, flush=True)
    print(f"{'chain':<72} {'strip':>7} {'root':>7} {'mirrored':>8} {'parts':>7}  (ms)")
    for r in rows:
        print(f"{r['task'][:72]:<72} {r['chain_strip_ms']:>7.3f} {r['chain_root_ms']:>7.3f} "
              f"{r['parts_mirrored_ms']:>8.3f} {r['parts_best_ms']:>7.3f}")
    write_json(args.json, {"machine": machine_facts(),
                           "versions": versions(), "model": args.model, "budget": args.budget,
                           "seed": args.seed, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
