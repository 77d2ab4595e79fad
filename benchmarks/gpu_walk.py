"""GPU plans of models Woodpecker did not write, checked on this CPU (issue 54, device-free):
each model's plan built for a cuda target with untuned seeds, walked on the host
(compiler_gpu.check_on_host: the plan's own offsets, views, layout conversions, host steps and
every kernel's loop nest built for the CPU) and compared with ONNX Runtime on the same input.

    python benchmarks/gpu_walk.py [--zoo NAME,...] [--wheel NAME,...] [--target cuda:h200]
        [--out benchmarks/results/gpu_walk.json]

`--zoo` takes zoo models (their seeded input), `--wheel` the pretrained models of
benchmarks/realworld.py's wheels (cached under the Woodpecker cache by that script; their
recorded input shapes and deterministic inputs). Per model: steps, layout conversions, host
steps and their ops, max |difference| and the output's scale. Correctness only: nothing here
is timed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.realworld import WHEEL_MODELS, input_shapes, make_inputs  # noqa: E402
from woodpecker.cache import cache_dir  # noqa: E402
from woodpecker.compiler_gpu import check_on_host, compile_gpu  # noqa: E402
from woodpecker.runtime.gpu_plan import GpuPlan  # noqa: E402
from woodpecker.target import machine_facts  # noqa: E402
from woodpecker.zoo import export  # noqa: E402
from woodpecker.zoo.models import model_input  # noqa: E402


def walk(path: str, feeds: dict, folder: Path, target: str, shapes=None) -> dict:
    plan = GpuPlan.open(compile_gpu(path, folder, target, input_shapes=shapes))
    got = check_on_host(plan.folder, feeds)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ref = dict(zip((o.name for o in session.get_outputs()), session.run(None, feeds)))
    steps = plan.doc["steps"]
    host = [s["op"] for s in steps if s.get("engine") == "host"]
    return {"steps": len(steps), "host_steps": len(host), "host_ops": sorted(set(host)),
            "layout_conversions": sum(1 for s in steps if s.get("layout_conversion")),
            "max_abs": max(float(np.max(np.abs(got[k].astype(np.float64) - ref[k])))
                           for k in got),
            "output_scale": max(float(np.max(np.abs(ref[k]))) for k in got)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", default="")
    ap.add_argument("--wheel", default="")
    ap.add_argument("--target", default="cuda:h200")
    ap.add_argument("--out", default="benchmarks/results/gpu_walk.json")
    ap.add_argument("--work", default="/tmp/woodpecker_gpu_walk")
    args = ap.parse_args(argv)
    cases = [("zoo", n) for n in filter(None, args.zoo.split(","))] + \
        [("wheel", n) for n in filter(None, args.wheel.split(","))]
    wheels = {spec.name: spec for spec in WHEEL_MODELS}
    rows = []
    for group, name in cases:
        t0 = time.perf_counter()
        row = {"group": group, "model": name}
        try:
            if group == "zoo":
                path = str(export(name))
                feeds = {"input": model_input(name)}
                row.update(walk(path, feeds, Path(args.work) / name, args.target))
            else:
                entry = {"name": name, "inputs": wheels[name].inputs}
                path = str(cache_dir() / "realworld" / "wheel" / f"{name}.onnx")
                row.update(walk(path, make_inputs(entry), Path(args.work) / name, args.target,
                                input_shapes(entry)))
        except Exception as e:      # noqa: BLE001 - one model's failure is reported
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        row["seconds"] = round(time.perf_counter() - t0)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"machine": machine_facts(), "target": args.target, "onnxruntime": ort.__version__,
           "models": rows}
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
