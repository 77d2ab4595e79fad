"""`woodpecker gpu-plan`: a model → a GPU plan folder built here for a CUDA device
(compiler_gpu.py), checked on this CPU against ONNX Runtime when asked."""

from __future__ import annotations

import sys


def cmd_gpu_plan(args) -> None:
    import numpy as np

    from woodpecker.compiler_gpu import check_on_host, compile_gpu
    from woodpecker.runtime.gpu_plan import GpuPlan

    folder = compile_gpu(args.model, args.output, args.target, progress=sys.stdout,
                         precision=args.precision)
    plan = GpuPlan.open(folder)
    host = [s["op"] for s in plan.doc["steps"] if s.get("engine") == "host"]
    print(f"GPU plan for {plan.device.describe()}: {len(plan.doc['steps']) - len(host)} "
          f"kernels, arena {plan.doc['arena_bytes'] / 2**20:.1f} MiB, weights "
          f"{plan.doc['weights']['bytes'] / 2**20:.1f} MiB -> {folder}")
    if host:
        print(f"  {len(host)} node(s) run on the host between copies (no GPU kernel computes "
              f"them): {', '.join(sorted(set(host)))}")
    if args.check:
        import onnxruntime as ort

        session = ort.InferenceSession(str(args.model), providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {spec["name"]: rng.standard_normal(spec["shape"]).astype(spec["dtype"])
                 for spec in plan.doc["inputs"]}
        got = check_on_host(folder, feeds)
        refs = dict(zip((o.name for o in session.get_outputs()), session.run(None, feeds)))
        worst = max(float(np.max(np.abs(got[k] - refs[k]))) for k in got)
        scale = max(float(np.max(np.abs(r))) for r in refs.values())
        print(f"checked on this CPU (the plan's walk, host-built kernels) against ONNX "
              f"Runtime: max |difference| {worst:.3g} (outputs up to {scale:.3g})")


def add_parser(sub) -> None:
    g = sub.add_parser("gpu-plan", help="build a GPU plan folder for a CUDA device (kernels "
                                        "built here, run on the device with numpy alone)")
    g.add_argument("model", help="an ONNX file")
    g.add_argument("-o", "--output", required=True, help="the plan folder to write")
    g.add_argument("--target", default="cuda:h100",
                   help="cuda (this host's device) or cuda:NAME / cuda:sm_NN (default: "
                        "cuda:h100)")
    g.add_argument("--precision", choices=["fp32", "fp16"], default="fp32",
                   help="fp16: every float tensor stored in half precision on the device "
                        "(computed in float32)")
    g.add_argument("--check", action="store_true",
                   help="run the plan's walk on this CPU and compare with ONNX Runtime")
    g.set_defaults(fn=cmd_gpu_plan)
