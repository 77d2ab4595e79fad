"""Which microkernel under the templates (issue 77, deliverable 2: "before hand-writing one,
measure the library that does it; choose by measurement and say why"): per 1x1 convolution
layer, libxsmm's JIT-generated register-blocked GEMM kernels (Debian's libxsmm 1.17, driven by
benchmarks/microkernels/xsmm_conv1x1.c: pixel x channel tiles, the epilogue on each tile)
against Woodpecker's best shipped Halide kernel for the same task and the libraries' own
kernels (OpenVINO's and ONNX Runtime's one-node sessions: oneDNN and MLAS).

Layers: the 1x1 stride-1 float32 conv tasks (bias, optional residual Add and Relu) that the
shipped tuning database holds records of for this host's target, the largest by FLOPs of each
distinct (C, K) — real layers of the zoo and the real-world set (RegNet, MobileNet, ResNet,
EfficientNet ...). The Halide kernel is the database's fastest record of the task (as a compile
on this machine would start from); libxsmm's blocks (pixels per tile `pb`, output channels `mb`)
are picked per layer by timing a small grid in its own process, each tile checked against the
task's numpy reference first. Each runtime runs in its own process, timed interleaved in
blocks (woodpecker/bench/isolated.py), 2 threads each; weights stay hot for all alike (the
per-layer kernel, not the plan: issue 77's in-plan gap is measured by in_plan_profile.py).

    python benchmarks/microkernel_choice.py --layers 10 --runs 60 \\
        --json benchmarks/results/microkernel_choice_<machine>.json

Needs gcc and `apt-get install libxsmm-dev` (the script says so if missing).
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "microkernels" / "xsmm_conv1x1.c"
LIBS = ("/usr/lib/libxsmm.a", "/usr/lib/libxsmmnoblas.a")
EPILOGUES = ({"Add", "Relu"})
PIXEL_BLOCKS = (4, 7, 8, 14, 16, 28, 32, 49, 56)
CHANNEL_BLOCKS = (16, 32, 64, 128)


def built_library() -> Path:
    """The harness's shared library, built once per source digest (gcc, -march=native)."""
    missing = [p for p in LIBS if not Path(p).exists()]
    if missing or shutil.which("gcc") is None:
        raise SystemExit("needs gcc and libxsmm (apt-get install libxsmm-dev): missing "
                         + ", ".join(missing or ["gcc"]))
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"wp-xsmm-{digest}.so"
    if not out.exists():
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-o",
                        str(tmp), str(SOURCE), *LIBS, "-lpthread", "-lm", "-ldl"], check=True)
        os.replace(tmp, out)
    return out


def _arrays(task):
    """x (P, C), w (C, K), bias (K) or None, residual (P, K) or None, in NHWC/HWIO order."""
    inputs = task.random_inputs(0)
    x = np.ascontiguousarray(inputs[0].reshape(-1, task.c))
    w = np.ascontiguousarray(inputs[1].reshape(task.c, task.k))
    rest = inputs[2:]
    bias = rest.pop(0) if task.has_bias else None
    res = rest.pop(0).reshape(-1, task.k) if any(s[0] == "Add" for s in task.epilogue) else None
    return inputs, x, w, bias, (np.ascontiguousarray(res) if res is not None else None)


def xsmm_runtime(task: dict, threads: int, out: str | None = None):
    """libxsmm's tiles for `task`, the best (pb, mb) of the grid; checked against the task's
    reference. Writes the blocks chosen to `out` (a JSON file) when given."""
    from woodpecker.tasks.conv import ConvTask

    t = ConvTask.from_json(task)
    # libgomp's threads sleep at once between loops instead of spinning (read as the library
    # loads): spinning, a tile barrier waited out whole scheduler slices (8 ms for a 0.04 ms
    # layer) whenever another process's thread held the other core
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    lib = ctypes.CDLL(str(built_library()))
    lib.wp_xsmm_init()
    f32 = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")
    lib.wp_xsmm_run.argtypes = [ctypes.c_int, f32, f32, ctypes.c_void_p, ctypes.c_void_p, f32]
    inputs, x, w, bias, res = _arrays(t)
    relu = int(any(s[0] == "Relu" for s in t.epilogue))
    y = np.empty((x.shape[0], t.k), np.float32)
    want = t.reference(inputs).reshape(y.shape)
    ptr = (bias.ctypes.data if bias is not None else None,
           res.ctypes.data if res is not None else None)
    best = None
    pixels = x.shape[0]
    for pb in sorted({b for b in (*PIXEL_BLOCKS, pixels) if pixels % b == 0 and b <= 64}):
        for mb in sorted({min(m, t.k) for m in CHANNEL_BLOCKS}):
            plan = lib.wp_xsmm_plan(x.shape[0], t.c, t.k, pb, mb, relu, threads)
            if plan < 0:
                continue
            lib.wp_xsmm_run(plan, x, w, *ptr, y)
            np.testing.assert_allclose(y, want, rtol=2e-4, atol=2e-4 * float(np.abs(want).max()))
            times = []
            for _ in range(15):
                t0 = time.perf_counter()
                lib.wp_xsmm_run(plan, x, w, *ptr, y)
                times.append(time.perf_counter() - t0)
            ms = float(np.median(times[3:])) * 1e3
            if best is None or ms < best[0]:
                best = (ms, plan, pb, mb)
    if best is None:
        raise RuntimeError("no libxsmm kernel for this layer")
    if out:
        Path(out).write_text(json.dumps({"pb": best[2], "mb": best[3]}))
    plan = best[1]
    return lambda: lib.wp_xsmm_run(plan, x, w, *ptr, y)


def halide_runtime(template: str, task: dict, config: dict, threads: int):
    from woodpecker.engines.halide.templates import kernel_arguments, template_module
    from woodpecker.tasks.conv import ConvTask

    t, module = ConvTask.from_json(task), template_module(template)
    kernel = module.build(t, config, threads)
    inputs = t.random_inputs(0)
    args = kernel_arguments(module, t, config, inputs)
    got = np.asarray(kernel(*args)).reshape(-1)
    want = t.reference(inputs).reshape(-1)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * float(np.abs(want).max()))
    return lambda: kernel(*args)


def library_runtime(name: str, task: dict, threads: int):
    """OpenVINO's or ONNX Runtime's session of the layer as one ONNX model (NCHW in and out,
    as a model gives it: the library picks its own blocked layout inside)."""
    import onnx
    from onnx import helper, numpy_helper

    from woodpecker.bench.runners import make_runner
    from woodpecker.tasks.conv import ConvTask

    t = ConvTask.from_json(task)
    inputs, _, w, bias, res = _arrays(t)
    x = np.ascontiguousarray(inputs[0].transpose(0, 3, 1, 2))
    shape = [t.n, t.k, t.h, t.w]
    inits = [numpy_helper.from_array(np.ascontiguousarray(w.T.reshape(t.k, t.c, 1, 1)), "w")]
    conv_in = ["x", "w"]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "b"))
        conv_in.append("b")
    nodes, last, feeds = [helper.make_node("Conv", conv_in, ["c"])], "c", {"x": x}
    graph_in = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))]
    for i, step in enumerate(t.epilogue):
        if step[0] == "Add":
            feeds["r"] = np.ascontiguousarray(res.reshape(t.n, t.h, t.w, t.k)
                                              .transpose(0, 3, 1, 2))
            graph_in.append(helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, shape))
            nodes.append(helper.make_node("Add", [last, "r"], [f"e{i}"]))
        else:
            nodes.append(helper.make_node("Relu", [last], [f"e{i}"]))
        last = f"e{i}"
    graph = helper.make_graph(nodes, "layer", graph_in, [helper.make_tensor_value_info(
        last, onnx.TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    run = make_runner(name, model.SerializeToString(), None, threads)
    got = run(feeds)[0].transpose(0, 2, 3, 1).reshape(-1)
    want = t.reference(inputs).reshape(-1)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * float(np.abs(want).max()))
    return lambda: run(feeds)


def shipped_layers(target_key: str, count: int) -> list[tuple[dict, dict]]:
    """(task JSON, best record) of the shipped database's 1x1 stride-1 fp32 conv tasks on this
    target whose epilogue this harness computes, the largest by FLOPs per distinct (C, K)."""
    from woodpecker.tasks.conv import ConvTask
    from woodpecker.tune.database import PACKAGED

    best: dict[str, dict] = {}
    with gzip.open(PACKAGED, "rt") as f:
        f.readline()
        for line in f:
            r = json.loads(line)
            if r["target"] != target_key or not r["task"].startswith("conv2d:"):
                continue
            t = json.loads(r["task"].split(":", 1)[1])
            if (t["kh"], t["kw"], tuple(t["stride"]), t["groups"], t["dtype"]) != \
                    (1, 1, (1, 1), 1, "float32") or t.get("prologue") or \
                    any(s[0] not in EPILOGUES for s in t["epilogue"]) or t["n"] != 1:
                continue
            if r["task"] not in best or r["cost_s"] < best[r["task"]]["cost_s"]:
                best[r["task"]] = r
    by_shape: dict[tuple, tuple] = {}
    for key, r in best.items():
        t = json.loads(key.split(":", 1)[1])
        flops = ConvTask.from_json(t).flops
        if (t["c"], t["k"]) not in by_shape or flops > by_shape[(t["c"], t["k"])][0]:
            by_shape[(t["c"], t["k"])] = (flops, t, r)
    rows = sorted(by_shape.values(), key=lambda v: -v[0])
    # spread over sizes: every len/count-th of the FLOPs ranking
    step = max(1, len(rows) // count)
    return [(t, r) for _, t, r in rows[::step][:count]]


def geomean(xs) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--layers", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=60)
    p.add_argument("--block", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args()

    from woodpecker.bench.compare import write_json
    from woodpecker.bench.isolated import IsolatedRuntime, isolated_medians
    from woodpecker.bench.runners import versions
    from woodpecker.lazy import Lazy
    from woodpecker.target import Target, machine_facts
    from woodpecker.tasks.conv import ConvTask

    built_library()
    target = Target.parse("cpu", args.threads)
    layers = shipped_layers(target.record_key, args.layers)
    if not layers:
        raise SystemExit(f"the shipped database holds no 1x1 conv records for {target.record_key}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (task, record) in enumerate(layers):
            t = ConvTask.from_json(task)
            blocks = Path(tmp) / f"blocks{i}.json"
            runtimes = {
                "halide": IsolatedRuntime(Lazy(__name__, "halide_runtime"),
                                          template=record["template"], task=task,
                                          config=record["config"], threads=args.threads),
                "libxsmm": IsolatedRuntime(Lazy(__name__, "xsmm_runtime"), task=task,
                                           threads=args.threads, out=str(blocks)),
                "openvino": IsolatedRuntime(Lazy(__name__, "library_runtime"),
                                            name="openvino", task=task, threads=args.threads),
                "onnxruntime": IsolatedRuntime(Lazy(__name__, "library_runtime"),
                                               name="onnxruntime", task=task,
                                               threads=args.threads)}
            med = isolated_medians(runtimes, args.runs, 3, block=args.block)
            row = {"layer": t.describe(), "task": task, "flops": t.flops,
                   "halide_template": record["template"], "halide_config": record["config"],
                   "libxsmm_blocks": json.loads(blocks.read_text()), "median_ms": med,
                   "gflops": {k: t.flops / (v * 1e-3) / 1e9 for k, v in med.items()},
                   "halide_over_openvino": med["halide"] / med["openvino"],
                   "libxsmm_over_openvino": med["libxsmm"] / med["openvino"],
                   "libxsmm_over_halide": med["libxsmm"] / med["halide"]}
            rows.append(row)
            g = row["gflops"]
            print(f"{row['layer']:<40} GFLOP/s halide {g['halide']:6.1f}  libxsmm "
                  f"{g['libxsmm']:6.1f}  openvino {g['openvino']:6.1f}  ort "
                  f"{g['onnxruntime']:6.1f}   ÷openvino: halide "
                  f"{row['halide_over_openvino']:.2f} libxsmm {row['libxsmm_over_openvino']:.2f}",
                  flush=True)
    result = {"machine": machine_facts(), "target": target.record_key, "threads": args.threads,
              "runs": args.runs, "versions": {**versions(), "libxsmm": "1.17 (Debian)"},
              "layers": rows,
              "geomean": {k: geomean([r[k] for r in rows]) for k in
                          ("halide_over_openvino", "libxsmm_over_openvino",
                           "libxsmm_over_halide")}}
    print("geomean time ÷ OpenVINO's: halide {halide_over_openvino:.3f}, libxsmm "
          "{libxsmm_over_openvino:.3f}; libxsmm ÷ halide {libxsmm_over_halide:.3f}"
          .format(**result["geomean"]))
    out = args.json or "benchmarks/results/microkernel_choice.json"
    print(f"wrote {write_json(out, result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
