"""Constant folding: a node whose inputs are all known at compile time is evaluated once with
its numpy reference (WPK §2.1). `Shape` of a static value is known, so whole shape subgraphs
(Shape→Gather→Concat→Reshape) fold away. Identity relied on: f(constants) is a constant."""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Graph
from woodpecker.ops import run_reference
from woodpecker.ops.registry import static_inputs

# Folding must not blow up the plan: an output may be at most this many elements larger than
# its inputs and tensor attributes (Expand/ConstantOfShape of a big shape stay nodes; a
# Constant node's value folds whatever its size — paddle2onnx writes every weight as one).
_GROWTH_LIMIT = 1 << 16


def fold_constants(graph: Graph) -> int:
    folded = 0
    for node in list(graph.nodes):
        args = static_inputs(node, lambda v: v.data)
        if args is None:
            continue
        # (a tensor attribute — a Constant node's value — is in memory already)
        size_in = sum(v.data.size for v in node.inputs if v is not None and v.is_const) + \
            sum(a.size for a in node.attrs.values() if isinstance(a, np.ndarray))
        size_out = sum(int(np.prod(v.shape)) for v in node.outputs)
        if size_out > size_in + _GROWTH_LIMIT:
            continue
        results = run_reference(node, args)
        graph.remove_node(node)
        for v, data in zip(node.outputs, results):
            v.data = np.array(data, order="C")
            v.shape, v.dtype = tuple(v.data.shape), v.data.dtype
        folded += 1
    graph.dce()
    return folded
