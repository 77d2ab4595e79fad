"""Issue 54's device run: GPU plans and per-layer conv candidates built here
(benchmarks/gpu_prepare.py), run on the lent GPU with numpy, ctypes and torch alone.

    python benchmarks/gpu_device.py BUNDLE --out DIR [--host] [--budget-s 480]

For each plan of the bundle (manifest.json): its weights are regenerated from the manifest's
seed and checked against the plan's sha256 (the bundle carries no weights: resnet50's alone
exceed what travels to the device), its output checked against the expected output computed
here (the plan's walk on the CPU) and against torch fp32 on the device running the plan's own
graph (same weights, TF32 off; `TorchPlan`); the per-node choice is made on the device
(GpuSession.choose: each step's generated kernel against its library call), DOS stages of
independent steps put on streams where measured faster (GpuSession.schedule), and the chosen
walk captured as a CUDA graph (GpuSession.graph), each checked the same way; then 30 interleaved
rounds time Woodpecker's launches as built, as chosen, the graph's replay, that torch module
eagerly (cuDNN/cuBLAS) and under torch.compile (inductor, max-autotune), all by CUDA events,
as paired ratios. The bundle's tuning batch
(tune/gpu_batch.py) is measured by the remote runner (runtime/gpu_measure.py: every
candidate checked against its task's numpy reference and timed by events) into
DIR/timings.json, which tune/gpu_batch.read_timings takes back into a tuning log here; each
conv layer's fastest generated candidate (direct or Winograd) is compared with cuDNN's
F.conv2d on the same input and with the batch's library candidate (cuDNN through the plan's
library step, its copy included: the choice the tuned plan is built with).
Results: DIR/gpu_results.json.

`--host` runs the same code on this CPU (host builds of the kernels, torch on the CPU): the
script's own check where no GPU is lent. The run stops starting new work after `--budget-s`.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import platform
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from woodpecker.gpu.devices import GpuDevice  # noqa: E402
from woodpecker.gpu.runtime import timed  # noqa: E402
from woodpecker.runtime.gpu_plan import LIBRARY, GpuPlan  # noqa: E402
from woodpecker.runtime.gpu_torch import clock, compute  # noqa: E402
from woodpecker.tasks import task_from_key  # noqa: E402

ROUNDS = 30


def generated_weights(doc: dict, seed: int) -> bytes:
    """weights.bin of a plan with He-initialised weights from numpy's PCG64 stream (stable
    across numpy versions, so here and on the device give the same bytes): matrices scaled by
    √(2 / fan-in), vectors (biases) by 0.1."""
    w = doc["weights"]
    blob = bytearray(w["bytes"])
    rng = np.random.default_rng(seed)
    for e in w["entries"]:
        shape = e["shape"]
        scale = np.float32(np.sqrt(2.0 / int(np.prod(shape[:-1])))) if len(shape) > 1 else \
            np.float32(0.1)
        a = (rng.standard_normal(shape, dtype=np.float32) * scale).astype(e["dtype"])
        blob[e["offset"]:e["offset"] + a.nbytes] = a.tobytes()
    return bytes(blob)


def restore_weights(folder: Path, seed: int) -> None:
    doc = json.loads((folder / "plan.json").read_text())
    data = generated_weights(doc, seed)
    if hashlib.sha256(data).hexdigest() != doc["weights"]["sha256"]:
        raise SystemExit(f"{folder.name}: regenerated weights differ from the plan's (numpy "
                         f"{np.__version__})")
    (folder / doc["weights"]["file"]).write_bytes(data)


def feeds_of(doc: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {s["name"]: rng.standard_normal(s["shape"], dtype=np.float32) for s in doc["inputs"]}


class TorchPlan:
    """The plan's graph as torch ops on the plan's weights (values NCHW, as the model's):
    the reference and the eager/compiled baseline on the same weights as the plan."""

    def __init__(self, plan: GpuPlan, torch, device: str, dtype=None) -> None:
        """`dtype`: the torch type to compute in (default float32; an fp16 plan's float16
        weights are widened)."""
        self.torch = torch
        dtype = dtype or torch.float32
        doc, blob = plan.doc, np.fromfile(plan.folder / plan.doc["weights"]["file"], np.uint8)
        entries = doc["weights"]["entries"]

        def weight(i):
            e = entries[i]
            n = int(np.prod(e["shape"])) * np.dtype(e["dtype"]).itemsize
            a = blob[e["offset"]:e["offset"] + n].view(e["dtype"]).reshape(e["shape"])
            t = torch.from_numpy(a.copy()).to(device)
            return t.to(dtype) if t.is_floating_point() else t
        self.doc, self.steps = doc, []
        for step in doc["steps"]:
            host = step.get("engine") == "host"
            task = None if host else task_from_key(step["task"])
            refs = step.get("library_args", step["args"])     # raw weights, not transformed
            consts = {j: weight(r["weight"]) for j, r in enumerate(refs) if "weight" in r}
            self.steps.append((step, task, consts))

    def __call__(self, **inputs):
        torch, values = self.torch, dict(inputs)
        for step, task, consts in self.steps:
            args = [consts[j] if j in consts else None if "none" in r else
                    self._value(values, r["value"])
                    for j, r in enumerate(step.get("library_args", step["args"]))]
            if task is None:           # a host step: the op's numpy reference, as the plan
                for ref, y in zip(step["outs"], self._host(step, args)):
                    values[ref["value"]] = y.reshape(self._shape(ref["value"]))
                continue
            # a layout conversion is the value itself in the model's layout
            y = args[0] if step.get("layout_conversion") else compute(torch, task, args)
            name = step["out"]["value"]
            values[name] = y.reshape(self._shape(name))
        return {spec["name"]: self._value(values, spec["name"]).reshape(spec["shape"])
                for spec in self.doc["outputs"]}

    def _host(self, step: dict, args: list) -> list:
        from woodpecker.ops import OPS
        from woodpecker.runtime.gpu_host_ops import decode_attrs

        device = next((a.device for a in args if a is not None), "cpu")
        out = OPS[step["op"]].reference(decode_attrs(step["attrs"]), *[
            None if a is None else a.float().cpu().numpy() if a.is_floating_point()
            else a.cpu().numpy() for a in args])
        return [self.torch.from_numpy(np.ascontiguousarray(y)).to(device)
                for y in (out if isinstance(out, (list, tuple)) else [out])]

    def _shape(self, name: str) -> list[int]:
        """A value's shape in the model (NCHW where the device holds it NHWC)."""
        v = self.doc["values"][name]
        s = v["shape"]
        return [s[0], s[3], s[1], s[2]] if v.get("nhwc") else s

    def _value(self, values: dict, name: str):
        """A value computed so far, or a view (Flatten, Reshape) of one, in its own shape."""
        if name in values:
            return values[name]
        v = self.doc["values"][name]
        return self._value(values, v["alias"]).reshape(v["shape"])


def run_plan(entry: dict, bundle: Path, torch, device: str, host: bool,
             rounds: int = ROUNDS, compile_mode: str = "max-autotune") -> dict:
    folder = bundle / entry["folder"]
    restore_weights(folder, entry["seed"])
    plan = GpuPlan.open(folder, digest=entry["digest"])
    if host:
        from woodpecker.assembly.gpu_host import HostMemory
        session = plan.session(HostMemory())
    else:
        session = plan.session()
    feeds = feeds_of(plan.doc)
    ours = session.run(feeds)
    half = plan.doc.get("precision") == "fp16"
    row = {"model": entry["model"], "batch": entry["batch"], "precision": plan.doc.get(
        "precision", "fp32"), "steps": len(plan.doc["steps"])}
    if (folder / "expected.npz").exists():     # the plan's walk on the build machine's CPU
        expected = np.load(folder / "expected.npz")
        row["max_abs_vs_expected"] = max(float(np.max(np.abs(ours[k] - expected[k])))
                                         for k in ours)
    if device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    tin = {k: torch.from_numpy(v).to(device) for k, v in feeds.items()}
    with torch.no_grad():         # the reference: torch in float32 on the plan's weights
        ref = {k: v.float().cpu().numpy()
               for k, v in TorchPlan(plan, torch, device)(**tin).items()}
    scale = max(float(np.max(np.abs(r))) for r in ref.values())
    bar = (1e-2 if half else 1e-3) * max(scale, 1.0)
    row["max_abs_vs_torch_fp32"] = max(float(np.max(np.abs(ours[k] - ref[k]))) for k in ours)
    row["torch_output_scale"], row["tolerance"] = scale, bar
    row["within_tolerance"] = row["max_abs_vs_torch_fp32"] <= bar
    # the per-node choice on this device (GpuSession.choose): each step's generated kernel
    # against its library call, the faster kept; its outputs checked the same way
    chosen = plan.session(session.memory if host else None)
    report, stages = [], ()
    try:
        report = chosen.choose(feeds)
        stages = chosen.schedule(feeds).stages   # DOS stages on streams (runtime/gpu_stages.py)
    except Exception as e:          # noqa: BLE001 - recorded; the walk as built goes on
        row["chosen_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        chosen.walk = None
    mixed = chosen.run(feeds)
    row["chosen"] = {"library_steps": sum(c.engine == LIBRARY for c in report),
                     "concurrent_stages": [sorted(s.nodes) for s in stages if len(s.nodes) > 1],
                     "max_abs_vs_torch_fp32": max(float(np.max(np.abs(mixed[k] - ref[k])))
                                                  for k in mixed),
                     "steps": [dataclasses.asdict(c) for c in report]}
    row["chosen"]["within_tolerance"] = row["chosen"]["max_abs_vs_torch_fp32"] <= bar
    # the baselines compute in the plan's precision
    dtype = torch.float16 if half else torch.float32
    module = TorchPlan(plan, torch, device, dtype)
    tin = {k: v.to(dtype) for k, v in tin.items()}
    compiled = None
    t0 = time.perf_counter()
    try:
        if compile_mode != "none":
            compiled = torch.compile(lambda **kw: module(**kw), mode=compile_mode)
            with torch.no_grad():
                compiled(**tin)
    except Exception as e:          # noqa: BLE001 - recorded, the run goes on
        row["compile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        compiled = None
    row["compile_s"] = round(time.perf_counter() - t0, 1)
    graph = None
    if not host:       # the chosen walk as one CUDA graph (GpuSession.graph)
        try:
            graph = chosen.graph()
            graph()
            chosen.memory.synchronize()
            replayed = chosen.fetch()
            row["graph_max_abs_vs_torch_fp32"] = max(
                float(np.max(np.abs(replayed[k] - ref[k]))) for k in replayed)
        except Exception as e:      # noqa: BLE001 - recorded, the run goes on
            row["graph_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            graph = None
    timer = clock(torch, device)
    times = {"woodpecker": [], "chosen": [], "graph": [], "eager": [], "compiled": []}
    with torch.no_grad():
        for _ in range(3):
            session.launch()
            module(**tin)
        for _ in range(rounds):
            for name, fn in (("woodpecker", session.launch), ("chosen", chosen.launch),
                             ("graph", graph),
                             ("eager", lambda: module(**tin)),
                             ("compiled", None if compiled is None else
                              lambda: compiled(**tin))):
                if fn is None:
                    continue
                _sync(torch, device)
                session.memory.synchronize()
                timer.start()
                fn()
                if name in ("woodpecker", "chosen", "graph"):
                    session.memory.synchronize()
                times[name].append(timer.stop())
    row["median_ms"] = {k: float(np.median(v)) for k, v in times.items() if v}
    for ours_name in ("woodpecker", "chosen", "graph"):
        for other in ("eager", "compiled"):
            if times[other] and times[ours_name]:
                ratios = [a / b for a, b in zip(times[ours_name], times[other])]
                key = f"{'ours' if ours_name == 'woodpecker' else ours_name}_over_{other}"
                row[key] = {"median": float(np.median(ratios)),
                            "per_round": [round(r, 4) for r in ratios]}
    return row


def summary(row: dict) -> dict:
    """A plan's row without its per-round and per-step lists (the log line of the run)."""
    brief = {k: v for k, v in row.items() if "_over_" not in k and k != "chosen"}
    if "chosen" in row:
        brief["library_steps"] = row["chosen"]["library_steps"]
        brief["chosen_ok"] = row["chosen"]["within_tolerance"]
    for k, v in row.items():
        if "_over_" in k:
            brief[k] = round(v["median"], 3)
    return brief


def _sync(torch, device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def run_batch(bundle: Path, torch, device: str, host: bool, out: Path) -> list[dict]:
    """The bundle's tuning batch measured (runtime/gpu_measure.py: every candidate checked
    against its task's reference and timed), its timings copied to `out` for
    tune/gpu_batch.read_timings; then each conv layer's fastest candidate against cuDNN's
    F.conv2d on the same input."""
    from woodpecker.runtime.gpu_measure import measure_batch, task_inputs

    kernel = None
    if host:
        from woodpecker.assembly.gpu_host import host_kernel as kernel
    results = measure_batch(bundle / "batch", runs=20, kernel=kernel,
                            library_device="cpu" if host else "cuda")
    shutil.copyfile(bundle / "batch" / "timings.json", out / "timings.json")
    rows = []
    for key in dict.fromkeys(r["task"] for r in results if r["template"] == "conv"):
        task = task_from_key(key)
        mine = [r for r in results if r["task"] == key]
        generated = [r for r in mine if r["template"] != LIBRARY]
        ok = [r for r in generated if "ms" in r]
        library = next((r["ms"] for r in mine if r["template"] == LIBRARY and "ms" in r), None)
        inputs = task_inputs(task)
        x = inputs[0] if task.reads_nchw else inputs[0].transpose(0, 3, 1, 2)
        x = torch.from_numpy(np.ascontiguousarray(x)).to(device)
        w = torch.from_numpy(np.ascontiguousarray(inputs[1].transpose(3, 2, 0, 1))).to(device)
        top, left, bottom, right = task.pads
        pad = (left, right, top, bottom)
        with torch.no_grad():           # cuDNN's conv alone: no bias, epilogue or copy
            ts = timed(lambda: torch.nn.functional.conv2d(torch.nn.functional.pad(x, pad), w,
                                                          None, task.stride, 0, task.dilation),
                       clock(torch, device), 20, 3)
        best = min(ok, key=lambda r: r["ms"]) if ok else None
        best = None if best is None else {k: best[k] for k in ("template", "config", "ms")}
        cudnn = float(np.median(ts))
        rows.append({"layer": task.describe(), "candidates": len(generated),
                     "wrong_or_failed": len(generated) - len(ok), "best": best,
                     "library_ms": library, "cudnn_ms": cudnn,
                     "best_over_cudnn": None if best is None else best["ms"] / cudnn})
    return rows


def smoke(bundle: Path, torch) -> dict:
    """The device's facts and a first check of the runtime — the driver's devices, the plan
    runtime bound to the primary context, a device-memory round trip — so a first run on a
    device says where it fails before any plan does."""
    out = {"cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "torch_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    try:
        from woodpecker.gpu import driver
        from woodpecker.gpu.runtime import CudaRuntime

        out["gpus"] = [GpuDevice.to_json(d) for d in driver.devices()]
        rt = CudaRuntime(bundle / "runtime.so")
        a = np.arange(1024, dtype=np.float32)
        view = rt.view(rt.alloc(a.nbytes), 0, a.shape, a.dtype)
        rt.upload(view, a)
        out["memory_round_trip"] = bool(np.array_equal(rt.download(view, np.empty_like(a)), a))
        out["memory_free_total"] = rt.memory_info()
    except Exception as e:        # noqa: BLE001 - the first device run reports, not dies
        out["smoke_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    print(json.dumps(out), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--out", required=True)
    ap.add_argument("--host", action="store_true", help="run on this CPU (a dry run)")
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--only", default="",
                    help="comma-separated plan folder names to run (default: every plan)")
    ap.add_argument("--no-batch", action="store_true", help="skip the tuning batch")
    ap.add_argument("--compile-mode", default="max-autotune",
                    help="torch.compile's mode for the compiled baseline (none: skip it)")
    args = ap.parse_args(argv)
    import torch

    start, bundle = time.perf_counter(), Path(args.bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    device = "cpu" if args.host else "cuda"
    facts = {"host": platform.node(), "python": platform.python_version(),
             "numpy": np.__version__, "torch": torch.__version__, "device": device}
    if not args.host:
        facts.update(smoke(bundle, torch))
    results = {"facts": facts, "manifest": manifest["built"], "plans": [], "layers": [],
               "skipped": list(manifest.get("skipped", []))}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    for entry in manifest["plans"]:
        if only and entry["folder"] not in only:
            continue
        if time.perf_counter() - start > args.budget_s:
            results["skipped"].append(f"plan {entry['folder']}: out of the run's time")
            continue
        try:
            row = run_plan(entry, bundle, torch, device, args.host, rounds=args.rounds,
                           compile_mode=args.compile_mode)
        except Exception as e:      # noqa: BLE001 - one plan's failure is reported
            row = {"entry": entry["folder"],
                   "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        results["plans"].append(row)
        print(json.dumps(summary(row))[:400], flush=True)
        (out / "gpu_results.json").write_text(json.dumps(results, indent=1))
    if manifest.get("batch") and not args.no_batch:
        if time.perf_counter() - start > args.budget_s:
            results["skipped"].append("tuning batch: out of the run's time")
        else:
            results["layers"] = run_batch(bundle, torch, device, args.host, out)
            for row in results["layers"]:
                print(json.dumps(row)[:300], flush=True)
    (out / "gpu_results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
