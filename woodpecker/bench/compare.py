"""Runtime-against-runtime latency comparison of a compiled model (`woodpecker bench`).

`benchmark` times the plan against the libraries interleaved (bench/timing.py) and records,
besides the medians and paired ratios, the per-round ratios' quartiles (`paired_quartiles`)
and `library_plan`: the library whose own session of the user's original graph the plan is
(library-first's whole-model plan), or None for a plan of Woodpecker's graph. `format_table`'s
headline says both where they matter: a library plan's ratio is that library against itself
or the other library, not Woodpecker's code; and a ratio whose interquartile range is wider
than its distance from 1.0 is within the measurement's noise (issue 76: a headline of 0.551x
for a plan that was OpenVINO's session said neither)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from woodpecker.bench.runners import OPENVINO, Runner, make_runner, versions
from woodpecker.bench.timing import paired_ratio, paired_ratios, time_interleaved
from woodpecker.engines.names import ONNXRUNTIME, TORCH
from woodpecker.engines.torch_engine import settle_threads
from woodpecker.errors import WoodpeckerError
from woodpecker.ops.opaque import OP as OPAQUE
from woodpecker.ops.opaque import WHOLE_MODEL
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.target import machine_facts

FASTEST_LIBRARY = "fastest library"   # per round, the faster of ONNX Runtime and OpenVINO
LIBRARY_NAMES = {ONNXRUNTIME: "ONNX Runtime", OPENVINO: "OpenVINO"}   # as the headline says them


def library_session(model: CompiledModel) -> str | None:
    """The engine whose one session of the user's original graph `model` is (library-first's
    whole-model plan: frontend/whole.py), None for a plan of Woodpecker's graph."""
    nodes = model.graph.nodes
    if len(nodes) == 1 and nodes[0].op == OPAQUE and \
            nodes[0].attrs.get("op_type") == WHOLE_MODEL:
        return model.plan.choices[nodes[0].name].engine
    return None


def default_runtimes(zoo_meta: dict | None) -> list[str]:
    """What `bench` compares against by default: ONNX Runtime, OpenVINO where it is installed,
    and PyTorch for zoo models (whose PyTorch module can be rebuilt) where it is installed."""
    import importlib.util

    out = [ONNXRUNTIME]
    if importlib.util.find_spec(OPENVINO) is not None:   # runtimes named as their packages
        out.append(OPENVINO)
    if zoo_meta and "woodpecker.zoo" in zoo_meta and importlib.util.find_spec(TORCH):
        out.append(TORCH)
    return out


def write_json(path: "str | Path", doc: dict) -> Path:
    """Write a benchmark result as indented JSON, creating folders; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    return out


def _stats(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"median_ms": float(np.median(a)), "p10_ms": float(np.percentile(a, 10)),
            "p90_ms": float(np.percentile(a, 90)), "runs": len(ms)}


def random_feeds(model: CompiledModel, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape, dtype in model.inputs:
        if np.issubdtype(dtype, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[name] = rng.integers(0, 10, shape).astype(dtype)
    return feeds


def benchmark(model: CompiledModel, onnx_bytes: bytes, against: list[str], runs: int = 50,
              warmup: int = 5, seed: int = 0, zoo_meta: dict | None = None,
              progress: Callable[[int, int], None] | None = None, block: int = 1,
              variants: dict[str, CompiledModel] | None = None,
              feeds: dict[str, np.ndarray] | None = None) -> dict:
    """Woodpecker vs `against` on one random input; diffs are against ONNX Runtime's outputs.
    With both ONNX Runtime and OpenVINO, the result also holds `FASTEST_LIBRARY`: per round the
    faster of the two, the runtime a user would otherwise pick (the headline ratio).
    `variants`: further compiled models with the same inputs (the plan on fewer threads, say),
    timed in the same rounds under their names. `feeds`: the input (default: random, `seed`)
    — a model that refuses random values (a sample rate, indices) needs its own."""
    if runs < 1 or warmup < 0 or block < 1:
        raise WoodpeckerError(f"benchmark needs runs >= 1, warmup >= 0 and block >= 1; got "
                              f"{runs}, {warmup}, {block}")
    threads = model.plan.target.threads
    feeds = random_feeds(model, seed) if feeds is None else feeds
    ours = model.run(feeds)
    ort = make_runner(ONNXRUNTIME, onnx_bytes, zoo_meta, threads)
    ref = ort(feeds)
    abs_diff, rel_diff = 0.0, 0.0
    for (name, _, _), r in zip(model.outputs, ref):
        d = float(np.max(np.abs(ours[name].astype(np.float64) - r))) if r.size else 0.0
        abs_diff = max(abs_diff, d)
        rel_diff = max(rel_diff, d / max(float(np.max(np.abs(r))), 1e-30) if r.size else 0.0)
    runners: dict[str, Runner] = {"woodpecker": model.run}
    runners.update({name: v.run for name, v in (variants or {}).items()})
    for name in against:
        runners[name] = ort if name == ONNXRUNTIME else make_runner(name, onnx_bytes, zoo_meta,
                                                                        threads)
    calls = {name: (lambda fn=fn: fn(feeds)) for name, fn in runners.items()}
    times = time_interleaved(calls, runs, warmup, progress, block,
                             settle={TORCH: settle_threads})
    if ONNXRUNTIME in times and OPENVINO in times:
        # the headline: the faster of the two libraries in each round
        times[FASTEST_LIBRARY] = [min(a, b) for a, b in zip(times[ONNXRUNTIME], times[OPENVINO])]
    results = {name: _stats(ms) for name, ms in times.items()}
    wp = results["woodpecker"]["median_ms"]
    return {
        "model": model.graph.name if not zoo_meta else zoo_meta.get("woodpecker.zoo"),
        "runs": runs, "warmup": warmup, "block": block, "threads": threads, "seed": seed,
        "machine": machine_facts(),
        "versions": versions(),
        "engines": sorted(set(model.plan.engines)),
        "results": results,
        "speedup_vs": {n: results[n]["median_ms"] / wp for n in results if n != "woodpecker"},
        "paired_speedup_vs": {n: paired_ratio(times, "woodpecker", n) for n in results
                              if n != "woodpecker"},
        "paired_quartiles": {n: [float(q) for q in np.percentile(
            paired_ratios(times, "woodpecker", n), [25, 75])] for n in results
            if n != "woodpecker"},
        "library_plan": library_session(model),
        "max_abs_diff": abs_diff, "max_rel_diff": rel_diff,
    }


def format_table(result: dict) -> str:
    lines = [f"model {result['model']}  runs {result['runs']}  threads {result['threads']}  "
             f"max_rel_diff vs onnxruntime {result['max_rel_diff']:.2e}",
             f"{'runtime':<16} {'median ms':>10} {'p10 ms':>9} {'p90 ms':>9} "
             f"{'wp speed-up':>12} {'paired':>8}"]
    for name, r in result["results"].items():
        sp = result["speedup_vs"].get(name)
        paired = result.get("paired_speedup_vs", {}).get(name)
        lines.append(f"{name:<16} {r['median_ms']:>10.3f} {r['p10_ms']:>9.3f} {r['p90_ms']:>9.3f} "
                     f"{'' if sp is None else f'{sp:.3f}x':>12} "
                     f"{'' if paired is None else f'{paired:.3f}x':>8}")
    return "\n".join(lines + headline(result))


def headline(result: dict) -> list[str]:
    """The headline's lines: the paired ratio to the faster library per round (to ONNX Runtime
    where OpenVINO was not timed); what it compares where the plan is a library's session; and
    whether the per-round ratios' interquartile range leaves it within noise."""
    paired = result.get("paired_speedup_vs", {})
    against = next((n for n in (FASTEST_LIBRARY, ONNXRUNTIME) if n in paired), None)
    if against is None:
        return []
    ratio = paired[against]
    what = f"the faster of {ONNXRUNTIME} and {OPENVINO}" if against == FASTEST_LIBRARY \
        else against
    lines = [f"headline: Woodpecker is {ratio:.3f}x the speed of {what} (paired per round; "
             "> 1: Woodpecker faster)"]
    library = result.get("library_plan")
    if library is not None:
        name = LIBRARY_NAMES.get(library, library)
        others = [LIBRARY_NAMES.get(n, n) for n in (ONNXRUNTIME, OPENVINO)
                  if n != library and n in result.get("results", {})]
        if against == FASTEST_LIBRARY:
            vs = f"against itself where it was the faster library, else against {others[0]}" \
                if others else "against itself"
        else:
            vs = "against itself" if against == library else \
                f"against {LIBRARY_NAMES.get(against, against)}"
        lines.append(f"  the plan is {name}'s session of your graph: the ratio is {name} {vs}, "
                     "not Woodpecker's own kernels")
    quartiles = result.get("paired_quartiles", {}).get(against)
    if quartiles is not None and quartiles[1] - quartiles[0] > abs(ratio - 1.0):
        lines.append(f"  within noise: the per-round ratios' interquartile range "
                     f"({quartiles[0]:.3f}x to {quartiles[1]:.3f}x) is wider than the ratio's "
                     "distance from 1.0")
    return lines
