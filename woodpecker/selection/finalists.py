"""Finalists: the best tuning record of each template and parallel split, checked and re-timed
side by side.

Why (a choice WPK leaves open): a task's records are timed at different moments of a noisy
machine, often in different sessions, so the fastest record of the whole log tends to be one
measured in a quiet moment rather than the fastest kernel. Measured on resnet18's 3×3 layers:
the log's minimum picked an old direct-conv record that then ran at 70–90 GFLOP/s, while the
Winograd kernel tuned minutes later ran at 130–190. So the log only nominates one finalist per
template (its best record), and the finalists are compared by timing them interleaved, at the
same moment — the usual re-measurement of the top candidates before a final choice.

Each parallel split of a template (its `parallel` knob) has its own finalist: the split decides
which core reads which part of the input, so its cost moves most with the machine's state, and
the search, drawn to the best split early on, re-measures the others rarely. Measured on
mobilenet_v2's 3×3 depthwise conv at 112² × 32 (Zen 4, 2 threads): the log's best config with
channel tiles in parallel had 0.097 ms and the best with rows in parallel 0.192; timed
interleaved, the channel tiles took 0.19-0.22 ms and the rows 0.17, and right after their
producer, as in a plan, 0.17-0.21 against 0.13-0.15.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from woodpecker.config import PER_FAMILY
from woodpecker.engines import names
from woodpecker.engines.choice import KernelSpec
from woodpecker.engines.halide.templates import kernel_arguments, template_module
from woodpecker.errors import EngineError
from woodpecker.selection.candidates import Candidate
from woodpecker.tasks import Task
from woodpecker.tune.records import TuningLog, TuningRecord
from woodpecker.tune.rotation import rotating_call
from woodpecker.tune.worker import agrees


def family(record: TuningRecord | KernelSpec) -> str:
    """A record's (or kernel's) template and parallel split, e.g. "conv_depthwise/rows"."""
    name = record.template
    split = record.config.get("parallel")
    return name if split is None else f"{name}/{split}"




def leaders(log: TuningLog, task: Task, usable=None,
            per_family: int = PER_FAMILY) -> list[TuningRecord]:
    """The `per_family` fastest valid records (distinct configs) of each template and parallel
    split for `task`, fastest first."""
    best: dict[str, dict[str, TuningRecord]] = {}
    for r in log.task_records(task.key):
        if r.cost_s and (usable is None or usable(r)):
            configs = best.setdefault(family(r), {})
            key = r.key
            if key not in configs or r.cost_s < configs[key].cost_s:
                configs[key] = r
    kept = [r for configs in best.values()
            for r in sorted(configs.values(), key=lambda r: r.cost_s)[:per_family]]
    return sorted(kept, key=lambda r: r.cost_s)


def finalist_names(records: list[TuningRecord]) -> list[str]:
    """Each record's family, with "#2", "#3"… on the family's later records."""
    names = []
    for i, r in enumerate(records):
        rank = sum(family(q) == family(r) for q in records[:i])
        names.append(f"{family(r)}#{rank + 1}" if rank else family(r))
    return names


def checked_kernel(task: Task, record: TuningRecord, threads: int, inputs: list[np.ndarray]):
    """(kernel, its arguments) for `record`, built and checked against the numpy reference
    on `inputs`; raises EngineError (one line) when it does not build, fails or differs."""
    template = template_module(record.template)
    try:
        kernel = template.build(task, record.config, threads)
        args = kernel_arguments(template, task, record.config, inputs)
        got = kernel(*args)
    except Exception as e:  # noqa: BLE001 - a kernel that no longer builds or runs is skipped
        raise EngineError(f"tuned kernel does not build or run "
                          f"({(str(e).splitlines() or [type(e).__name__])[0][:200]})") from None
    ok, err = agrees(task, got, task.reference(inputs))
    if not ok:
        raise EngineError(f"tuned kernel differs from the reference ({err:.1e})")
    return kernel, args


def finalist_candidates(task: Task, records: list[TuningRecord], threads: int,
                        report: Callable[[str], None]) -> list[Candidate]:
    """Each record as a candidate (selection/candidates.py) named by `finalist_names`: its
    kernel built and checked against the reference, `run` a call on seeded inputs with the
    weights cold (tune/rotation.py), in the records' order; finalists that fail are reported
    and left out."""
    inputs = task.random_inputs(0)
    out = []
    for name, record in zip(finalist_names(records), records):
        try:
            kernel, args = checked_kernel(task, record, threads, inputs)
        except EngineError as e:
            report(f"{task.describe()}: {name}: {e}; not used")
            continue
        spec = KernelSpec(record.template, task.kind, dict(record.config), task.to_json(),
                          kernel.path.name)
        out.append(Candidate(names.HALIDE, name, rotating_call(kernel, args), spec, record))
    return out
