"""Remove Identity, and Dropout at inference (its output equals its input; its mask output
must be unused). Identity relied on: Identity(x) = Dropout_inference(x) = x."""

from __future__ import annotations

from woodpecker.ir.graph import Graph


def remove_identities(graph: Graph) -> int:
    removed = 0
    for node in list(graph.nodes):
        if node.op not in ("Identity", "Dropout"):
            continue
        extra = node.outputs[1:]
        if any(v.consumers or graph.is_output(v) for v in extra):
            continue
        keep, drop = node.inputs[0], node.outputs[0]
        if keep is None or not graph.can_bypass(keep, drop):
            continue
        graph.bypass(node, keep, drop)
        removed += 1
    return removed
