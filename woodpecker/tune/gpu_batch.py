"""Tuning GPU kernels on a device elsewhere, in batches (issue 54: build here, run there —
AutoTVM's Builder here, its RPC Runner there).

Contract: `write_batch(graph, target, folder, per_task)` builds, for every distinct GPU task
of the graph (assembly/gpu_steps.gpu_steps), its template's seeds and `per_task` configs drawn
from its space (seeded; configs the log already measured for the target are not drawn
again), into a batch folder `runtime/gpu_measure.py` checks and times on the device (`python
-m woodpecker.runtime.gpu_measure BATCH`, numpy and ctypes only). `read_timings(folder, log)`
takes that run's `timings.json` back into the tuning log — one record per candidate, keyed
by the cuda target (`Target.record_key`: the device and its capability), errors recorded as
invalid — and returns the fastest candidate per task (`GpuChoice`), which
`compiler_gpu.compile_gpu(tuning_log=…)` builds the plan with (`tuned_choices`). Templates are
recorded as `gpu.<name>` (tune/records.py keeps records of templates the CPU engines do not
know, inert for them).

With `library` (default), each task also gets one library candidate (engine "library", no
file: torch, runtime/gpu_torch.py), recorded as template `gpu.library`: where it is the
fastest, the plan runs that step on the library (WPK §2.5's per-operator choice, made on the
device's measurements).

Choice: the search is a genetic one across batches: the first batch is each template's seeds
and random samples; every later batch (written with the log its predecessors' timings went
into) draws half of its configs as one-knob mutations of the `PARENTS` fastest measured so
far and half at random, never a config the log holds — the device is lent for minutes, so
each batch is one call's worth of measurements.
"""

from __future__ import annotations

import json
import random
import shutil
import uuid
from pathlib import Path

from woodpecker.assembly.gpu_steps import (
    GPU_TEMPLATES,
    HOST,
    LIBRARY,
    GpuChoice,
    argument_transforms,
    gpu_steps,
    templates_for,
)
from woodpecker.engines.halide.gpu.build import build_gpu
from woodpecker.engines.halide.gpu.runtime_build import cuda_runtime, kernel_library
from woodpecker.errors import WoodpeckerError
from woodpecker.files import sha256_file
from woodpecker.ir.graph import Graph
from woodpecker.runtime.gpu_measure import FORMAT
from woodpecker.target import Target
from woodpecker.tune.records import TuningLog, TuningRecord

PREFIX = "gpu."
PARENTS = 3     # the fastest measured configs per task and template a later batch mutates


def _key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def write_batch(graph: Graph, target: Target, folder: "str | Path", per_task: int = 8,
                seed: int = 0, precision: str = "fp32", log: TuningLog | None = None,
                progress=None, library: bool = True) -> Path:
    folder = Path(folder)
    (folder / "kernels").mkdir(parents=True, exist_ok=True)
    tasks = {}
    for step in gpu_steps(graph, target, precision=precision):
        if step.engine != HOST:            # a host step has nothing to tune
            tasks.setdefault(step.task.key, step.task)
    candidates = []
    for k, (key, task) in enumerate(tasks.items()):
        drawn = 0
        for name in templates_for(task):
            configs = _draw(GPU_TEMPLATES[name].space(task, target.device),
                            _measured(log, key, name), random.Random(seed * 1000003 + k),
                            per_task, _fastest(log, key, name, PARENTS))
            drawn += len(configs)
            for config in configs:
                candidates.append(_candidate(folder, GPU_TEMPLATES[name], name, task, config,
                                             target))
        if library and not _measured(log, key, LIBRARY):
            candidates.append({"task": key, "template": LIBRARY, "config": {},
                               "engine": LIBRARY})
        if progress is not None:
            print(f"  GPU task {k + 1}/{len(tasks)}: {task.describe()}, {drawn} candidates",
                  file=progress, flush=True)
    shutil.copyfile(cuda_runtime(target), folder / "runtime.so")
    batch = {"format": FORMAT, "id": uuid.uuid4().hex, "target": target.to_json(),
             "runtime": {"file": "runtime.so", "sha256": sha256_file(folder / "runtime.so")},
             "candidates": candidates}
    (folder / "batch.json").write_text(json.dumps(batch, indent=1))
    return folder


def _measured(log: TuningLog | None, key: str, template: str) -> set[str]:
    """The configs of `template` the log already measured for task `key`."""
    return set() if log is None else {_key(r.config) for r in log.records
                                      if r.task == key and r.template == PREFIX + template}


def _fastest(log: TuningLog | None, key: str, template: str, count: int) -> list[dict]:
    """The `count` fastest valid configs of `template` the log measured for task `key`."""
    if log is None:
        return []
    timed = sorted((r.cost_s, _key(r.config), r.config) for r in log.records
                   if r.task == key and r.template == PREFIX + template and r.cost_s is not None)
    return [dict(c) for _, _, c in timed[:count]]


def _draw(space, done: set[str], rng: random.Random, per_task: int,
          parents: list[dict] = ()) -> list[dict]:
    """The space's seeds, then `per_task` configs none of which is in `done`: with `parents`
    (the fastest measured so far) half of them mutations of those — one knob changed to
    another of its values, valid — and the rest sampled (a genetic search across batches)."""
    configs = {_key(c): c for c in space.seeds if _key(c) not in done}
    want = len(configs) + per_task
    for _ in range(per_task * 20):
        if len(configs) >= want - per_task // 2 or not parents:
            break
        parent = rng.choice(parents)
        knob = rng.choice(space.knobs)
        others = [v for v in knob.values if v != parent.get(knob.name)]
        c = {**parent, knob.name: rng.choice(others)} if others else parent
        if _key(c) not in done and space.is_valid(c):
            configs.setdefault(_key(c), c)
    for _ in range(per_task * 20):
        if len(configs) >= want:
            break
        c = space.sample(rng)
        if _key(c) not in done:
            configs.setdefault(_key(c), c)
    return list(configs.values())


def _candidate(folder: Path, module, name: str, task, config: dict, target: Target) -> dict:
    """One built candidate in the batch folder, with the transforms of its constants a
    template asks for (winograd.py's weights), which the runner applies."""
    built = kernel_library(build_gpu(module, task, config, target))
    file = f"kernels/{built.name}"
    shutil.copyfile(built, folder / file)
    cand = {"task": task.key, "template": name, "config": config, "file": file,
            "sha256": sha256_file(folder / file)}
    specs = argument_transforms(module, task, config)
    if specs:        # the runner transforms its own seeded inputs (tasks/transforms.py)
        cand["transforms"] = {str(i): spec.to_json() for i, spec in specs.items()}
    return cand


def read_timings(folder: "str | Path", log: TuningLog) -> dict[str, GpuChoice]:
    """The device's timings of the batch at `folder` into `log` (opened for the batch's
    target); the fastest candidate per task key."""
    folder = Path(folder)
    try:
        batch = json.loads((folder / "batch.json").read_text())
        timings = json.loads((folder / "timings.json").read_text())
    except (OSError, ValueError) as e:
        raise WoodpeckerError(f"cannot read the batch's timings in {folder}: {e}") from None
    if timings.get("batch") != batch["id"]:
        raise WoodpeckerError(f"{folder / 'timings.json'} measured another batch")
    target = Target.from_json(batch["target"])
    if log.target not in (None, target.record_key):
        raise WoodpeckerError(f"the batch was built for {target.record_key}; the log is "
                              f"opened for {log.target}")
    best: dict[str, tuple[float, GpuChoice]] = {}
    for r in timings["results"]:
        ms = r.get("ms")
        log.append(TuningRecord(task=r["task"], template=PREFIX + r["template"],
                                config=r["config"], cost_s=None if ms is None else ms / 1e3,
                                error=r.get("error"), target=target.record_key))
        if ms is not None and (r["task"] not in best or ms < best[r["task"]][0]):
            best[r["task"]] = (ms, GpuChoice(r["template"], r["config"]))
    return {task: choice for task, (_, choice) in best.items()}


def tuned_choices(log: TuningLog) -> dict[str, GpuChoice]:
    """The fastest measured candidate of every task the log (opened for a cuda target) holds
    GPU records of: a generated kernel's config, or the library."""
    keys = {r.task for r in log.records if r.template.startswith(PREFIX)}
    return {key: GpuChoice(rec.template[len(PREFIX):], dict(rec.config)) for key in keys
            if (rec := log.best(key)) is not None and rec.template.startswith(PREFIX)}
