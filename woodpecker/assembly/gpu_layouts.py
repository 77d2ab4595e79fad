"""Where a GPU plan's values lie on the device (issue 54): NHWC or the model's own layout per
value, the conversions between them, and Reshape-like views.

Contract: `device_layouts(graph, steps)` says per value whether the device holds it NHWC: a
4-d output of an NHWC task (conv, pool, element-wise groups, a Concat of NHWC images), or a
4-d model input such tasks read; every other value keeps its own layout (a transformer's).
`convert_layouts` first gives every value read in the other layout one conversion step — a
movement kernel, a `LayoutConvert` node before its first such reader, whose output those
readers take — both ways: an NHWC value read in the model's layout (by a step of another
layout, or through a view whose bytes differ: a classifier's Flatten of 7×7 features) and a
value held in its own layout that an NHWC step reads (ShuffleNet's Slice, ConvNeXt's
Transpose). `views(graph, nhwc)` makes Flatten, Reshape, Squeeze and Unsqueeze aliases of
their input's bytes (schedule/aliases.VIEW).
"""

from __future__ import annotations

from woodpecker.assembly.gpu_steps import CONVERT, VIEW_OPS, GpuStep, _choice, half
from woodpecker.errors import WoodpeckerError
from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.schedule.aliases import VIEW
from woodpecker.target import Target
from woodpecker.tasks import NHWC
from woodpecker.tasks.movement import MoveTask


def device_shape(v: Value, nhwc: bool) -> tuple[int, ...]:
    """The shape `v` has on the device: NHWC where `nhwc`, else its own."""
    shape = tuple(int(d) for d in v.shape)
    return (shape[0], shape[2], shape[3], shape[1]) if nhwc else shape


def _reads_nhwc(step: GpuStep, v: Value) -> bool:
    if step.node.op == CONVERT:      # a conversion to NCHW reads the NHWC bytes it transposes
        return v is step.node.inputs[0] and not step.node.attrs["to_nhwc"]
    return len(v.shape) == 4 and any(
        u is v and step.task.input_layout(i) == NHWC for i, u in enumerate(step.node.inputs))


def device_layouts(graph: Graph, steps: list[GpuStep]) -> dict[str, bool]:
    """Per value, whether it is NHWC on the device: a 4-d output of an NHWC task (conv,
    pool, element-wise groups), or a 4-d model input such tasks read; every other value keeps
    its own layout. A step reading a value in the other layout is one WoodpeckerError (the
    assembly first converts what it can: `convert_layouts`)."""
    nhwc = _layouts(graph, steps)
    for s, _, v in _mismatches(steps, nhwc):
        raise WoodpeckerError(
            f"node {s.node.name} ({s.node.op}) reads {v.name!r} in "
            f"{'NHWC' if _reads_nhwc(s, v) else 'its own layout'}, which the device holds "
            "in the other (convert_layouts converts these first)")
    return nhwc


def _layouts(graph: Graph, steps: list[GpuStep]) -> dict[str, bool]:
    made = {s.node.outputs[0].name: s for s in steps}
    nhwc = {}
    for v in graph.values.values():
        if v.name in made:
            step = made[v.name]
            nhwc[v.name] = step.node.attrs["to_nhwc"] if step.node.op == CONVERT else \
                len(v.shape) == 4 and step.task.layout == NHWC
        elif v.producer is None and v.data is None:
            nhwc[v.name] = any(_reads_nhwc(s, v) for s in steps)
        else:
            nhwc[v.name] = False
    return nhwc


def _mismatches(steps: list[GpuStep], nhwc: dict[str, bool]) -> list[tuple]:
    """(step, input index, value) where a step reads a 4-d value in the other layout."""
    return [(s, i, v) for s in steps for i, v in enumerate(s.node.inputs)
            if v is not None and v.data is None and len(v.shape) == 4
            and _reads_nhwc(s, v) != nhwc[v.name]]


def _needs_model_layout(graph: Graph, nhwc: dict[str, bool]) -> list[Value]:
    """The NHWC values a view reshapes (their bytes differ from the model layout's)."""
    return [node.inputs[0] for node in graph.nodes if node.op in VIEW_OPS
            and node.inputs[0].data is None and nhwc.get(node.inputs[0].name)
            and tuple(node.inputs[0].shape[2:]) != (1, 1)]


def convert_layouts(graph: Graph, steps: list[GpuStep], target: Target,
                    precision: str = "fp32") -> tuple[list[GpuStep], dict[str, bool]]:
    """Every NHWC value read in the model's layout — by a step of another layout, or through
    a view (a classifier's Flatten of a conv's 7×7 features) — and every value held in its
    own layout that a step reads in NHWC (a conv after a Slice or a Transpose: ShuffleNet,
    ConvNeXt) gets one conversion step: a movement kernel transposing it, a node
    `LayoutConvert` (attribute `to_nhwc`) before its first such reader, whose output those
    readers take instead. Returns the steps in graph order and the layouts."""
    nhwc = _layouts(graph, steps)
    wanted: dict[tuple[str, bool], list[tuple[Node, int]]] = {}    # (value, to NHWC): readers
    for s, i, v in _mismatches(steps, nhwc):
        if nhwc[v.name] or v.producer is not None:      # a model input is the readers' layout
            wanted.setdefault((v.name, not nhwc[v.name]), []).append((s.node, i))
    for v in _needs_model_layout(graph, nhwc):
        wanted.setdefault((v.name, False), []).extend(
            (c, i) for c in v.consumers if c.op in VIEW_OPS for i, u in enumerate(c.inputs)
            if u is v)
    if not wanted:
        return steps, nhwc
    for (name, to_nhwc), readers in wanted.items():
        v = graph.values[name]
        order = {id(n): k for k, n in enumerate(graph.nodes)}
        first = min(order[id(node)] for node, _ in readers)
        suffix = ".nhwc" if to_nhwc else ".nchw"
        out = graph.value(graph.fresh_name(name + suffix), v.shape, v.dtype)
        node = graph.add_node(CONVERT, [v], [out], {"to_nhwc": to_nhwc},
                              name=graph.fresh_name(name + ".to" + suffix), index=first)
        for reader, i in readers:
            graph.set_input(reader, i, out)
        n, c, h, w = (int(d) for d in v.shape)
        task = MoveTask((n, c, h, w), (n, h, w, c), ((0, 0, 1), (3, 0, 1), (1, 0, 1), (2, 0, 1)),
                        v.dtype.name) if to_nhwc else \
            MoveTask((n, h, w, c), (n, c, h, w), ((0, 0, 1), (2, 0, 1), (3, 0, 1), (1, 0, 1)),
                     v.dtype.name)
        task = half(task) if precision == "fp16" else task
        steps.append(GpuStep(node, task, *_choice(task, target, None)))
    order = {id(n): k for k, n in enumerate(graph.nodes)}
    steps = sorted(steps, key=lambda s: order[id(s.node)])
    return steps, _layouts(graph, steps)


def views(graph: Graph, nhwc: dict[str, bool]) -> dict[str, tuple]:
    """Reshape-like nodes as aliases of their input's bytes; refused where the layouts differ."""
    aliases = {}
    for node in graph.nodes:
        if node.op not in VIEW_OPS:
            continue
        src, out = node.inputs[0], node.outputs[0]
        if src.data is not None:
            raise WoodpeckerError(f"node {node.name} ({node.op}): a view of a constant is not "
                                  "planned on the GPU (constant folding leaves none)")
        if nhwc[src.name] and (src.shape[2], src.shape[3]) != (1, 1):
            raise WoodpeckerError(f"node {node.name} ({node.op}) reshapes an NHWC value whose "
                                  "bytes differ from NCHW's (convert_layouts converts these)")
        aliases[out.name] = (src.name, VIEW, 0)
    return aliases
