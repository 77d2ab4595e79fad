"""Issue 53's int8 kernel schedule comparisons: two choices in the int8 conv kernels, each timed
both ways on ResNet-50's layers (uint8 in and out), hot caches, in one process, interleaved in
blocks, 2 threads (an AMX host: the kernels are `qconv_amx`'s).

- `parallel`: the flat walk (outputs narrower than 16 pixels: the 14² and 7² layers) with its
  output rows in parallel, each computing its pixel tiles one channel tile after another
  (`pixels`, two thread-pool launches per 16 channels), or its channel tiles in parallel, each
  computing every pixel tile (`channels`).
- `reciprocal`: a fused residual program (DequantizeLinear → Add → QuantizeLinear on the
  requantised value and an 8-bit residual) whose QuantizeLinear divides by its scale, or
  multiplies by its reciprocal (what `ops/fused.with_reciprocals` marks where exact).

Each variant's output is checked against the task's reference first. Medians per variant and
the paired ratio (second variant over the first, call by call) go to the table and the JSON.

    python benchmarks/int8_schedules.py --runs 40 --json benchmarks/results/int8_schedules_emr.json
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from woodpecker.bench.compare import write_json  # noqa: E402
from woodpecker.bench.runners import versions  # noqa: E402
from woodpecker.bench.timing import paired_ratios, time_interleaved  # noqa: E402
from woodpecker.engines.halide import qconv_amx  # noqa: E402
from woodpecker.engines.halide.aot import halide_version  # noqa: E402
from woodpecker.engines.halide.host import host_has_amx, request_amx  # noqa: E402
from woodpecker.engines.halide.templates import kernel_arguments  # noqa: E402
from woodpecker.target import machine_facts  # noqa: E402
from woodpecker.tasks.qconv import QConvTask  # noqa: E402

THREADS = 2


def _conv(c: int, hw: int, k: int, kernel: int, stride: int = 1) -> QConvTask:
    pad = kernel // 2
    return QConvTask(1, c, hw, hw, k, kernel, kernel, (stride, stride), (pad,) * 4, (1, 1))


# ResNet-50's flat-walk layers (the 14² and 7² stages)
FLAT = {"1x1 512->2048 @7": _conv(512, 7, 2048, 1), "3x3 512->512 @7": _conv(512, 7, 512, 3),
        "1x1 2048->512 @7": _conv(2048, 7, 512, 1), "1x1 256->1024 @14": _conv(256, 14, 1024, 1),
        "3x3 256->256 @14": _conv(256, 14, 256, 3), "1x1 1024->256 @14": _conv(1024, 14, 256, 1),
        "1x1/2 1024->2048 @14": _conv(1024, 14, 2048, 1, 2)}
# ResNet-50's residual convs with their programs (each stage's 1×1 expansion)
RESIDUAL = {"1x1 64->256 @56": _conv(64, 56, 256, 1), "1x1 128->512 @28": _conv(128, 28, 512, 1),
            "1x1 256->1024 @14": _conv(256, 14, 1024, 1)}


def residual_program(reciprocal: bool) -> tuple:
    """DequantizeLinear(y) + DequantizeLinear(residual) → QuantizeLinear, uint8 throughout."""
    dq = lambda i, c: ("DequantizeLinear", (("in", i), ("const", c), ("const", c + 1)),  # noqa: E731
                       (("dtype", "uint8"),))
    return (dq(0, 0), dq(1, 2), ("Add", (("step", 0), ("step", 1)), ()),
            ("QuantizeLinear", (("step", 2), ("const", 4), ("const", 5)),
             (("dtype", "uint8"),) + ((("reciprocal", True),) if reciprocal else ())))


def _runner(task: QConvTask, config: dict):
    """The kernel's call on its task's random inputs, checked against the reference once."""
    kernel = qconv_amx.build(task, config, THREADS)
    inputs = task.random_inputs(0)
    args = kernel_arguments(qconv_amx, task, config, inputs)
    out = np.empty(task.out_shape, task.out_dtype)
    kernel(*args, out=out)
    if not np.array_equal(out, task.reference(inputs)):
        raise SystemExit(f"{task.describe()} {config}: output differs from the reference")
    return lambda: kernel(*args, out=out)


def cases() -> list[tuple[str, str, dict]]:
    """(comparison, layer, {variant: runner}) for every case."""
    flat = {"walk": "flat", "channels": "outer", "input": "copy"}
    out = [("parallel", name, {p: _runner(t, {**flat, "parallel": p})
                               for p in ("pixels", "channels")}) for name, t in FLAT.items()]
    rows = {"walk": "rows", "channels": "outer", "input": "direct", "parallel": "pixels"}
    for name, t in RESIDUAL.items():
        config = rows if qconv_amx.space(t).is_valid(rows) else {**flat, "parallel": "channels"}
        out.append(("reciprocal", name, {
            v: _runner(replace(t, program=residual_program(v == "multiply"), extra=("uint8",),
                               consts=6), config) for v in ("divide", "multiply")}))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not host_has_amx():
        raise SystemExit("this benchmark times qconv_amx's kernels: the host has no AMX")
    request_amx()
    machine = machine_facts()
    rows = []
    print(f"{machine['cpu']} ({machine['microarchitecture']}), {THREADS} threads")
    print(f"{'choice':10} {'layer':22} {'first ms':>9} {'second ms':>10} {'second/first':>13}")
    for choice, layer, runners in cases():
        first, second = list(runners)
        times = time_interleaved(runners, args.runs, warmup=5, block=5)
        ratios = paired_ratios(times, first, second)
        row = {"choice": choice, "layer": layer, "variants": [first, second],
               "median_ms": {v: float(np.median(times[v])) for v in runners},
               "paired_ratio": {"median": float(np.median(ratios)),
                                "quartiles": [float(np.percentile(ratios, 25)),
                                              float(np.percentile(ratios, 75))],
                                "per_call": [round(r, 4) for r in ratios]}}
        rows.append(row)
        print(f"{choice:10} {layer:22} {first} {row['median_ms'][first]:.3f}  "
              f"{second} {row['median_ms'][second]:.3f}  {row['paired_ratio']['median']:.3f}")
    if args.json:
        write_json(args.json, {"machine": machine, "versions": {**versions(),
                                                                "halide": halide_version()},
                               "threads": THREADS,
                               "runs": args.runs, "rows": rows})


if __name__ == "__main__":
    main()
