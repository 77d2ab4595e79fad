"""The measurement worker: a separate process that builds and times candidates, so that a
kernel which crashes, hangs or corrupts memory takes down only this process.

Protocol: one JSON request per line on stdin, one JSON reply per line on stdout (no pickle).
Request: {"template": module path, "kind": task kind, "task": task JSON, "config": {...},
"repeats": int, "seed": int, optionally "reference": {"template", "config"}}. Reply:
{"ok": true, "cost_s", "compile_s", "rel_err", and "ratio" when paired} or {"ok": false, "error"}.
A request with "build_only": true only compiles the candidate into the kernel cache (see
tune/build_pool.py) and replies {"ok": true, "compile_s"} or the build error.
A candidate is valid only when its output matches the numpy reference (max error relative to
the reference's largest magnitude ≤ 1e-4). It is timed with its weights out of the caches, as
a plan runs it (tune/rotation.py).

With a reference kernel (another config of the same task, see tune/tuner.py) each timing round
runs the candidate and the reference back to back, in alternating order, and "ratio" is the
median over rounds of the candidate's time over the reference's: paired, as the benchmarks
compare engines, so that a change of the machine's speed between candidates cancels out.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np

from woodpecker.config import TOLERANCE
from woodpecker.engines.halide.templates import kernel_arguments, template_module
from woodpecker.tasks import spec_task
from woodpecker.tune.rotation import rotating_call


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    """The largest error relative to the reference's largest magnitude (what TOLERANCE bounds;
    in float64, so 8-bit outputs do not wrap around: one step off is 1/255 or more, refused)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(got - ref))) / max(float(np.max(np.abs(ref))), 1e-30)


def agrees(task, got: np.ndarray, ref: np.ndarray) -> tuple[bool, float]:
    """(whether a kernel's output `got` is the reference's, its relative error): float outputs
    within TOLERANCE, integer ones exact or within the task's `steps_off`."""
    rel = relative_error(got, ref)
    if np.asarray(ref).dtype.kind in "iu":
        steps = np.max(np.abs(np.asarray(got, np.int64) - np.asarray(ref, np.int64)), initial=0)
        return bool(steps <= task.steps_off), rel
    return rel <= TOLERANCE, rel


def _reference_call(req: dict, task, inputs: list, threads: int, kernels: dict):
    """The reference kernel's timed call (built once while it stays the reference), or None
    when there is no reference or it no longer builds or runs (the candidate is then timed
    alone)."""
    spec = req.get("reference")
    if not spec:
        return None
    key = json.dumps(spec, sort_keys=True)
    if key not in kernels:
        kernels.clear()   # the task's best moved on: keep one reference and its weight copies
        try:
            template = template_module(spec["template"])
            run = template.build(task, spec["config"], threads)
            args = kernel_arguments(template, task, spec["config"], inputs)
            run(*args)
            kernels[key] = rotating_call(run, args)
        except Exception:  # noqa: BLE001 - a stale reference only loses the pairing
            kernels[key] = None
    return kernels[key]


def _timings(call, reference, repeats: int) -> tuple[float, float | None]:
    """(median time of `call`, median of its time over `reference`'s per round or None); the
    two run in turns, the first of each round alternating."""
    kernels = [call] if reference is None else [call, reference]
    rounds = []
    for i in range(max(1, repeats)):
        step = -1 if i % 2 else 1
        rounds.append([_timed(k) for k in kernels[::step]][::step])
    ratios = [p[0] / p[1] for p in rounds if len(p) == 2 and p[1]]
    return statistics.median(p[0] for p in rounds), \
        (statistics.median(ratios) if ratios else None)


def _timed(call) -> float:
    t = time.perf_counter()
    call()
    return time.perf_counter() - t


def measure_one(req: dict, threads: int, cache: dict) -> dict:
    task = spec_task(req)
    template = template_module(req["template"])
    run, built = _build(template, task, req["config"], threads)
    if run is None or req.get("build_only"):
        return built
    key = (task.key, req.get("seed", 0))
    if key not in cache:
        inputs = task.random_inputs(req.get("seed", 0))
        cache.clear()
        cache[key] = (inputs, task.reference(inputs), {})
    inputs, ref, kernels = cache[key]
    args = kernel_arguments(template, task, req["config"], inputs)
    out = run(*args)
    if out.shape != ref.shape:
        return {"ok": False, "error": f"wrong output shape {out.shape}, expected {ref.shape}"}
    ok, rel = agrees(task, out, ref)
    if not ok:
        return {"ok": False, "error": f"wrong result: relative error {rel:.2e}"}
    call = rotating_call(run, args)   # weights cold, as in a plan
    reference = _reference_call(req, task, inputs, threads, kernels)
    _timings(call, reference, 2)      # warm-up
    cost, ratio = _timings(call, reference, req.get("repeats", 10))
    reply = {"ok": True, "cost_s": cost, "compile_s": built["compile_s"], "rel_err": rel}
    return reply if ratio is None else dict(reply, ratio=ratio)


def _build(template, task, config: dict, threads: int) -> tuple:
    """(the compiled kernel or None, the reply so far: its compile time or the build error)."""
    t0 = time.perf_counter()
    try:
        run = template.build(task, config, threads)
    except Exception as e:  # noqa: BLE001 - a compile error invalidates this candidate only
        return None, {"ok": False, "error": f"build failed: {str(e).splitlines()[0][:300]}"}
    return run, {"ok": True, "compile_s": time.perf_counter() - t0}


def _reply_channel():
    """The replies' own stream: the process's stdout, moved to a descriptor of its own, and
    descriptor 1 pointed at stderr — what a library prints (Halide's compile warnings go to
    stdout) can then never land among the replies and break the protocol."""
    sys.stdout.flush()
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return channel


def main() -> int:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    cache: dict = {}
    replies = _reply_channel()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = measure_one(json.loads(line), threads, cache)
        except Exception as e:  # noqa: BLE001 - report, keep serving
            reply = {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
