"""Per-layer convolution benchmark (like Woodpecker-DL Fig. 2b): every distinct conv layer of a
zoo model at batch 1, tuned Halide vs torch/oneDNN vs ONNX Runtime (a single-node model), with
the fused epilogue included in every runtime. Interleaved medians, 2 threads each.

The runtimes share the process, and an OpenMP pool that spins after its call (torch's) slows
the next runtime's call; so each round runs a block of calls per runtime and discards the first
(`--block`, see woodpecker/bench/compare.py).

torch is timed in NCHW and in channels_last and its faster layout counts; the Halide kernel runs
in NHWC (layout conversions are not counted here: this compares kernels, not plans).

    python benchmarks/conv_layers.py --model resnet18 --budget-per-layer 60s --json out.json
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--budget-per-layer", default="60s")
    p.add_argument("--search", default="ga", choices=["ga", "random"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--block", type=int, default=5,
                   help="calls per runtime per round, the first discarded (see compare.py)")
    p.add_argument("--tuning-log", default=None,
                   help="default benchmarks/results/tuning_<model>.jsonl (resumed)")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    import onnxruntime as ort
    import torch

    import woodpecker
    from woodpecker import zoo
    from woodpecker.bench.compare import write_json
    from woodpecker.bench.runners import versions
    from woodpecker.bench.timing import time_interleaved
    from woodpecker.engines.base import BuildContext
    from woodpecker.engines.halide.runtime import host_vector_registers
    from woodpecker.engines.ort_engine import session_options
    from woodpecker.engines.torch_engine import TorchEngine
    from woodpecker.ir.to_onnx import nodes_model
    from woodpecker.target import Target
    from woodpecker.tune.extract import extract_tasks, parse_budget, template_module
    from woodpecker.tune.measure import Measurer
    from woodpecker.tune.records import TuningLog
    from woodpecker.tune.searchers import make_searcher
    from woodpecker.tune.tuner import tune_task

    torch.set_num_threads(args.threads)
    target = Target.parse("cpu", args.threads)
    budget = parse_budget(args.budget_per_layer)
    model = woodpecker.compile(str(zoo.export(args.model)), engines="numpy",
                               threads=args.threads)
    groups = extract_tasks(model.graph)
    by_name = {n.name: n for n in model.graph.nodes}
    log_path = Path(args.tuning_log or f"benchmarks/results/tuning_{args.model}.jsonl")
    log = TuningLog(log_path)
    layers = []
    with Measurer(threads=args.threads) as measurer:
        for i, g in enumerate(groups):
            task = g.task
            template = template_module(g.template)
            space = template.space(task, host_vector_registers(target.isa))
            t0 = time.monotonic()
            n0 = len(log.records)
            best = tune_task(task, g.template, space, make_searcher(args.search, space, i),
                             measurer, log, searcher_name=args.search, seed=i,
                             deadline=t0 + budget)
            tune_s, trials = time.monotonic() - t0, len(log.records) - n0
            if best is None:
                print(f"layer {i}: no valid Halide configuration", flush=True)
                continue
            inputs = task.random_inputs(0)
            ref = task.reference(inputs)
            halide_run = template.build(task, best["config"], args.threads)
            assert np.max(np.abs(halide_run(*inputs) - ref)) <= 1e-4 * np.max(np.abs(ref))

            node = by_name[g.nodes[0]]
            x_nchw = np.ascontiguousarray(inputs[0].transpose(0, 3, 1, 2))
            runtime_ins = [x_nchw] + [np.ascontiguousarray(r.transpose(0, 3, 1, 2))
                                      for r in inputs[3 if task.has_bias else 2:]]
            onnx_model = nodes_model([node], [v for v in node.inputs[:1]] +
                                     [v for v in node.inputs[3:]], node.outputs,
                                     model.graph.opset)
            sess = ort.InferenceSession(onnx_model.SerializeToString(),
                                        session_options(args.threads),
                                        providers=["CPUExecutionProvider"])
            feeds = dict(zip([vi.name for vi in onnx_model.graph.input], runtime_ins))
            tk = TorchEngine().build(node, BuildContext(args.threads, model.graph.opset))
            xt = torch.from_numpy(x_nchw).contiguous(memory_format=torch.channels_last)
            w_cl = torch.from_numpy(np.array(node.inputs[1].data)).contiguous(
                memory_format=torch.channels_last)
            b_t = torch.from_numpy(node.inputs[2].data) if task.has_bias else None
            res_cl = [torch.from_numpy(r).contiguous(memory_format=torch.channels_last)
                      for r in runtime_ins[1:]]
            a = node.attrs

            def torch_cl():
                with torch.inference_mode():
                    y = torch.nn.functional.conv2d(xt, w_cl, b_t, tuple(a["strides"]),
                                                   tuple(a["_pads"][:2]),
                                                   tuple(a["dilations"]), a.get("group", 1))
                    for r in res_cl:
                        y.add_(r)
                    return y.relu_() if task.epilogue and task.epilogue[-1][0] == "Relu" else y

            symmetric = a["_pads"][:2] == a["_pads"][2:]
            runners = {"halide": lambda: halide_run(*inputs),
                       "torch_nchw": lambda: tk(*runtime_ins),
                       "onnxruntime": lambda: sess.run(None, feeds)}
            if symmetric and all(s[0] in ("Add", "Relu") for s in task.epilogue):
                runners["torch_cl"] = torch_cl
            times = time_interleaved(runners, args.runs, 3, block=args.block)
            med = {k: float(np.median(v)) for k, v in times.items()}
            torch_ms = min(v for k, v in med.items() if k.startswith("torch"))
            gf = {k: task.flops / (v * 1e-3) / 1e9 for k, v in med.items()}
            row = {"layer": i, "shape": f"{task.kh}x{task.kw}/{task.stride[0]} {task.c}->{task.k}"
                   f" @ {task.h}x{task.w}", "epilogue": [s[0] for s in task.epilogue],
                   "count": len(g.nodes), "flops": task.flops, "median_ms": med,
                   "gflops": gf, "speedup_vs_torch": torch_ms / med["halide"],
                   "speedup_vs_onnxruntime": med["onnxruntime"] / med["halide"],
                   "tuning_seconds": tune_s, "trials": trials, "best_config": best["config"]}
            layers.append(row)
            print(f"layer {i:>2} {row['shape']:<24} halide {gf['halide']:6.1f}  torch "
                  f"{task.flops / (torch_ms * 1e-3) / 1e9:6.1f}  ort {gf['onnxruntime']:6.1f} "
                  f"GFLOP/s   vs torch {row['speedup_vs_torch']:.2f}x  vs ort "
                  f"{row['speedup_vs_onnxruntime']:.2f}x  ({trials} trials, {tune_s:.0f}s)",
                  flush=True)

    def geomean(key):
        return math.exp(sum(math.log(r[key]) for r in layers) / len(layers)) if layers else None

    result = {"model": args.model, "threads": args.threads, "budget_per_layer_s": budget,
              "search": args.search, "machine": {"cpu": target.cpu, "isa": list(target.isa)},
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
