"""ReduceMean over the two spatial axes of a 4-D activation is a GlobalAveragePool:
torchvision's ShuffleNet v2 and MnasNet end in `x.mean([2, 3])`. As a pool it becomes a pool
task a generated kernel can run in NHWC, and the Reshape dropping the unit axes (keepdims=0)
needs no layout conversion (assembly/layout_follow.py); as a ReduceMean it ran on a library
engine, which forced the network's last activation back to NCHW (0.09 ms) and a one-node
ONNX Runtime call (0.5-0.75 ms in ShuffleNet v2's all-Halide plan).
Identity relied on: mean over axes (2, 3) with keepdims = GlobalAveragePool(x)."""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Graph


def reduce_mean_to_pool(graph: Graph) -> int:
    rewritten = 0
    for node in list(graph.nodes):
        x = node.inputs[0] if node.op == "ReduceMean" else None
        if x is None or x.is_const or len(x.shape) != 4 or \
                sorted(node.attrs.get("_axes", [])) != [2, 3]:
            continue
        out, index = node.outputs[0], graph.nodes.index(node)
        graph.remove_node(node)
        if node.attrs.get("keepdims", 1):
            graph.add_node("GlobalAveragePool", [x], [out], name=node.name, index=index)
        else:
            pooled = graph.value(graph.fresh_name(out.name + ".pooled"), x.shape[:2] + (1, 1),
                                 out.dtype)
            graph.add_node("GlobalAveragePool", [x], [pooled], name=node.name, index=index)
            shape = graph.const(np.array(out.shape, np.int64), "shape")
            graph.add_node("Reshape", [pooled, shape], [out], {"_shape": list(out.shape)},
                           name=graph.fresh_name(node.name + ".squeeze"), index=index + 1)
        rewritten += 1
    return rewritten
