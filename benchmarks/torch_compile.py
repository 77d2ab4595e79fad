"""torch.compile with Woodpecker as the backend, against eager PyTorch, torch.compile's default
backend (inductor), ONNX Runtime and OpenVINO (issue 34): per model, after a tuning of the
given budget, one interleaved run (bench/timing.time_interleaved), 2 threads everywhere.

    python benchmarks/torch_compile.py --budget 3m --runs 30 \\
        [--tuning-log resnet18=L.jsonl ...] --json benchmarks/results/torch_compile_<machine>.json

Models: resnet18, mobilenet_v2 and nn.TransformerEncoder from the zoo, BERT and DistilBERT built
from `transformers` configs (random weights). Every runtime gets the same module under
`torch.no_grad()`; nn.TransformerEncoder's fused fast path is switched off
(`torch.backends.mha.set_fastpath_enabled(False)`) so that every runtime runs the same
arithmetic (its fused op has no ONNX export). ONNX Runtime and OpenVINO run the module exported
by torch's current exporter. A model with a tuning log given is compiled from it without
tuning (the zoo's resnet18 tasks are the ones its torch.compile graph has). Reported: median ms,
the paired ratio of each runtime to Woodpecker's, the largest difference from eager.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import torch

from woodpecker.bench.compare import cpu_info, write_json
from woodpecker.bench.runners import OPENVINO, make_runner, versions
from woodpecker.bench.timing import paired_ratio, time_interleaved
from woodpecker.engines.names import ONNXRUNTIME
from woodpecker.frontend.torch_import import export_module
from woodpecker.zoo.models import build_module, model_input

THREADS = 2


def transformers_model(name: str):
    import transformers as tf

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (1, 64), generator=g)
    mask = torch.ones(1, 64, dtype=torch.long)
    if name == "bert":
        cfg = tf.BertConfig(vocab_size=1000, hidden_size=256, num_hidden_layers=4,
                            num_attention_heads=4, intermediate_size=1024,
                            max_position_embeddings=128)
        module = tf.BertModel(cfg)
    else:
        cfg = tf.DistilBertConfig(vocab_size=1000, dim=256, n_layers=4, n_heads=4,
                                  hidden_dim=1024, max_position_embeddings=128)
        module = tf.DistilBertModel(cfg)
    return module.eval(), {"input_ids": ids, "attention_mask": mask}


def model(name: str):
    torch.manual_seed(0)
    if name in ("bert", "distilbert"):
        return transformers_model(name)
    return build_module(name).eval(), {"x": torch.from_numpy(model_input(name))}


def first(out):
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2,transformer_encoder,bert,"
                                        "distilbert")
    ap.add_argument("--budget", default="3m")
    ap.add_argument("--tuning-log", action="append", default=[], metavar="MODEL=LOG")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    logs = dict(s.split("=", 1) for s in args.tuning_log)
    torch.set_num_threads(THREADS)
    torch.backends.mha.set_fastpath_enabled(False)
    cpu, isa = cpu_info()
    doc = {"machine": {"cpu": cpu, "isa": isa}, "threads": THREADS, "budget": args.budget,
           "versions": versions(), "models": {}}
    cache = tempfile.mkdtemp()
    print(f"{'model':<20} {'runtime':<12} {'ms':>8} {'÷woodpecker':>12} {'max diff':>10}")
    for name in args.models.split(","):
        module, inputs = model(name)
        keywords = name in ("bert", "distilbert")

        def call(m, inputs=inputs, keywords=keywords):
            return (lambda: m(**inputs)) if keywords else (lambda: m(inputs["x"]))

        with torch.no_grad():
            expected = first(call(module)()).numpy()
            opts = {"cache": cache, "threads": THREADS}
            opts |= {"tuning_log": logs[name]} if name in logs else {"tune": args.budget}
            t0 = time.monotonic()
            ours = torch.compile(module, backend="woodpecker", options=opts)
            got = first(call(ours)()).numpy()
            compile_s = time.monotonic() - t0
            t0 = time.monotonic()
            inductor = torch.compile(module)
            call(inductor)()
            inductor_s = time.monotonic() - t0
            onnx_bytes = export_module(module, inputs if keywords else (inputs["x"],),
                                       exporters=("dynamo",))
            feeds = {k: v.numpy() for k, v in inputs.items()}
            runners = {"woodpecker": call(ours), "eager": call(module),
                       "inductor": call(inductor)}
            for lib in (ONNXRUNTIME, OPENVINO):
                run = make_runner(lib, onnx_bytes, None, THREADS)
                names = _input_names(onnx_bytes)
                runners[lib] = (lambda run=run, names=names:
                                run(dict(zip(names, feeds.values()))))
            times = time_interleaved(runners, runs=args.runs, warmup=3)
        rows = doc["models"][name] = {"compile_s": round(compile_s, 1),
                                      "inductor_compile_s": round(inductor_s, 1),
                                      "max_abs_diff_vs_eager": float(np.max(np.abs(got -
                                                                                   expected))),
                                      "results": {}}
        for rt, ms in times.items():
            r = rows["results"][rt] = {"median_ms": float(np.median(ms)),
                                       "paired_ratio_to_woodpecker":
                                           paired_ratio(times, "woodpecker", rt)}
            diff = rows["max_abs_diff_vs_eager"] if rt == "woodpecker" else None
            print(f"{name:<20} {rt:<12} {r['median_ms']:>8.3f} "
                  f"{r['paired_ratio_to_woodpecker']:>12.3f} "
                  f"{'' if diff is None else f'{diff:.2e}':>10}", flush=True)
    if args.json:
        write_json(args.json, doc)
    return 0


def _input_names(onnx_bytes: bytes) -> list[str]:
    import onnx

    m = onnx.load_from_string(onnx_bytes)
    inits = {i.name for i in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits]


if __name__ == "__main__":
    raise SystemExit(main())
