"""CompiledModel: a plan with its kernels built, ready to run; validates inputs first.

Thread safety: one model may be called from many threads. Its runs share one arena (every
activation is a fixed view into it) and its library kernels' I/O bindings, so a model runs one
call at a time: `run`, `__call__` and `profile` hold the model's lock, and each caller gets
outputs of its own (copied out of the arena). On a machine whose cores one run already uses
this costs no throughput; for concurrent runs on more cores, load the plan once per thread
(`woodpecker.load`), each with its own arena and `threads`. Different models may run at once."""

from __future__ import annotations

import ctypes
import numbers
import os
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from woodpecker.engines.base import BuildContext, Engine
from woodpecker.engines.registry import get_engine
from woodpecker.errors import InputError, OptionsError, first_line
from woodpecker.ir.steps import step_io
from woodpecker.ops import OPS
from woodpecker.ops.opaque import OP as OPAQUE
from woodpecker.runtime.executor import Executor
from woodpecker.runtime.plan import Plan, load_plan, plan_digest, save_plan
from woodpecker.runtime.stages import Member, stage_kernel


def _fmt(shape) -> str:
    return "x".join(map(str, shape)) if len(shape) else "scalar"


class CompiledModel:
    """Run with `model.run({name: array})` → `{name: array}` or `model(*arrays)`."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        g = plan.graph
        threads = plan.target.run_threads
        ctx = BuildContext(threads, g.opset, plan.directory, g.source,
                           precision=plan.precision)
        self.steps = plan.steps()
        engines = {name: get_engine(name) for name in sorted(set(plan.engines))}
        # spinning workers of other engines are rested before an engine with its own threads
        rests = [hook for e in engines.values() if (hook := e.rest_hook()) is not None]
        rest = None if not rests else rests[0] if len(rests) == 1 else _all(rests)

        def build(nodes, ins, outs):
            engine = engines[plan.choices[nodes[0].name].engine]
            kernel = engine.build_step(nodes, ins, outs, ctx, plan.choices)
            return kernel.before(rest) if engine.caps.own_threads and rest else kernel

        stages = {tuple(stage) for stage in plan.stages()}
        built = []
        for step in self.steps:
            nodes = [g.nodes[i] for i in step]
            ins, outs = step_io(nodes, g, plan.every)
            if tuple(step) in stages:
                members = []
                for n in nodes:
                    mine = step_io([n], g)
                    members.append(Member(build([n], *mine),
                                          tuple(_positions(mine[0], ins)),
                                          tuple(_positions(mine[1], outs))))
                built.append((nodes, stage_kernel(members, len(outs))))
            else:
                built.append((nodes, build(nodes, ins, outs)))
            plan.release_weights()    # weights a kernel repacked are not resident twice
        self._executor = Executor(g, built, plan.arena, plan.every)
        self._run = self._executor.direct or self._executor.run
        _trim_heap()
        # per-model runtime state: each engine's process-wide settings made this model's
        # before every run (Engine.activate)
        # (engines that keep no such setting, whose `activate` is the base no-op, are skipped)
        self._activate = [(lambda e=e: e.activate(threads)) for e in engines.values()
                          if type(e).activate is not Engine.activate]
        self.inputs = [(v.name, v.shape, v.dtype) for v in g.inputs]
        self._expected = {name: (tuple(shape), dtype) for name, shape, dtype in self.inputs}
        self.outputs = [(v.name, v.shape, v.dtype) for v in g.outputs]
        self._lock = threading.Lock()

    def bound_steps(self) -> list:
        """Per step (`self.steps`), its kernel bound to the arena (`engines.base.Bound`), or
        None where the step is not bound: what a parallel schedule runs side by side
        (selection/parallel.py). Call `activate()` first when calling them directly."""
        return self._executor.bounds

    def activate(self) -> None:
        """Make the engines' process-wide settings (thread counts) this model's."""
        for activate in self._activate:
            activate()

    @property
    def graph(self):
        return self.plan.graph

    def _listing(self) -> str:
        return ", ".join(f"{n}[{_fmt(s)} {d}]" for n, s, d in self.inputs)

    def _validate(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        """The feeds as arrays, or a one-line InputError. Runs before every call, so the
        error text is only built for an error (building it took 4 us a call); feeds that are
        already the model's arrays pass as they are (a one-call plan's 0.07 ms runs feel each
        microsecond here). Anything but a mapping is refused, a list or tuple too: the
        positional form is `model(*arrays)`, so `run` never guesses an order."""
        if type(feeds) is not dict and not isinstance(feeds, Mapping):
            raise InputError(f"run takes the inputs as a dict {{name: array}}, not a "
                             f"{type(feeds).__name__} (the model's inputs are: "
                             f"{self._listing()}); for arrays in input order call "
                             "model(*arrays)")
        expected = self._expected
        if len(feeds) == len(expected):
            for name, (shape, dtype) in expected.items():
                a = feeds.get(name)
                if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                    break
            else:
                return feeds
        for name in feeds:
            if name not in expected:
                raise InputError(f"unknown input {name!r}; the model's inputs are: "
                                 f"{self._listing()}")
        out = {}
        for name, (shape, dtype) in expected.items():
            if name not in feeds:
                raise InputError(f"missing input {name!r}; the model's inputs are: "
                                 f"{self._listing()}")
            try:
                a = np.asarray(feeds[name])
            except (ValueError, TypeError) as e:     # a ragged list, an object numpy refuses
                raise InputError(f"input {name!r} is not an array of {_fmt(shape)} {dtype}: "
                                 f"{first_line(e)}") from None
            if a.dtype.kind == "U" and np.dtype(dtype).kind == "O":   # str arrays, as ORT takes
                a = a.astype(object)
            if a.dtype != dtype:
                raise InputError(f"input {name!r} has dtype {a.dtype}, expected {dtype}")
            if a.shape != shape:
                raise InputError(f"input {name!r} has shape {_fmt(a.shape)}, expected "
                                 f"{_fmt(shape)}")
            out[name] = a
        return out

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The outputs {name: array} computed from `feeds` {input name: array} (a list or
        tuple is refused with one InputError line: positional arrays go to `model(*arrays)`)."""
        feeds = self._validate(feeds)
        with self._lock:
            self.activate()
            return self._run(feeds)

    def __call__(self, *arrays: Any):
        """Positional inputs in model order; one output is returned bare, several as a tuple."""
        if len(arrays) != len(self.inputs):
            raise InputError(f"the model takes {len(self.inputs)} input(s), "
                             f"{self._listing()}; got {len(arrays)}")
        result = self.run({name: a for (name, _, _), a in zip(self.inputs, arrays)})
        outs = tuple(result[name] for name, _, _ in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def save(self, directory: "str | os.PathLike", force: bool = False) -> str:
        """Save the plan (see runtime/plan.save_plan: a folder holding anything but a plan only
        with `force`); returns its digest, which `load(..., digest=)` can pin."""
        if not isinstance(force, bool):
            raise OptionsError(f"force must be True or False, got {force!r}")
        save_plan(self.plan, directory, force)
        return plan_digest(directory)

    def profile(self, feeds: dict[str, Any], runs: int = 20) -> list[float]:
        """Mean milliseconds per step (`self.steps`: a node, or a library region of several)
        over `runs` runs (after one warm-up run)."""
        if isinstance(runs, bool) or not isinstance(runs, numbers.Integral) or runs < 1:
            raise OptionsError(f"runs must be a whole number of at least 1, got {runs!r}")
        feeds = self._validate(feeds)
        acc = [0.0] * len(self.steps)
        with self._lock:
            self.activate()
            self._executor.run(feeds)
            for _ in range(runs):
                self._executor.run(feeds, acc)
        return [1e3 * t / runs for t in acc]

    def generated_flops_share(self) -> float:
        """The fraction of the model's FLOPs that Woodpecker-generated (Halide) kernels run."""
        flops = [(int(OPS[n.op].flops(n)), e) for n, e in zip(self.graph.nodes, self.plan.engines)]
        total = sum(f for f, _ in flops)
        generated = {e for e in set(self.plan.engines) if get_engine(e).caps.generated}
        return sum(f for f, e in flops if e in generated) / total if total else 0.0

    def generated_time_share(self, feeds: dict, runs: int = 10) -> float:
        """The fraction of a run's step time (`profile`) spent in generated kernels' steps."""
        ms = self.profile(feeds, runs=runs)
        engines = self.plan.engines
        generated = [get_engine(engines[step[0]]).caps.generated for step in self.steps]
        total = sum(ms)
        return sum(t for t, g in zip(ms, generated) if g) / total if total else 0.0

    def node_table(self) -> list[dict]:
        """Per node: name, op, engine and why it was chosen, input/output shapes, FLOPs and the
        ops fused into it (epilogue, prologue, an element-wise group's program) (for
        `inspect`). An opaque node's op reads `opaque:<the op it carries>` (`opaque:model`:
        the user's whole graph on a library)."""
        rows = []
        for n, e in zip(self.graph.nodes, self.plan.engines):
            rows.append({
                "name": n.name, "engine": e,
                "op": f"opaque:{n.attrs['op_type']}" if n.op == OPAQUE else n.op,
                "why": self.plan.choices[n.name].why,
                "inputs": [None if v is None else list(v.shape) for v in n.inputs],
                "outputs": [list(v.shape) for v in n.outputs],
                "flops": int(OPS[n.op].flops(n)),
                "epilogue": [s["op"] for s in n.attrs.get("epilogue", [])],
                "prologue": [s["op"] for s in n.attrs.get("prologue", [])],
                "program": [s["op"] for s in n.attrs.get("program", [])],
            })
        return rows


def _trim_heap() -> None:
    """Give the heap pages freed while building kernels (weight transforms' temporaries) back
    to the system (glibc's malloc_trim; elsewhere nothing): a loaded plan's resident memory is
    then what it keeps."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _positions(values, among) -> list[int]:
    """Where each of `values` sits in `among` (by name)."""
    index = {v.name: i for i, v in enumerate(among)}
    return [index[v.name] for v in values]


def _all(hooks):
    def call():
        for hook in hooks:
            hook()
    return call


def load(directory: "str | os.PathLike", digest: str | None = None,
         trust: bool = False) -> CompiledModel:
    """Load a saved plan; never re-tunes or re-optimises. A plan's kernels are native code:
    one loads when this user's Woodpecker saved it unedited (its signature,
    runtime/trust.py), when pinned by `digest` (what `save` returned, or `woodpecker inspect`
    shows; any other plan is refused), or with `trust=True` — say so only for a plan from
    someone you would take a program from."""
    if not isinstance(trust, bool):    # trust="no" would have trusted the plan
        raise OptionsError(f"trust must be True or False, got {trust!r}")
    return CompiledModel(load_plan(directory, digest, trust=trust))
