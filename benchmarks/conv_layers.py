"""Per-layer convolution benchmark (like Woodpecker-DL Fig. 2b): every distinct conv layer of a
zoo model at batch 1, tuned Halide vs torch/oneDNN vs ONNX Runtime (a single-node model), with
the fused epilogue included in every runtime. 2 threads each.

Each runtime is timed in its own process (woodpecker/bench/isolated.py): sharing one process,
torch's thread pool measurably slowed the next runtime's kernel. The driver interleaves blocks
of calls (first of each block discarded) and reports medians.

torch is timed in NCHW and in channels_last and its faster layout counts; the Halide kernel runs
in NHWC (layout conversions are not counted here: this compares kernels, not plans).
The Halide kernel is the fastest of the templates' finalists (each template's best record in
the log, re-timed side by side first: selection/finalists.py), then timed against the libraries.

    python benchmarks/conv_layers.py --model resnet18 --budget-per-layer 60s --json out.json
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from woodpecker.options import SEARCHES
from woodpecker.target import machine_facts


# -- runtimes, built inside their own processes ---------------------------------------------------
def halide_runtime(template: str, task: dict, config: dict, threads: int):
    from woodpecker.engines.halide.templates import kernel_arguments, template_module
    from woodpecker.tasks.conv import ConvTask

    t, module = ConvTask.from_json(task), template_module(template)
    kernel = module.build(t, config, threads)
    args = kernel_arguments(module, t, config, t.random_inputs(0))
    return lambda: kernel(*args)


def onnxruntime_runtime(model: bytes, feeds: dict, threads: int):
    import onnxruntime as ort

    from woodpecker.engines.ort_engine import session_options

    sess = ort.InferenceSession(model, session_options(threads),
                                providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, feeds)


def torch_runtime(x, w, b, residuals, attrs: dict, epilogue: list, channels_last: bool,
                  threads: int):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    xt = torch.from_numpy(x).contiguous(memory_format=fmt)
    wt = torch.from_numpy(w).contiguous(memory_format=fmt)
    bt = torch.from_numpy(b) if b is not None else None
    rs = [torch.from_numpy(r).contiguous(memory_format=fmt) for r in residuals]
    top, left, bottom, right = attrs["_pads"]
    pre = (left, right, top, bottom) if (top, left) != (bottom, right) else None

    def run():
        with torch.inference_mode():
            xi = F.pad(xt, pre) if pre else xt
            y = F.conv2d(xi, wt, bt, tuple(attrs["strides"]), 0 if pre else (top, left),
                         tuple(attrs["dilations"]), attrs.get("group", 1))
            res = iter(rs)
            for step in epilogue:
                if step[0] == "Add":
                    y.add_(next(res))
                elif step[0] == "Relu":
                    y.relu_()
                elif step[0] == "Clip":
                    y.clamp_(step[1], step[2])
                else:
                    raise ValueError(f"epilogue {step[0]} not in this benchmark")
            return y

    return run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--budget-per-layer", default="60s")
    p.add_argument("--search", default="ga", choices=SEARCHES)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--block", type=int, default=5,
                   help="calls per runtime per round, the first discarded (see compare.py)")
    p.add_argument("--tuning-log", default=None,
                   help="default benchmarks/results/tuning_<model>.jsonl (resumed)")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    import woodpecker
    from woodpecker import zoo
    from woodpecker.bench.compare import write_json
    from woodpecker.bench.isolated import IsolatedRuntime, isolated_medians
    from woodpecker.bench.runners import versions
    from woodpecker.bench.timing import time_interleaved
    from woodpecker.engines.halide.host import host_vector_registers
    from woodpecker.frontend.onnx_export import nodes_model
    from woodpecker.lazy import Lazy
    from woodpecker.options import parse_budget
    from woodpecker.selection.finalists import finalist_candidates, leaders
    from woodpecker.target import Target
    from woodpecker.tasks import library_inputs
    from woodpecker.tune.extract import extract_tasks
    from woodpecker.tune.measure import Measurer
    from woodpecker.tune.records import TuningLog
    from woodpecker.tune.tuner import tune_templates

    target = Target.parse("cpu", args.threads)
    budget = parse_budget(args.budget_per_layer)
    model = woodpecker.compile(str(zoo.export(args.model)), engines="numpy",
                               threads=args.threads)
    groups = [g for g in extract_tasks(model.graph) if g.task.kind == "conv2d"]
    by_name = {n.name: n for n in model.graph.nodes}
    log_path = Path(args.tuning_log or f"benchmarks/results/tuning_{args.model}.jsonl")
    log = TuningLog(log_path)
    layers = []
    with Measurer(threads=args.threads) as measurer:
        for i, g in enumerate(groups):
            task = g.task
            t0 = time.monotonic()
            n0 = len(log.records)
            best = tune_templates(task, g.templates, measurer, log, search=args.search, seed=i,
                                  vector_registers=host_vector_registers(target.isa),
                                  deadline=t0 + budget)
            tune_s, trials = time.monotonic() - t0, len(log.records) - n0
            finalists = {c.name: c for c in finalist_candidates(task, leaders(log, task),
                                                                 args.threads, print)}
            if best is None or not finalists:
                print(f"layer {i}: no valid Halide configuration", flush=True)
                continue
            picked = {k: float(np.median(v)) for k, v in time_interleaved(
                {k: f.run for k, f in finalists.items()}, args.runs, 2, block=3).items()}
            best = finalists[min(picked, key=picked.get)].record
            inputs = task.random_inputs(0)
            node = by_name[g.nodes[0]]
            # the node's own (NCHW) layout: a model input the kernel reads NCHW stays as it is
            nchw = library_inputs(task, node, inputs)
            onnx_model = nodes_model([node], [node.inputs[0]] + list(node.inputs[3:]),
                                     node.outputs, model.graph.opset)
            feeds = dict(zip([vi.name for vi in onnx_model.graph.input], nchw))
            w, b = np.array(node.inputs[1].data), (node.inputs[2].data if task.has_bias
                                                     else None)
            torch_args = dict(x=nchw[0], w=w, b=b, residuals=nchw[1:], attrs=node.attrs,
                              epilogue=list(task.epilogue), threads=args.threads)
            runtimes = {
                "halide": IsolatedRuntime(Lazy(__name__, "halide_runtime"),
                                          template=best.template,
                                          task=task.to_json(), config=dict(best.config),
                                          threads=args.threads),
                "torch_nchw": IsolatedRuntime(Lazy(__name__, "torch_runtime"), channels_last=False,
                                              **torch_args),
                "torch_cl": IsolatedRuntime(Lazy(__name__, "torch_runtime"), channels_last=True,
                                            **torch_args),
                "onnxruntime": IsolatedRuntime(Lazy(__name__, "onnxruntime_runtime"),
                                               model=onnx_model.SerializeToString(),
                                               feeds=feeds, threads=args.threads)}
            med = isolated_medians(runtimes, args.runs, 3, block=args.block)
            torch_ms = min(v for k, v in med.items() if k.startswith("torch"))
            gf = {k: task.flops / (v * 1e-3) / 1e9 for k, v in med.items()}
            row = {"layer": i, "shape": f"{task.kh}x{task.kw}/{task.stride[0]} {task.c}->{task.k}"
                   f" @ {task.h}x{task.w}", "epilogue": [s[0] for s in task.epilogue],
                   "count": len(g.nodes), "flops": task.flops, "median_ms": med,
                   "gflops": gf, "speedup_vs_torch": torch_ms / med["halide"],
                   "speedup_vs_onnxruntime": med["onnxruntime"] / med["halide"],
                   "tuning_seconds": tune_s, "trials": trials, "best_config": dict(best.config),
                   "best_template": best.template,
                   "finalists_ms": picked}
            layers.append(row)
            print(f"layer {i:>2} {row['shape']:<24} halide {gf['halide']:6.1f}  torch "
                  f"{task.flops / (torch_ms * 1e-3) / 1e9:6.1f}  ort {gf['onnxruntime']:6.1f} "
                  f"GFLOP/s   vs torch {row['speedup_vs_torch']:.2f}x  vs ort "
                  f"{row['speedup_vs_onnxruntime']:.2f}x  ({trials} trials, {tune_s:.0f}s)",
                  flush=True)

    def geomean(key):
        return math.exp(sum(math.log(r[key]) for r in layers) / len(layers)) if layers else None

    result = {"model": args.model, "threads": args.threads, "budget_per_layer_s": budget,
              "search": args.search, "machine": machine_facts(),
              "versions": versions(), "layers": layers,
              "geomean_vs_torch": geomean("speedup_vs_torch"),
              "geomean_vs_onnxruntime": geomean("speedup_vs_onnxruntime")}
    print(f"geomean speed-up of tuned Halide: vs torch {result['geomean_vs_torch']:.3f}x, "
          f"vs onnxruntime {result['geomean_vs_onnxruntime']:.3f}x")
    out = args.json or f"benchmarks/results/conv_layers_{args.model}.json"
    print(f"wrote {write_json(out, result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
