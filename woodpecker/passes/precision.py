"""Lower a graph's products to a compile's precision (`options.Precision`, `--precision bf16`):
the nodes Woodpecker has low-precision kernels for get the node attribute `_compute` (the
type's name, tasks.COMPUTE), so their tasks compute in that type (tasks/dense.py `compute`;
engines/halide/dense_bf16.py) and only templates of that type are tuned for them.

Contract: the math is the model's with each lowered node's two operands rounded to the type
and their products summed in float32 — what OpenVINO's bf16 mode does to a MatMul, and what
the lowered task's reference computes. Lowered: Gemm and MatMul (fused or not) whose second
operand is a constant 2-d float32 matrix — a layer's weights, packed once in the type. Not
lowered (they stay float32 on every engine): attention's run-time products, convolutions (no
low-precision conv template yet), and everything else. The node's output stays float32, so
the rest of the graph, the libraries' steps and the plan's values are unchanged; where a
library runs a lowered node, it runs it in its own way (ONNX Runtime in float32, OpenVINO in
its precision hint's type).

Not one of `PASSES`: it takes the precision, and `selection.pipeline.candidate_graphs` runs
it after the passes on every graph a compile plans.
"""

from __future__ import annotations

from woodpecker.ir.graph import Graph
from woodpecker.options import Precision
from woodpecker.tasks import COMPUTE

LOWERED_OPS = frozenset({"Gemm", "FusedGemm", "MatMul", "FusedMatMul"})


def lower_precision(graph: Graph, precision: Precision) -> int:
    """Mark the nodes computed in `precision` (module docstring); the count marked (none for
    FP32)."""
    if precision is Precision.FP32:
        return 0
    count = 0
    for node in graph.nodes:
        if node.op not in LOWERED_OPS or len(node.inputs) < 2 or node.inputs[1] is None:
            continue
        a, b = node.inputs[0], node.inputs[1]
        if b.data is None or len(b.shape) != 2 or a.dtype.name != "float32" or \
                b.dtype.name != "float32":
            continue
        node.attrs[COMPUTE] = precision.compute
        count += 1
    return count
