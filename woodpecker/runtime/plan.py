"""Plans are data plus the engines' native artifacts: a folder with `plan.json` (versioned,
validated on load), `weights.bin` (raw tensors mapped read-only, checked by sha256 first:
runtime/weights.py) and a
folder per engine that keeps artifacts (the Halide engine's compiled kernels and runtime,
ONNX Runtime's step models), written and checked by the engine itself (Engine.save_artifacts,
load_artifacts), so a plan runs without re-tuning, compiling or the compiler's packages.

Each node's decision (`Choice`: engine, generated kernel, why) is stored under `choices`, apart
from the node's attributes. Loading refuses a plan whose target the host lacks (architecture,
vector extensions), whose precision it cannot compute in (a bf16 plan on a CPU without
AVX512_BF16 or AMX-BF16), or whose engines' artifacts cannot run here (another Halide release).

Files are written to temporary names and moved into place, so an interrupted save never leaves
a half-written plan where a good one was.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from woodpecker.engines.choice import Choice, Choices
from woodpecker.engines.registry import get_engine
from woodpecker.errors import PlanError, WoodpeckerError
from woodpecker.files import confine, creatable, user_path, write_bytes, writer
from woodpecker.ir.graph import DYNAMIC, Graph
from woodpecker.ir.steps import StepIO, step_io
from woodpecker.ops import OPS
from woodpecker.options import Precision, precision
from woodpecker.runtime import plan_files
from woodpecker.runtime.plan_checks import (
    arena_oversized,
    check_kernels,
    check_shapes,
    check_stages,
)
from woodpecker.runtime.plan_files import (
    HashingWriter,
    only_plan_parts,
    remove_stale,
    stored_constants,
)
from woodpecker.runtime.plan_schedule import PlanSchedule
from woodpecker.runtime.steps import plan_steps
from woodpecker.runtime.trust import (
    SIGNATURE_FIELD,
    signature,
    signed_here,
    unsigned_bytes,
    wanted_digest,
)
from woodpecker.runtime.weights import MappedWeights, load_weights, write_weights
from woodpecker.schedule.arena import Arena, check_arena
from woodpecker.target import Target
from woodpecker.version import __version__

# 5: the schedule typed (`schedule`; 3 and 4 kept it in their metadata, still read);
# 4: weights.bin, mapped (3 had weights.npz, still read)
SCHEMA_VERSION = 5
READS = (3, 4, 5)
PLAN_FILE, WEIGHTS_FILE = plan_files.PLAN_FILE, plan_files.WEIGHTS_FILE


@dataclass
class Plan:
    """A graph in execution order, each node's `Choice` (by node name), the target it was
    compiled for, what the compile recorded (`meta`: provenance, which decides nothing), the
    arena's placement, how it runs (`schedule`, runtime/plan_schedule.py) and the precision its
    products are computed in (`options.Precision`: the libraries' modes follow it; a plan of
    one the host lacks does not load)."""

    graph: Graph
    choices: Choices
    target: Target
    meta: dict[str, Any]
    arena: Arena | None = None
    directory: Path | None = None   # the folder it was loaded from (its engines' artifacts)
    mapped: MappedWeights | None = None   # its weights file, mapped (runtime/weights.py)
    schedule: PlanSchedule = PlanSchedule()
    precision: Precision = Precision.FP32

    def release_weights(self) -> None:
        """Hand back the weight pages touched so far (a loaded plan's; see MappedWeights)."""
        if self.mapped is not None:
            self.mapped.release()

    @property
    def engines(self) -> list[str]:
        """Each node's engine, in execution order."""
        return [self.choices[n.name].engine for n in self.graph.nodes]

    def stages(self) -> list[list[int]]:
        """Node indices of each stage of the parallel schedule whose operators run at the same
        time (`schedule.stages`, selection/parallel.py); none for a sequential plan."""
        index = {n.name: i for i, n in enumerate(self.graph.nodes)}
        return [[index[name] for name in stage] for stage in self.schedule.stages]

    @property
    def every(self) -> bool:
        """Whether its library regions write every value they produce into the arena (a
        memory-scheduled plan's; runtime/steps.py)."""
        return self.schedule.every

    def region_starts(self) -> list[int]:
        """Node indices where a library region must begin (`schedule.region_starts`)."""
        index = {n.name: i for i, n in enumerate(self.graph.nodes)}
        return [index[name] for name in self.schedule.region_starts]

    def steps(self, stages: bool = True) -> list[list[int]]:
        """Node indices per execution step (runtime/steps.py); with `stages` false, the
        nodes of each parallel stage as steps of their own (as they are built)."""
        return plan_steps(self.engines, self.schedule.library_regions,
                          self.stages() if stages else (), self.region_starts())

    def step_io(self, nodes: list) -> "StepIO":
        """A step's nodes, the values it reads and those it writes (ir.steps.step_io)."""
        return StepIO(nodes, *step_io(nodes, self.graph, self.every))


# -- attribute encoding (JSON has no arrays or tuples) ---------------------------------------------
def _encode(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return {"__ndarray__": {"dtype": v.dtype.name, "shape": list(v.shape),
                                "data": v.reshape(-1).tolist()}}
    if isinstance(v, (list, tuple)):
        return [_encode(x) for x in v]
    if isinstance(v, dict):
        return {k: _encode(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        return v.item()
    return v


def _decode(v: Any) -> Any:
    if isinstance(v, dict):
        if "__ndarray__" in v:
            a = v["__ndarray__"]
            return np.array(a["data"], dtype=np.dtype(a["dtype"])).reshape(a["shape"])
        return {k: _decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


def _spec(v) -> dict:
    return {"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name}


def is_plan_dir(d: Path) -> bool:
    """`d` holds a Woodpecker plan (a plan.json with the format tag; it may be damaged
    otherwise: saving over a damaged plan is how it is repaired)."""
    try:
        return json.loads((d / PLAN_FILE).read_text()).get("format") == "woodpecker-plan"
    except (OSError, ValueError, AttributeError):
        return False


def save_plan(plan: Plan, directory: "str | os.PathLike", force: bool = False) -> Path:
    """Write `plan` into `directory`: a new or empty folder, or one holding a plan (replaced);
    any other folder only with `force` (its other files are left as they are)."""
    d = creatable(user_path(directory, "the plan folder", PlanError), "cannot save plan to",
                  PlanError)
    if d.exists() and not d.is_dir():
        raise PlanError(f"cannot save plan: {d} exists and is not a directory")
    if d.is_dir() and not force and not is_plan_dir(d) and not only_plan_parts(d):
        raise PlanError(f"cannot save plan: {d} is a folder that holds no Woodpecker plan; "
                        "choose a new folder, or force it (--force) to write into it")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PlanError(f"cannot save plan to {d}: {e.strerror}") from None
    g = plan.graph
    weights, held = stored_constants(plan)
    f, tmp_w, commit_weights = writer(d / WEIGHTS_FILE, root=d)
    try:
        with f:
            h = HashingWriter(f)
            offsets = write_weights(h, [np.asarray(v.data) for v in weights])
    except BaseException:
        commit_weights(keep=False)
        raise
    # each engine's steps as they are built (a stage's nodes are built one by one)
    steps = [plan.step_io([g.nodes[i] for i in step]) for step in plan.steps(stages=False)]
    artifacts = {}
    for name in sorted(set(plan.engines)):
        own = [s for s in steps if plan.choices[s.nodes[0].name].engine == name]
        artifacts[name] = get_engine(name).save_artifacts(d, g, plan.choices, own,
                                                          plan.directory)
    values = {}
    for n in g.nodes:
        for v in n.outputs:
            values[v.name] = {"shape": list(v.shape), "dtype": v.dtype.name,
                              **({"layout": v.layout} if v.layout else {})}
    doc = {
        "format": "woodpecker-plan",
        "schema_version": SCHEMA_VERSION,
        "woodpecker_version": __version__,
        "target": plan.target.to_json(),
        "model": {"name": g.name, "opset": g.opset, **plan.meta},
        "inputs": [_spec(v) for v in g.inputs],
        "outputs": [_spec(v) for v in g.outputs],
        "weights": {"file": WEIGHTS_FILE, "sha256": h.hexdigest(),
                    "tensors": [dict(_spec(v), offset=o) for v, o in zip(weights, offsets)],
                    **({"held": [_spec(v) for v in held]} if held else {})},
        "values": values,
        "nodes": [{"name": n.name, "op": n.op,
                   "inputs": [None if v is None else v.name for v in n.inputs],
                   "outputs": [v.name for v in n.outputs],
                   "attrs": _encode(n.attrs)} for n in g.nodes],
        "order": [n.name for n in g.nodes],
        "choices": {n.name: plan.choices[n.name].to_json() for n in g.nodes},
        "schedule": plan.schedule.to_json(),
        **({"precision": plan.precision.value} if plan.precision is not Precision.FP32 else {}),
        "engines": artifacts,
        **({"arena": plan.arena.to_json()} if plan.arena is not None else {}),
    }
    try:
        doc[SIGNATURE_FIELD] = signature(unsigned_bytes(doc))
        text = json.dumps(doc, indent=1).encode()
    except BaseException:
        commit_weights(keep=False)
        raise
    commit_weights()
    write_bytes(d / PLAN_FILE, text, root=d)
    remove_stale(d, artifacts)
    return d


def _plan_bytes(directory: "str | os.PathLike") -> bytes:
    path = Path(directory) / PLAN_FILE
    try:
        confine(Path(directory), path, PLAN_FILE)
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        why = "a file, not a plan's folder" if Path(directory).is_file() else f"no {PLAN_FILE}"
        raise PlanError(f"{directory} is not a Woodpecker plan ({why})") from None
    except OSError as e:
        raise PlanError(f"cannot read {path}: {e.strerror}") from None


def _parse_plan(path: Path, data: bytes) -> dict:
    try:
        doc = json.loads(data)
    except RecursionError:
        raise PlanError(f"{path} is not a Woodpecker plan (nested too deeply to be one)") \
            from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PlanError(f"{path} is not valid JSON (truncated or edited?): {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != "woodpecker-plan":
        raise PlanError(f"{path} is not a Woodpecker plan (missing format tag)")
    if doc.get("schema_version") not in READS:
        raise PlanError(f"{path} has schema version {doc.get('schema_version')!r}; this "
                        f"Woodpecker {__version__} reads versions {READS[0]}-{READS[-1]}")
    return doc


def read_plan_json(directory: "str | os.PathLike") -> dict:
    return _parse_plan(Path(directory) / PLAN_FILE, _plan_bytes(directory))


def plan_digest(directory: "str | os.PathLike") -> str:
    """"sha256:" and the hex digest of the plan's plan.json, which records the sha256 of every
    other file the plan loads (weights, kernels, the Halide runtime, ONNX Runtime's models):
    one digest that pins the whole plan."""
    return "sha256:" + hashlib.sha256(_plan_bytes(directory)).hexdigest()


def load_plan(directory: "str | os.PathLike", digest: str | None = None,
              trust: bool = False) -> Plan:
    """The plan in `directory`, checked; with `digest` (as `plan_digest` gives it) refused
    unless its plan.json is that one, before anything else of it is read. plan.json is read
    once: the bytes whose digest is checked are the bytes parsed. A plan with native code
    loads only pinned, signed by this user (runtime/trust.py) or with `trust`."""
    want = None if digest is None else wanted_digest(digest)
    d = user_path(directory, "the plan folder", PlanError)
    data = _plan_bytes(d)
    if want is not None:
        found = "sha256:" + hashlib.sha256(data).hexdigest()
        if found != want:
            raise PlanError(f"{directory} is not the plan you trusted: its digest is {found}, "
                            f"expected {want}")
    doc = _parse_plan(d / PLAN_FILE, data)
    try:
        plan = _build(d, doc)
    except PlanError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise PlanError(f"{d / PLAN_FILE} is corrupt: {type(e).__name__} {e}") from None
    if want is None and not trust:
        _check_trusted(d, doc, plan)
    return plan


def _check_trusted(d: Path, doc: dict, plan: Plan) -> None:
    """A PlanError unless a plan with native code was signed by this user (runtime/trust.py);
    checked after every other check and before any of its code is mapped (kernels are loaded
    when the plan is built into a CompiledModel)."""
    native = sorted(e for e in set(plan.engines) if get_engine(e).caps.generated)
    if not native:
        return
    ok, why = signed_here(doc)
    if not ok:
        raise PlanError(f"{d} holds native code ({', '.join(native)} kernels) and {why}: a plan "
                        "is a program — load it only if you trust where it came from, pinned "
                        "by its digest (--digest sha256:…, load(…, digest=)) or with --trust "
                        "(load(…, trust=True))")


def _precision(doc: dict) -> Precision:
    """plan.json's precision (float32 where it names none); an edited value is a one-line
    PlanError."""
    try:
        return precision(doc.get("precision", Precision.FP32.value))
    except WoodpeckerError as e:
        raise PlanError(f"plan.json: {e}") from None


def _check_host(doc: dict) -> None:
    """A PlanError when the plan's target, its precision or an engine's artifacts cannot run
    on this host."""
    why = Target.from_json(doc["target"]).incompatibility() or \
        _precision(doc).unsupported()
    if why is not None:
        raise PlanError(f"cannot load this plan here: {why}")
    for name, meta in doc["engines"].items():
        try:
            engine = get_engine(name)
        except WoodpeckerError as e:
            raise PlanError(f"cannot load this plan here: {e}") from None
        why = engine.incompatibility(meta)
        if why is not None:
            raise PlanError(f"cannot load this plan here: {why}")


def _shape(spec: dict, name: str) -> list[int]:
    """A value's shape from plan.json: whole numbers, -1 (a dimension the data decides) the
    least — an edited one (a bool, a float, a string) is a one-line PlanError, not an error
    deep in the executor."""
    shape = spec["shape"]
    if not isinstance(shape, list) or not all(
            type(n) is int and n >= DYNAMIC for n in shape):
        raise PlanError(f"plan.json: value {name!r} has shape {shape!r}")
    return shape


def _build(d: Path, doc: dict) -> Plan:
    _check_host(doc)
    weights, mapped = load_weights(d, doc)
    g = Graph(doc["model"]["name"])
    g.opset = int(doc["model"]["opset"])
    for s in doc["inputs"]:
        g.inputs.append(g.value(s["name"], _shape(s, s["name"]), s["dtype"]))
    for name, data in weights.items():
        g.value(name, data.shape, data.dtype, data)
    # held by a library step's model (plan_files.stored_constants)
    for t in doc["weights"].get("held", []):
        if t["name"] in g.values:
            raise PlanError(f"plan.json: weight {t['name']!r} is recorded twice")
        dtype = np.dtype(t["dtype"])
        g.value(t["name"], _shape(t, t["name"]), dtype,
                np.broadcast_to(np.zeros((), dtype), _shape(t, t["name"])))
    for name, s in doc["values"].items():
        if name not in g.values:
            g.value(name, _shape(s, name), s["dtype"]).layout = str(s.get("layout", ""))
    defined = {v.name for v in g.inputs} | set(weights) | \
        {t["name"] for t in doc["weights"].get("held", [])}
    names = [n["name"] for n in doc["nodes"]]
    if names != doc["order"]:
        raise PlanError("plan.json: node list and execution order disagree")
    if len(set(names)) != len(names):
        raise PlanError("plan.json: two nodes share a name")
    if set(doc["choices"]) != set(names):
        raise PlanError("plan.json: the engine choices do not name the plan's nodes")
    choices = {name: Choice.from_json(doc["choices"][name]) for name in names}
    for n in doc["nodes"]:
        if n["op"] not in OPS:
            raise PlanError(f"plan.json: node {n['name']!r} has unknown op {n['op']!r}")
        for x in n["inputs"]:
            if x is not None and x not in defined:
                raise PlanError(f"plan.json: node {n['name']!r} reads {x!r} before it is "
                                "produced or a weight that does not exist")
        if not n["outputs"]:
            raise PlanError(f"plan.json: node {n['name']!r} has no outputs")
        for x in n["outputs"]:
            if x not in doc["values"]:
                raise PlanError(f"plan.json: node {n['name']!r} output {x!r} has no shape")
        ins = [None if x is None else g.values[x] for x in n["inputs"]]
        outs = [g.values[x] for x in n["outputs"]]
        g.add_node(n["op"], ins, outs, _decode(n["attrs"]), name=n["name"])
        defined.update(n["outputs"])
    if not doc["outputs"]:
        raise PlanError("plan.json: the plan has no outputs")
    for s in doc["outputs"]:
        if s["name"] not in defined:
            raise PlanError(f"plan.json: output {s['name']!r} is never produced")
        v = g.values[s["name"]]
        if list(s["shape"]) != list(v.shape) or s["dtype"] != v.dtype.name:
            raise PlanError(f"plan.json: output {s['name']!r} is declared {s['dtype']}"
                            f"{list(s['shape'])} but its value is {v.dtype.name}{list(v.shape)}")
        g.outputs.append(v)
    meta = {k: v for k, v in doc["model"].items() if k not in ("name", "opset")}
    schedule = PlanSchedule.from_json(doc["schedule"]) if doc["schema_version"] >= 5 else \
        PlanSchedule.from_meta(meta)
    plan = Plan(g, choices, Target.from_json(doc["target"]), meta, directory=d, mapped=mapped,
                schedule=schedule, precision=_precision(doc))
    used = set(plan.engines)
    if used != set(doc["engines"]):
        raise PlanError("plan.json: the engines' artifacts do not match the engines chosen")
    for name in sorted(used):
        get_engine(name).load_artifacts(d, doc["engines"][name], choices)
    check_stages(plan)
    check_shapes(g)
    check_kernels(plan)
    missing = set(schedule.region_starts) - set(choices)
    if missing:
        raise PlanError(f"plan.json: a region starts at unknown node {sorted(missing)[0]!r}")
    if "arena" in doc:
        plan.arena = Arena.from_json(doc["arena"])
        problem = arena_oversized(g, plan.arena) \
            or check_arena(g, plan.arena, plan.steps(), plan.every)
        if problem:
            raise PlanError(f"plan.json: arena is corrupt: {problem}")
    return plan
