"""The `woodpecker` command. Errors a user can cause print one line and exit 1.

One module per larger command (`inspect.py`, `quantize.py`); shared helpers in `common.py`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from woodpecker.cli import common
from woodpecker.cli import gpu as gpu_cmd
from woodpecker.cli import quantize as quantize_cmd
from woodpecker.cli.common import _is_plan, _load_or_compile, _reference_onnx, _shapes
from woodpecker.cli.inspect import cmd_inspect
from woodpecker.config import CANDIDATE_TIMEOUT_S, DEFAULT_SEARCH
from woodpecker.errors import WoodpeckerError
from woodpecker.files import distinct_stems, read_npy
from woodpecker.options import PRECISIONS, SEARCHES, SPLITS, BudgetSplit, ScheduleKind
from woodpecker.version import __version__

TUNE_BUDGET = "15m"    # --budget when none is given (TuneOptions' default)


def cmd_zoo(args) -> None:
    from woodpecker import zoo

    if args.action == "list":
        for m in zoo.MODELS.values():
            print(f"{m.name:<22} {'x'.join(map(str, m.input_shape)):<14} {m.description}")
        return
    if not args.name:
        raise WoodpeckerError("zoo export needs a model name (see `woodpecker zoo list`)")
    out = zoo.export(args.name, args.output or f"{args.name}.onnx", seed=args.seed)
    print(f"exported {args.name} to {out}")


def cmd_compile(args) -> None:
    import time

    import woodpecker
    from woodpecker.passes import pipeline
    from woodpecker.schedule.memory import format_bytes, parse_bytes

    t0 = time.perf_counter()
    # a budget is for tuning: --budget alone implies --tune
    tune = _tune_options(args) if args.tune or args.budget is not None else None
    budget = parse_bytes(args.memory_budget) if args.memory_budget else None
    model = woodpecker.compile(args.model, engines=args.engines,
                               input_shapes=_shapes(args.input_shape), threads=args.threads,
                               force_threads=args.force_threads,
                               tuning_log=args.tuning_log, tune=tune, resume=args.resume,
                               schedule=args.schedule, memory_budget=budget,
                               library_regions=False if args.no_regions else None,
                               passes=pipeline(args.fusion, args.schedule),
                               database=not args.no_database, precision=args.precision)
    digest = model.save(args.output, force=args.force)
    engines = {}
    for e in model.plan.engines:
        engines[e] = engines.get(e, 0) + 1
    print(f"compiled {args.model} -> {args.output}: {len(model.graph.nodes)} nodes "
          f"({', '.join(f'{k} {v}' for k, v in engines.items())}) in "
          f"{time.perf_counter() - t0:.1f}s")
    if "selection" in model.plan.meta:   # (a library plan that won keeps the measurements)
        share = model.generated_flops_share()
        print(f"generated Halide kernels run {share:.0%} of the FLOPs; "
              f"{model.plan.meta.get('layout_conversions', 0)} layout conversion(s)")
    sched, arena = model.plan.meta["schedule"], model.plan.arena
    if model.plan.schedule.kind is ScheduleKind.MEMORY:
        print(f"memory schedule: peak activations {format_bytes(sched['peak_bytes'])} "
              f"({'optimal' if sched['optimal'] else 'not proven optimal'}, "
              f"{sched['rewrites']} concat rewrite(s), {sched['seconds']:.2f}s)")
    parallel = model.plan.meta.get("parallel")
    if parallel and "ratio" in parallel:
        print(f"parallel schedule: {len(parallel['stages'])} stage(s) of steps side by side, "
              f"whole plan {parallel['ratio']:.3f}x the sequential time: "
              f"{'kept' if parallel['kept'] else 'not kept, runs in sequence'}")
    elif parallel:
        print(f"parallel schedule: not kept ({parallel['why']})")
    if arena is not None:
        print(f"arena {format_bytes(arena.size)} (live-bytes lower bound "
              f"{format_bytes(arena.lower_bound)})")
    print(f"plan digest {digest} (run, bench and inspect --digest load only this plan)")


def cmd_run(args) -> None:
    feeds = {}
    for item in args.input or []:
        name, sep, path = item.partition("=")
        if not sep:
            raise WoodpeckerError(f"--input {item!r}: expected NAME=FILE.npy")
        if name in feeds:
            raise WoodpeckerError(f"--input {name!r} is given twice")
        feeds[name] = read_npy(name, path)
    outputs = common.run(args, feeds)     # (an .onnx: the sessions' cached plan)
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for (name, value), safe in zip(outputs.items(), distinct_stems(outputs)):
        np.save(out_dir / f"{safe}.npy", value)
        print(f"{name}: {'x'.join(map(str, value.shape))} {value.dtype} -> {out_dir / safe}.npy")


def cmd_bench(args) -> None:
    from woodpecker.bench.compare import benchmark, default_runtimes, format_table, write_json
    from woodpecker.progress import Progress

    model = common.cached_or_compiled(args)
    onnx_bytes = _reference_onnx(model, args.onnx, args.model)
    meta = model.plan.meta.get("metadata")
    against = default_runtimes(meta) if args.against is None else \
        [a.strip() for a in args.against.split(",") if a.strip()]
    bars: list[Progress] = []

    def progress(done: int, rounds: int) -> None:
        if not bars:
            bars.append(Progress("benchmark rounds", rounds, sys.stderr))
        bars[0].update(done)

    try:
        result = benchmark(model, onnx_bytes, against, runs=args.runs, warmup=args.warmup,
                           seed=args.seed, zoo_meta=meta, block=args.block, progress=progress)
    finally:
        for bar in bars:
            bar.close()
    print(format_table(result))
    if args.json:
        print(f"wrote {write_json(args.json, result)}")


def cmd_tune(args) -> None:
    from woodpecker.engines.halide.host import host_vector_registers
    from woodpecker.engines.halide.templates import template_module
    from woodpecker.target import Target
    from woodpecker.tune.driver import open_log, tune_graph
    from woodpecker.tune.extract import extract_tasks

    target = Target.parse("cpu", args.threads, args.force_threads)
    if args.split != BudgetSplit.WORK and args.workers != "local":
        raise WoodpeckerError("--split library is for local tuning (Ray workers split the "
                              "budget by work)")
    if args.export_db:
        _export_db(args.tuning_log, args.export_db, target)
        return
    if args.model is None:
        raise WoodpeckerError("tune needs a model (or --export-db FILE with --tuning-log)")
    from woodpecker.deadline import Deadline

    # --budget is the whole command: the compile that reads the tasks counts in it (issue 76:
    # `tune --budget 20s` took 8 s of compile before its budget started)
    options = None if args.show_space else _tune_options(args)
    deadline = None if options is None else Deadline.after(options.budget_s)
    model = _load_or_compile(args, library_first=False)   # the graph tasks are read from
    if args.show_space:
        regs = host_vector_registers(target.isa)
        for i, g in enumerate(extract_tasks(model.graph)):
            print(f"task {i}: {g.task.describe()}  ({len(g.nodes)} layer(s), "
                  f"{g.task.flops / 1e6:.1f} MFLOP)")
            for template in g.templates:
                sp = template_module(template).space(g.task, regs)
                valid = sum(1 for _ in sp.valid_configs())
                print(f"  template {template}: {sp.size} configurations, "
                      f"{valid} valid")
                for k in sp.knobs:
                    print(f"    {k.name}: {list(k.values)}")
                for c in sp.constraints:
                    print(f"    constraint: {c.name}")
        return
    if not args.tuning_log:
        raise WoodpeckerError("tune needs --tuning-log FILE (or --show-space)")
    log = open_log(args.tuning_log, args.resume, target=target, database=options.database)
    if args.workers == "local":
        tune_graph(model.graph, target, log, options, deadline=deadline)
    elif args.workers == "ray" or args.workers.startswith("ray:"):
        from woodpecker.tune.distributed import tune_graph_ray

        stats = tune_graph_ray(model.graph, target, log, options,
                               args.workers.partition(":")[2] or None, deadline=deadline)
        print(f"tuned {stats['tasks']} task(s) on {stats['workers']} Ray worker(s): "
              f"{stats['records']} records" + (f"; restarted after a worker died: "
                                               f"{', '.join(stats['restarted'])}"
                                               if stats["restarted"] else ""))
    else:
        raise WoodpeckerError(f"--workers {args.workers!r}: use 'local', 'ray' or "
                              "'ray:ADDRESS'")
    print(f"tuning log: {args.tuning_log} ({len(log.records)} records)")


def _export_db(tuning_log: str | None, path: str, target) -> None:
    """The user's log, records of this machine's target, written as a database file."""
    from woodpecker.tune.database import database_records, write_database
    from woodpecker.tune.records import TuningLog

    if not tuning_log or not Path(tuning_log).exists():
        raise WoodpeckerError("--export-db needs --tuning-log FILE, an existing tuning log")
    if not Path(path).resolve().parent.is_dir():
        raise WoodpeckerError(f"--export-db {path}: no folder {Path(path).parent} to write in")
    log = TuningLog(tuning_log, target.record_key)
    header = write_database(database_records([log.records]), path)
    print(f"wrote {path}: {header['records']} record(s) for "
          f"{', '.join(header['targets']) or 'no target'} from {tuning_log}")


def _tune_options(args):
    from woodpecker.options import TuneOptions

    # a bad budget or option fails here, before any work
    return TuneOptions(args.budget or TUNE_BUDGET, args.search, args.seed, args.max_trials,
                       args.timeout, args.build_workers, database=not args.no_database,
                       split=args.split)


def cmd_report(args) -> None:
    from woodpecker.files import write_bytes
    from woodpecker.report import build_report
    from woodpecker.runtime.plan import plan_digest

    model = _load_or_compile(args)
    digest = plan_digest(args.model) if _is_plan(args.model) else None
    page = build_report(model, args.tuning_log, args.runs, digest)
    path = write_bytes(Path(args.output), page.encode("utf-8"))
    print(f"wrote {path} ({len(page) // 1024} KiB)")


def cmd_ops(args) -> None:
    """Each op Woodpecker defines, whether generated kernels run it, which installed library
    engines declare it; then who runs every other op (as an opaque node)."""
    from woodpecker.engines.registry import ENGINE_NAMES, EngineError, get_engine
    from woodpecker.frontend.qoperator import REWRITES
    from woodpecker.ops import SUPPORTED
    from woodpecker.ops.opaque import OP as OPAQUE

    engines = []
    for name in ENGINE_NAMES:
        try:
            engines.append(get_engine(name))
        except EngineError:
            pass
    generated = [e for e in engines if e.caps.generated]
    libraries = [e for e in engines if not e.caps.generated]
    print(f"{'op':<28} {'generated':<10} libraries")
    for op in SUPPORTED:
        gen = ",".join(e.name for e in generated if op in e.ops) or "-"
        libs = ", ".join(e.name for e in libraries if op in e.ops)
        print(f"{op:<28} {gen:<10} {libs}")
    read = ", ".join(op if domain == "" else f"{domain}.{op}" for domain, op in REWRITES)
    print(f"read as the QDQ form they are defined as (integer work after the passes): {read}")
    opaque = ", ".join(e.name for e in libraries if OPAQUE in e.ops)
    print(f"any other op: an opaque node, run by the library that accepts it ({opaque}; "
          "each asked when a model is compiled)")


def _at_least(low: int):
    """An argparse type: a whole number of at least `low`."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if n < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {n}")
        return n
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="woodpecker", description=__doc__)
    p.add_argument("--version", action="version", version=f"woodpecker {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    z = sub.add_parser("zoo", help="list or export built-in models")
    z.add_argument("action", choices=["list", "export"])
    z.add_argument("name", nargs="?")
    z.add_argument("-o", "--output")
    z.add_argument("--seed", type=int, default=0)
    z.set_defaults(fn=cmd_zoo)

    def model_opts(q, compile_only=False):
        q.add_argument("--engines", help="restrict engines, e.g. torch,onnxruntime,numpy")
        q.add_argument("--input-shape", action="append", metavar="NAME=1x3x224x224",
                       help="fix a dynamic input's shape (repeatable)")
        q.add_argument("--threads", type=int, help="threads per engine (default: all cores)")
        q.add_argument("--force-threads", action="store_true",
                       help="allow more threads than this machine's cores")
        q.add_argument("--precision", choices=PRECISIONS, default="fp32",
                       help="compute the model's layer products in bf16 or fp16 (Woodpecker's "
                            "AMX-BF16 kernels, OpenVINO's precision hint; needs a CPU with "
                            "it); the compile reports the accuracy against float32")

    def digest_opt(q):
        q.add_argument("--digest", metavar="sha256:HEX",
                       help="load the plan only if it is this one (compile prints its digest)")
        q.add_argument("--trust", action="store_true",
                       help="load a plan with native code that this machine did not sign (one "
                            "built elsewhere): a plan is a program, trust only its source")

    def tune_opts(q, whole: str):
        q.add_argument("--budget", help=f"time for {whole}, e.g. 90s, 15m (default "
                                        f"{TUNE_BUDGET})")
        q.add_argument("--search", default=DEFAULT_SEARCH, choices=SEARCHES,
                       help=f"searcher (default {DEFAULT_SEARCH}: docs/guide.md, Searchers)")
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("--max-trials", type=int, help="measurements per task at most")
        q.add_argument("--timeout", type=float, default=CANDIDATE_TIMEOUT_S,
                       help="seconds per candidate")
        q.add_argument("--build-workers", type=int,
                       help="processes compiling candidates in parallel (default: all cores)")
        q.add_argument("--split", choices=SPLITS, default="work",
                       help="how the budget is shared among tasks: by a roofline estimate of "
                            "their work, or by their time on ONNX Runtime and how close a "
                            "known kernel came (heaviest first; docs/guide.md)")
        q.add_argument("--no-database", action="store_true",
                       help="leave the shipped tuning database out (its records of this "
                            "machine's target start tasks the log has nothing of; all of them "
                            "teach the searchers)")

    c = sub.add_parser("compile", help="optimise a model and save a plan")
    c.add_argument("model")
    c.add_argument("-o", "--output", required=True)
    c.add_argument("--force", action="store_true",
                   help="write into -o even if it is a folder that holds no plan")
    model_opts(c)
    c.add_argument("--tune", action="store_true",
                   help="tune the model's kernels first (into --tuning-log, default: the "
                        "shared log in the Woodpecker cache)")
    c.add_argument("--tuning-log", help="use (and with --tune, extend) this tuning log")
    c.add_argument("--resume", action="store_true", help="continue a non-empty --tuning-log")
    c.add_argument("--schedule", choices=["file", "memory", "parallel"], default="file",
                   help="node order: the model file's, the least peak memory (SERENITY), or "
                        "the file's with independent Halide steps run side by side where the "
                        "whole plan gets faster (DOS)")
    c.add_argument("--memory-budget", help="with --schedule memory: fail unless the peak of "
                                           "activations fits, e.g. 256KiB")
    c.add_argument("--no-regions", action="store_true",
                   help="one ONNX Runtime session per node instead of one per run of "
                        "consecutive ONNX Runtime nodes")
    c.add_argument("--fusion", choices=["default", "ago"], default="default",
                   help="ago: also fuse chains of convs within AGO's partition (1x1 -> "
                        "depthwise -> 1x1, conv -> 1x1) and attention (MatMul -> Softmax -> "
                        "MatMul) into one generated kernel each, kept only where faster "
                        "than the parts' own kernels")
    tune_opts(c, "the whole compile with --tune (tuning, kernel selection, plan checks; "
                 "a budget implies --tune)")
    c.set_defaults(fn=cmd_compile)

    r = sub.add_parser("run", help="run a plan (or .onnx) on .npy inputs")
    r.add_argument("model")
    digest_opt(r)
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    r.add_argument("--output-dir", default="out")
    model_opts(r)
    r.set_defaults(fn=cmd_run)

    b = sub.add_parser("bench", help="latency against other runtimes, interleaved")
    b.add_argument("model")
    digest_opt(b)
    b.add_argument("--against", help="runtimes to compare with, e.g. onnxruntime,openvino,torch "
                                     "(default: onnxruntime, openvino where installed, torch "
                                     "for zoo models)")
    b.add_argument("--runs", type=_at_least(1), default=50)
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--block", type=int, default=1,
                   help="consecutive calls per runtime per round; the first is discarded")
    b.add_argument("--json")
    b.add_argument("--onnx", help="the ONNX model a plan came from (default: found)")
    model_opts(b)
    b.set_defaults(fn=cmd_bench)

    i = sub.add_parser("inspect", help="nodes, engines, FLOPs and time per node, kernel choices")
    i.add_argument("model")
    digest_opt(i)
    i.add_argument("--json")
    i.add_argument("--runs", type=_at_least(0), default=10,
                   help="profiling runs (0: do not run)")
    i.add_argument("--memory", action="store_true",
                   help="peak activation memory and arena size of the file's, Kahn's, the DP's "
                        "and the DP + rewriting order, with a plot")
    i.add_argument("--partition", action="store_true",
                   help="AGO's partition: subgraphs, operators, weight, kernels, time, a plot")
    i.add_argument("--plot", help="with --memory or --partition: the PNG to write (default "
                                  "MODEL_memory.png, MODEL_partition.png)")
    i.add_argument("--onnx", help="the ONNX model a plan came from (default: found)")
    model_opts(i)
    i.set_defaults(fn=cmd_inspect)

    t = sub.add_parser("tune", help="tune the model's kernels into a tuning log")
    t.add_argument("model", nargs="?", help="the model (not needed with --export-db)")
    t.add_argument("--export-db", metavar="FILE",
                   help="write the --tuning-log's records of this machine as a tuning "
                        "database file (configs and costs, no errors or provenance), to "
                        "contribute to the shipped one; tunes nothing")
    t.add_argument("--show-space", action="store_true", help="list tasks and knob spaces")
    t.add_argument("--tuning-log")
    t.add_argument("--resume", action="store_true", help="continue an existing tuning log")
    t.add_argument("--workers", default="local",
                   help="where candidates are built and measured: 'local' (this machine's "
                        "process pool), 'ray' (a local Ray cluster) or 'ray:ADDRESS' (a Ray "
                        "cluster of identical machines; one tuning task per worker)")
    tune_opts(t, "tuning")
    model_opts(t)
    t.set_defaults(fn=cmd_tune)

    rp = sub.add_parser("report", help="one self-contained HTML page about a plan: nodes, "
                                       "time by op and engine, tuning curves, memory")
    rp.add_argument("model")
    digest_opt(rp)
    rp.add_argument("-o", "--output", required=True, help="the HTML file to write")
    rp.add_argument("--tuning-log", help="draw each task's tuning curve from this log")
    rp.add_argument("--runs", type=_at_least(0), default=20,
                    help="profiling runs for the times (0: do not run)")
    model_opts(rp)
    rp.set_defaults(fn=cmd_report)

    quantize_cmd.add_parser(sub)
    gpu_cmd.add_parser(sub)

    o = sub.add_parser("ops", help="the supported ONNX op types")
    o.set_defaults(fn=cmd_ops)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.fn(args)
    except WoodpeckerError as e:
        print(f"woodpecker: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("woodpecker: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output left (`| head`): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:
        # a path the user gave that cannot be read or written (missing, a directory, no
        # permission, a full disk): the system's reason and the path, one line
        where = f": {e.filename}" if e.filename else ""
        print(f"woodpecker: error: {e.strerror or e}{where}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
