"""Layout assignment after engine selection: Halide conv and pool kernels compute in NHWC
(channels innermost vectorise), every other engine (and Halide's dense kernels, whose operands
have no channel axis) in the model's own layout. Where a value crosses between the two a
Transpose is inserted (run by numpy); chains of Halide nodes pass NHWC values straight through,
and so do the data-movement nodes between them (concat, split, slice, channel shuffle: see
assembly/layout_follow.py), so only the boundaries pay. The number of conversions is returned
and recorded in the plan.
"""

from __future__ import annotations

import numpy as np

from woodpecker.assembly.layout_follow import FOLLOWERS, NHWC_PERM, MovedOp, moved_op
from woodpecker.engines import names
from woodpecker.engines.choice import Choice, Choices
from woodpecker.engines.registry import get_engine
from woodpecker.ir.graph import Graph, Node, Value, runtime_positions
from woodpecker.tasks import NHWC, spec_kind, spec_task


def nhwc_kernel(choice: Choice) -> bool:
    """The node runs a generated kernel that reads and writes NHWC activations."""
    return choice.kernel is not None and get_engine(choice.engine).caps.generated and \
        spec_kind({"kind": choice.kernel.kind}).layout == NHWC


def _follows(choice: Choice) -> bool:
    """The node's engine runs data movement as views that can follow a held layout."""
    return get_engine(choice.engine).caps.views


def layout_name(perm: tuple[int, ...]) -> str:
    """`Value.layout` of a value held as `x.transpose(perm)`: "" for the model's own layout."""
    if tuple(perm) == NHWC_PERM:
        return NHWC
    return "" if list(perm) == sorted(perm) else "perm" + "".join(map(str, perm))


def assign_layouts(graph: Graph, choices: Choices) -> int:
    """Rewrite `graph` so NHWC Halide nodes read and write NHWC values, adding to `choices` the
    conversions it inserts (numpy transposes); returns how many are left in the graph."""
    held: dict[str, tuple[Value, tuple[int, ...]]] = {}   # name -> (held value, perm)
    inserted: list[Node] = []

    def takes_held(v: Value, perm: tuple[int, ...]) -> bool:
        """Every reader of `v` would read it held in `perm`: NHWC Halide nodes, or movement
        nodes that can follow (a one-step look-ahead)."""
        return v not in graph.outputs and all(
            (nhwc_kernel(choices[c.name]) and perm == NHWC_PERM)
            or (_follows(choices[c.name]) and c.op in FOLLOWERS) for c in v.consumers)

    for node in list(graph.nodes):
        if nhwc_kernel(choices[node.name]):
            index = graph.nodes.index(node)
            task = spec_task(choices[node.name].kernel.to_json())
            for i in runtime_positions(node):   # the activations: x and any residuals
                v = node.inputs[i]
                if task.input_layout(i) == "":
                    continue   # read where it lies (a model input, see ConvTask.x_layout)
                if v.name not in held or held[v.name][1] != NHWC_PERM:
                    t = _transpose(graph, v, NHWC_PERM, index)
                    inserted.append(t)
                    index += 1
                    held[v.name] = (t.outputs[0], NHWC_PERM)
                graph.set_input(node, i, held[v.name][0])
            inserted += _hold_outputs(graph, node, [NHWC_PERM], held)
        elif _follows(choices[node.name]) and node.op in FOLLOWERS:
            moved = _follow(node, held, takes_held)
            if moved is not None:
                for i in runtime_positions(node):
                    graph.set_input(node, i, held[node.inputs[i].name][0])
                for i, data in moved.constants.items():
                    node.inputs += [None] * (i + 1 - len(node.inputs))
                    graph.set_input(node, i, graph.const(data, f"{node.name}.held"))
                node.op, node.attrs = moved.op, moved.attrs
                inserted += _hold_outputs(graph, node, moved.out_perms, held)
    for t in inserted:
        choices[t.name] = Choice(names.NUMPY, why="layout conversion")
    graph.dce()
    live = {id(n) for n in graph.nodes}
    for t in inserted:
        if id(t) not in live:
            del choices[t.name]
    return sum(1 for t in inserted if id(t) in live)


def _follow(node: Node, held, takes_held) -> MovedOp | None:
    """How `node` runs on its held inputs, if all are held alike and it pays: each output it
    would hold must be read held by all its readers, except a Concat whose inputs nothing else
    reads (converting the one result costs no more than converting every part)."""
    data = [node.inputs[i] for i in runtime_positions(node)]
    perms = {held[v.name][1] if v.name in held else None for v in data}
    if not data or len(perms) != 1 or None in perms:
        return None
    moved = moved_op(node, perms.pop())
    if moved is None:
        return None
    sole = node.op == "Concat" and all(v.consumers == [node] for v in data)
    if not sole and not all(layout_name(p) == "" or takes_held(v, p)
                            for v, p in zip(node.outputs, moved.out_perms)):
        return None
    return moved


def _hold_outputs(graph: Graph, node: Node, perms, held) -> list[Node]:
    """Make `node` write each output held in its perm (a new value), with a Transpose back to the
    original value for readers that need it (removed later if none do); returns those."""
    backs = []
    index = graph.nodes.index(node)
    for k, perm in enumerate(perms):
        out = node.outputs[k]
        if layout_name(perm) == "":
            continue
        hv = graph.value(graph.fresh_name(out.name + ".held"), [out.shape[a] for a in perm],
                         out.dtype)
        hv.layout = layout_name(perm)
        node.outputs[k], hv.producer, out.producer = hv, node, None
        held[out.name] = (hv, tuple(perm))
        backs.append(_transpose(graph, hv, tuple(int(a) for a in np.argsort(perm)),
                                index + 1 + len(backs), out))
    return backs


def _transpose(graph: Graph, v: Value, perm, index: int, out: Value | None = None) -> Node:
    if out is None:
        out = graph.value(graph.fresh_name(v.name + ".nhwc"), [v.shape[i] for i in perm],
                          v.dtype)
        out.layout = layout_name(perm)
    return graph.add_node("Transpose", [v], [out], {"perm": list(perm)},
                          name=graph.fresh_name("layout"), index=index)
