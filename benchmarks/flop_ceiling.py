"""How much faster than the faster library any plan could run each real-world model on this
machine: a compute bound from the model's FLOPs and the fastest matrix product any runtime here
reaches (issue 52's acceptance asks for faster library ÷ ours ≥ 1.10 at 3 minutes, ≥ 1.20 at
15).

    python benchmarks/flop_ceiling.py [--results benchmarks/results/open_world_3m_db_zen5.json]
        [--json benchmarks/results/flop_ceiling_zen5.json]

The ceiling is the rate of the fastest float32 matrix product measured here (a 2048-square
product on ONNX Runtime and on OpenVINO; the faster), timed in the same interleaved rounds as
the model on both libraries — this machine's speed moves by 15 % within an hour, so a ceiling
from another moment proves nothing. It is measured, not the datasheet's peak. A model's bound is

    bound = ceiling × faster library's median ÷ (FLOPs that cannot beat the ceiling)

— the most any plan can gain over the faster library if every such FLOP ran at the ceiling and
everything else took no time (a quantized model's products run on integer units: no bound).
Counted: every node's FLOPs (`ops` registry; nodes Woodpecker does not define count none)
except k×k convolutions with k > 1, stride 1 and no groups, whose FLOPs Winograd or FFT can
cut below the product's count: they are left out (as free). So the bound errs high: a model
whose bound is under 1.10 cannot reach 1.10 against that library on any kernel, tuned however
long. `--results` (an `open_world_e2e.py` run) gives the models and the ratios Woodpecker's
plans reached, shown beside.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.realworld import input_shapes, load_manifest, make_inputs  # noqa: E402
from woodpecker.bench.compare import write_json  # noqa: E402
from woodpecker.bench.runners import (  # noqa: E402
    make_runner,
    onnxruntime_runner,
    openvino_runner,
    versions,
)
from woodpecker.bench.timing import time_interleaved  # noqa: E402
from woodpecker.engines.names import ONNXRUNTIME, OPENVINO  # noqa: E402
from woodpecker.frontend.onnx_import import import_onnx  # noqa: E402
from woodpecker.ops.opaque import OP as OPAQUE  # noqa: E402
from woodpecker.ops.registry import OPS  # noqa: E402
from woodpecker.target import machine_facts  # noqa: E402

# The ceiling's product: measured here (Zen 5, 2 threads), 2048-square products ran at 365-436
# GFLOP/s on ONNX Runtime and OpenVINO, 1024-square ones at 239-425, the transformer shapes
# (128x768 . 768x3072 and back) at 157-337, PyTorch's at most 211.
CEILING_N = 2048
# ops of a quantized model: its products run on integer units, which a float32 ceiling does
# not bound (no bound is given)
INTEGER = ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger",
           "MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeLSTM")


def _matmul_onnx(m: int, k: int, n: int) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, n), np.float32),
                                "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def ceiling_runners(threads: int) -> tuple[dict, float]:
    """The ceiling's callables (a 2048-square float32 product on ONNX Runtime and on
    OpenVINO, the largest rates either reached here) and each call's FLOPs."""
    n = CEILING_N
    x = {"x": np.random.default_rng(1).standard_normal((n, n), np.float32)}
    onnx_bytes = _matmul_onnx(n, n, n)
    ort, ov = onnxruntime_runner(onnx_bytes, threads), openvino_runner(onnx_bytes, threads)
    return {"ceiling on onnxruntime": lambda: ort(x), "ceiling on openvino": lambda: ov(x)}, \
        2.0 * n ** 3


def _winograd_able(node) -> bool:
    if node.op not in ("Conv", "FusedConv"):
        return False
    kernel = node.inputs[1].shape[2:] if node.inputs[1].shape else ()
    strides = node.attrs.get("strides") or [1] * len(kernel)
    return (len(kernel) >= 2 and all(k > 1 for k in kernel) and all(s == 1 for s in strides)
            and int(node.attrs.get("group", 1)) == 1)


def model_flops(entry: dict) -> dict:
    """The model's FLOPs: all, those of Winograd-able convolutions, and whether some nodes are
    ones Woodpecker does not define (their FLOPs not counted)."""
    graph = import_onnx(entry["abs_path"], input_shapes=input_shapes(entry))
    total = free = 0
    opaque = 0
    integer = any(n.op in INTEGER or n.attrs.get("op_type") in INTEGER for n in graph.nodes)
    for node in graph.nodes:
        f = int(OPS[node.op].flops(node))
        total += f
        free += f if _winograd_able(node) else 0
        opaque += node.op == OPAQUE
    return {"gflop": total / 1e9, "winograd_able_gflop": free / 1e9, "opaque_nodes": opaque,
            "integer": integer}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default="benchmarks/results/open_world_3m_db_zen5.json",
                   help="an open_world_e2e.py run: its models, and its ratios shown beside")
    p.add_argument("--models", help="comma-separated names (default: the run's)")
    p.add_argument("--json", default="benchmarks/results/flop_ceiling.json")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args()
    run = {r["name"]: r for r in json.loads(Path(args.results).read_text())["models"]}
    names = args.models.split(",") if args.models else list(run)
    entries = {e["name"]: e for e in load_manifest()["models"]}
    top, per_call = ceiling_runners(args.threads)
    rows = []
    for name in names:
        try:
            entry = entries[name]
            f = model_flops(entry)
            feeds = make_inputs(entry)
            model = Path(entry["abs_path"]).read_bytes()
            libs = {lib: make_runner(lib, model, None, args.threads)
                    for lib in (ONNXRUNTIME, OPENVINO)}
        except Exception as e:  # noqa: BLE001 - a model Woodpecker cannot count: said, skipped
            print(f"{name:42s} skipped: {str(e).splitlines()[0][:100]}", flush=True)
            continue
        times = time_interleaved({**{k: (lambda r=r: r(feeds)) for k, r in libs.items()}, **top},
                                 args.runs, warmup=2)
        med = {k: float(np.median(t)) for k, t in times.items()}
        lib = min(med[ONNXRUNTIME], med[OPENVINO])
        peak = max(per_call / med[k] / 1e6 for k in top)       # GFLOP/s, these rounds
        counted = f["gflop"] - f["winograd_able_gflop"]
        achieved = counted / lib * 1e3                          # GFLOP/s
        bound = peak / achieved if achieved > 0 and not f["integer"] else math.inf
        observed = run.get(name, {}).get("ratio_to_faster_library")
        rows.append({"name": name, **{k: round(v, 4) if isinstance(v, float) else v
                                      for k, v in f.items()},
                     "median_ms": {k: round(v, 4) for k, v in med.items()},
                     "ceiling_gflops_per_s": round(peak, 1),
                     "counted_gflops_per_s": round(achieved, 1),
                     "bound": round(bound, 3) if math.isfinite(bound) else None,
                     "observed": round(1 / observed, 3) if observed else None})
        print(f"{name:42s} {f['gflop']:7.2f} GFLOP ({f['winograd_able_gflop']:5.2f} Winograd-"
              f"able); faster library {lib:7.2f} ms: {achieved:5.0f} GFLOP/s of {peak:3.0f} -> "
              f"bound {bound:5.2f}" + (f", observed {1 / observed:.3f}" if observed else ""),
              flush=True)
    finite = [r["bound"] for r in rows if r["bound"] is not None]
    summary = {"models": len(rows), "bounded": len(finite),
               "under_1_10": [r["name"] for r in rows if (r["bound"] or math.inf) < 1.10],
               "under_1_20": [r["name"] for r in rows if (r["bound"] or math.inf) < 1.20],
               "geomean_bound": round(math.exp(sum(math.log(b) for b in finite) / len(finite)),
                                      3) if finite else None}
    print(f"bound under 1.10: {len(summary['under_1_10'])} of {len(finite)}, under 1.20: "
          f"{len(summary['under_1_20'])}; geomean of the bounds {summary['geomean_bound']}")
    write_json(args.json, {"machine": machine_facts(), "versions": versions(),
                           "results": args.results, "runs": args.runs,
                           "ceiling": f"{CEILING_N}-square float32 MatMul, the faster of "
                                      "onnxruntime and openvino in the model's rounds",
                           "summary": summary, "models": rows})
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
