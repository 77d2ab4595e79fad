"""Layout assignment after engine selection: Halide conv and pool kernels compute in NHWC
(channels innermost vectorise), every other engine (and Halide's dense kernels, whose operands
have no channel axis) in the model's own layout. Where a value crosses between the two a
Transpose is inserted (run by numpy); chains of Halide nodes pass NHWC values straight through,
so only the boundaries pay. The number of conversions is returned and recorded in the plan.
"""

from __future__ import annotations

from woodpecker.engines.base import runtime_positions
from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.tune.tasks import NHWC, spec_kind

TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def _nhwc(node: Node, engine: str) -> bool:
    return engine == "halide" and spec_kind(node.attrs["halide"]).layout == NHWC


def assign_layouts(graph: Graph, engines: list[str]) -> tuple[list[str], int]:
    """Rewrite `graph` so NHWC Halide nodes read and write NHWC values; returns the engine list of
    the rewritten graph and the number of layout conversions left in it."""
    engine_of = {id(n): e for n, e in zip(graph.nodes, engines)}
    nhwc: dict[str, Value] = {}
    inserted: list[Node] = []
    for node in list(graph.nodes):
        if not _nhwc(node, engine_of[id(node)]):
            continue
        index = graph.nodes.index(node)
        for i in runtime_positions(node):   # the activations: x and any residuals
            v = node.inputs[i]
            if v.name not in nhwc:
                t = _transpose(graph, v, TO_NHWC, index)
                inserted.append(t)
                index += 1
                nhwc[v.name] = t.outputs[0]
            graph.set_input(node, i, nhwc[v.name])
        out = node.outputs[0]
        hw = graph.value(graph.fresh_name(out.name + ".nhwc"),
                         [out.shape[i] for i in TO_NHWC], out.dtype)
        hw.layout = NHWC
        node.outputs[0], hw.producer, out.producer = hw, node, None
        nhwc[out.name] = hw
        back = _transpose(graph, hw, TO_NCHW, index + 1, out)
        inserted.append(back)
    for t in inserted:
        engine_of[id(t)] = "numpy"
    graph.dce()
    live = {id(n) for n in graph.nodes}
    conversions = sum(1 for t in inserted if id(t) in live)
    return [engine_of[id(n)] for n in graph.nodes], conversions


def _transpose(graph: Graph, v: Value, perm: list[int], index: int,
               out: Value | None = None) -> Node:
    if out is None:
        out = graph.value(graph.fresh_name(v.name + ".nhwc"), [v.shape[i] for i in perm],
                          v.dtype)
        out.layout = NHWC
    return graph.add_node("Transpose", [v], [out], {"perm": list(perm)},
                          name=graph.fresh_name("layout"), index=index)
