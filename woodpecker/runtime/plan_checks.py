"""The consistency checks a loaded plan passes before it runs (runtime/plan.py calls them
after building the graph from plan.json): every node's outputs are what its op's rule makes
of its inputs, the parallel schedule's stages can run at the same time, the arena is one a
compile could have made. Each failure is one PlanError line: an edited or corrupt plan is
refused before any kernel sees an array it was not built for (issue 76)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from woodpecker.errors import PlanError
from woodpecker.ir.graph import DYNAMIC, Graph, Node, Value
from woodpecker.ops import OPS
from woodpecker.schedule.arena import Arena
from woodpecker.schedule.problem import value_bytes
from woodpecker.tasks import NHWC, NHWC_PERM

if TYPE_CHECKING:
    from woodpecker.runtime.plan import Plan


# the largest alignment a plan's arena may ask for: a page (compiles align to a cache line)
MAX_ARENA_ALIGNMENT = 4096


def arena_oversized(g: Graph, arena: Arena) -> str | None:
    """An arena larger than all the graph's values side by side (each aligned), or aligned to
    anything but a power of two up to a page, is no arena a compile makes: allocating it would
    only exhaust memory (a tampered alignment of 2^62 asked for exbibytes)."""
    a = arena.alignment
    if a < 1 or a & (a - 1) or a > MAX_ARENA_ALIGNMENT:
        return f"its alignment {a} is not a power of two up to {MAX_ARENA_ALIGNMENT}"
    most = sum(-(-value_bytes(v) // arena.alignment) * arena.alignment
               for v in g.values.values() if v.data is None)
    if arena.size > most:
        return f"its size {arena.size} exceeds the {most} bytes of all values side by side"
    return None


def check_shapes(g: Graph) -> None:
    """A PlanError unless every node's outputs have the shapes and types its op's rule gives
    from its inputs (ops/: the rules the import ran), so an edited shape — an input made
    16x16 where the kernels were built for 8x8 — is refused before any kernel sees an array
    of a size it was not built for. A Transpose's rule holds in any layout (a layout
    conversion is one); the other nodes reading or writing a value in another layout than
    the model's (NHWC around generated kernels) are checked by their kernels' own bounds
    (Halide's buffer checks) and the arena's."""
    def data_of(v):
        return v.data

    for node in g.nodes:
        laid_out = any(v is not None and v.layout for v in (*node.inputs, *node.outputs))
        if laid_out and node.op != "Transpose":
            continue
        try:
            results = OPS[node.op].infer(node, data_of)
        except Exception as e:  # noqa: BLE001 - a rule fails in its own ways on bad input
            raise PlanError(f"plan.json: node {node.name!r} ({node.op}) does not fit its "
                            f"inputs ({type(e).__name__}: {e})".splitlines()[0]) from None
        for v, (shape, dtype) in zip(node.outputs, results):
            dims = [int(d) for d in shape]
            if v.shape is not None and any(d == DYNAMIC for d in v.shape):
                continue   # a whole-model plan's output the data decides
            if dims != list(v.shape) or np.dtype(dtype) != v.dtype:
                raise PlanError(f"plan.json: node {node.name!r} ({node.op}) makes "
                                f"{np.dtype(dtype).name}{dims} from its inputs, but plan.json "
                                f"records {v.name!r} as {v.dtype.name}{list(v.shape)} (edited?)")


def check_stages(plan: "Plan") -> None:
    """A PlanError unless each stage of the parallel schedule is two or more consecutive
    nodes, none in two stages, none reading another's output: what running them at the same
    time needs (a tampered stage would race)."""
    try:
        stages = plan.stages()
    except (KeyError, TypeError) as e:
        raise PlanError(f"plan.json: the parallel schedule's stages are corrupt ({e})") from None
    seen: set[int] = set()
    nodes = plan.graph.nodes
    for stage in stages:
        if len(stage) < 2 or sorted(stage) != list(range(stage[0], stage[0] + len(stage))) \
                or seen & set(stage):
            raise PlanError("plan.json: a stage of the parallel schedule is not a run of "
                            "consecutive nodes of its own")
        seen.update(stage)
        made = {id(v) for i in stage for v in nodes[i].outputs}
        outputs = {id(v) for v in plan.graph.outputs}
        for i in stage:
            if any(not v.consumers and id(v) not in outputs for v in nodes[i].outputs):
                raise PlanError(f"plan.json: stage node {nodes[i].name!r} has an output "
                                "nothing reads")
            if any(v is not None and id(v) in made for v in nodes[i].inputs):
                raise PlanError(f"plan.json: stage node {nodes[i].name!r} reads another "
                                "node of its stage: they cannot run at the same time")


def _model_shape(v: Value) -> tuple[int, ...]:
    """A value's shape in the model's layout: a held value's (layout "NHWC" or "perm…", its
    shape `[model[a] for a in perm]`) put back."""
    if not v.layout or v.shape is None:
        return v.shape
    perm = NHWC_PERM if v.layout == NHWC else tuple(int(c) for c in v.layout[4:])
    if sorted(perm) != list(range(len(v.shape))):
        raise PlanError(f"plan.json: value {v.name!r} has layout {v.layout!r}, no permutation "
                        f"of its {len(v.shape)} dimensions")
    model = [0] * len(perm)
    for i, a in enumerate(perm):
        model[a] = v.shape[i]
    return tuple(model)


def _as_modelled(node: Node) -> Node:
    """`node` over copies of its values in the model's layout: what a task was made from at
    compile time, before the layout pass held values in NHWC."""
    def copy(v: Value | None) -> Value | None:
        if v is None:
            return None
        return Value(v.name, _model_shape(v), v.dtype, "", v.producer, v.consumers, v.data)

    return Node(node.op, node.name, [copy(v) for v in node.inputs],
                [copy(v) for v in node.outputs], node.attrs)


def check_kernels(plan: "Plan") -> None:
    """A PlanError unless each generated kernel was built for its node as plan.json now
    describes it: its recorded task is the task its node makes (`from_node`: the shapes,
    strides, pads, groups, fused steps, element types and the layout each input is read in —
    all the kernel's signature), and it writes what its node's output value holds (as many
    elements, of its type). plan.json's task JSON edited apart from its values, or the values
    apart from the task (an input made 16x16, a value's layout permuted), would hand a kernel
    arrays it was not built for; the kernel's own buffer checks (Halide's) catch only those
    too small, not those of another shape or order."""
    from woodpecker.tasks import spec_task

    for node in plan.graph.nodes:
        spec = plan.choices[node.name].kernel
        if spec is None:
            continue
        try:
            task = spec_task(spec.to_json())
        except (KeyError, TypeError, ValueError) as e:
            raise PlanError(f"plan.json: node {node.name!r}'s kernel task is corrupt "
                            f"({type(e).__name__})") from None
        out = node.outputs[0]
        want = int(np.prod(task.out_shape, dtype=np.int64))
        dtype = np.dtype(getattr(task, "out_dtype", np.float32))
        if want != int(np.prod(out.shape, dtype=np.int64)) or dtype != out.dtype:
            raise PlanError(f"plan.json: node {node.name!r}'s kernel writes {dtype.name}"
                            f"{list(task.out_shape)}, but its output {out.name!r} is "
                            f"{out.dtype.name}{list(out.shape)} (edited?)")
        try:
            made = type(task).from_node(_as_modelled(node))
        except Exception as e:  # noqa: BLE001 - a task's rule fails in its own ways on bad input
            raise PlanError(f"plan.json: node {node.name!r} no longer fits its kernel "
                            f"({type(e).__name__}: {e})".splitlines()[0]) from None
        if made.key != task.key:
            raise PlanError(f"plan.json: node {node.name!r}'s kernel was built for "
                            f"{task.describe()}, but the node now is {made.describe()} "
                            "(edited?)")
        for i, v in enumerate(node.inputs):
            if v is not None and v.data is None and v.layout != task.input_layout(i):
                raise PlanError(f"plan.json: node {node.name!r}'s kernel reads input "
                                f"{v.name!r} in layout {task.input_layout(i) or 'as the model'}"
                                f", but plan.json lays it out {v.layout or 'as the model'} "
                                "(edited?)")
