"""Intensive fusion of convolutions (AGO §III): convs each reading only the one before, inside
one subgraph of AGO's acyclic partition (partition/ago.py), become one FusedConvChain node
(ops/chain.py), computed by one generated kernel (engines/halide/conv_chain.py) that keeps the
intermediate activations in cache, a strip of rows at a time.

Chains fused: a 1×1 conv then a depthwise conv (the expansion half of an inverted residual
block), optionally then a 1×1 conv (the whole block: MobileNetV2's, MnasNet's), and a dense
conv then a 1×1 conv. A depthwise conv then a 1×1 conv alone is left to fuse_separable, and so
is a 1×1 → depthwise pair whose depthwise conv fuse_separable would join to its 1×1 reader
(outside the chain's subgraph), and no chain starts at a 1×1 conv that fuse_separable would
join to the depthwise conv before it: unfused (passes/unfuse.py), every chain is then the default
pipeline's nodes, so selection weighs a chain against exactly what the default plan runs.

Conditions on every conv: 2-D, constant weights (and bias, if any), one group or one per
channel; the ones before the last have no prologue, no residual and only activations in their
epilogue, and their output has this one reader and is not a graph output; the last has no
prologue (it may add residuals); a 1×1 conv reading an earlier one has unit strides, no
padding and at most `config.POINTWISE_WEIGHT_BYTES` of weights (the fused kernel's strips
each read all of them, see passes/fuse_separable.py). The partition is what bounds a chain:
its convs must share a subgraph, so a chain stays within AGO's weight threshold and cannot
close a cycle with the rest of the graph.

Not in the default pipeline (passes.AGO adds it): selection does not yet weigh a fused chain
against separate generated kernels, only against the libraries.
"""

from __future__ import annotations

from woodpecker.config import POINTWISE_WEIGHT_BYTES
from woodpecker.ir.graph import Graph, Node
from woodpecker.ops.chain import OP
from woodpecker.partition.ago import partition_graph
from woodpecker.passes.fuse_separable import separable_reader

_CONVS = ("Conv", "FusedConv")


def _attrs(node: Node) -> dict:
    return dict(node.attrs) if node.op == "FusedConv" else dict(node.attrs, epilogue=[])


def _kind(node: Node) -> str | None:
    """'pw' (1×1, one group, unit strides, no padding), 'dw' (one filter per channel),
    'conv' (other dense convs) or None (not one the chain kernel computes)."""
    if node.op not in _CONVS or node.attrs.get("prologue"):
        return None
    x, w = node.inputs[0], node.inputs[1]
    if len(x.shape) != 4 or not w.is_const or \
            (node.input(2) is not None and not node.input(2).is_const):
        return None
    a, groups = node.attrs, node.attrs.get("group", 1)
    if groups == x.shape[1] == w.shape[0] > 1:
        return "dw"
    if groups != 1:
        return None
    if tuple(w.shape[2:]) == (1, 1) and all(s == 1 for s in a.get("strides", [1, 1])) \
            and all(d == 1 for d in a.get("dilations", [1, 1])) and not any(a.get("_pads", [0])):
        return "pw"
    return "conv"


def _inner(node: Node) -> bool:
    """May be a conv before the last: reads nothing but x, w, b; activations only after."""
    return len(node.inputs) <= 3 and \
        all(s["op"] != "Add" for s in node.attrs.get("epilogue", []))


PATTERNS = (("pw", "dw", "pw"), ("pw", "dw"), ("conv", "pw"))


def _next(graph: Graph, node: Node, group: dict[str, int]) -> Node | None:
    y = node.outputs[0]
    if graph.is_output(y) or len(y.consumers) != 1:
        return None
    nxt = y.consumers[0]
    if group.get(nxt.name) != group.get(node.name) or nxt.inputs[0] is not y or \
            nxt.inputs.count(y) != 1 or _kind(nxt) is None:
        return None
    if _kind(nxt) == "pw" and nxt.inputs[1].data.nbytes > POINTWISE_WEIGHT_BYTES:
        return None
    return nxt


def _chain_from(graph: Graph, first: Node, group: dict[str, int]) -> list[Node] | None:
    """The longest pattern of PATTERNS starting at `first`."""
    nodes = [first]
    while len(nodes) < 3 and _inner(nodes[-1]):
        nxt = _next(graph, nodes[-1], group)
        if nxt is None:
            break
        nodes.append(nxt)
    kinds = tuple(_kind(n) for n in nodes)
    for pattern in PATTERNS:
        if kinds[:len(pattern)] == pattern:
            if pattern == ("pw", "dw") and separable_reader(graph, nodes[1]) is not None:
                return None    # the depthwise conv goes with its 1×1 reader instead
            return nodes[:len(pattern)]
    return None


def fuse_chains(graph: Graph) -> int:
    group = partition_graph(graph).of()
    fused = 0
    for first in list(graph.nodes):
        if first not in graph.nodes or _kind(first) is None:
            continue
        x = first.inputs[0].producer
        if x is not None and separable_reader(graph, x) is first:
            continue           # this 1×1 conv goes with the depthwise conv before it
        nodes = _chain_from(graph, first, group)
        if nodes is None:
            continue
        last = nodes[-1]
        inputs = [first.inputs[0]]
        for n in nodes:
            inputs += [n.inputs[1], n.input(2)]
        inputs += last.inputs[3:]
        attrs = {"convs": [_attrs(n) for n in nodes]}
        index = graph.nodes.index(last)
        out = last.outputs[0]
        for n in reversed(nodes):
            graph.remove_node(n)
        graph.add_node(OP, inputs, [out], attrs, last.name, index - len(nodes) + 1)
        fused += 1
    if fused:
        graph.dce()
    return fused
