"""Fuse the element-wise chain after a static int8 MatMul into it: one FusedQLinearDense
(ops/quant_dense.py), so a statically quantized transformer's DequantizeLinear → Add bias →
QuantizeLinear after each projection — and the residual DequantizeLinear → Add →
QuantizeLinear after the last ones — run in the product's epilogue instead of three or more
passes over the (…, N) tensor each (issue 53: Q/DQ folded, never a pass of its own).

Exact: the product is requantised to its 8-bit type as before and the program computes on that
value what the nodes computed on the tensor. The chain grows from the QLinearDense's output
through nodes that alone read the value before them (not a graph output): per-tensor
QuantizeLinear/DequantizeLinear, and ops/fused.py's element-wise ops whose other inputs are
scalars, one constant per output column (a bias of N values, broadcast over the last axis), or
run-time tensors of the output's shape — such a tensor's per-tensor DequantizeLinear joins as a
step when the chain alone reads its output (the residual's). The chain is cut after its last
QuantizeLinear, so the fused node writes 8 bits. Runs after constant folding (a bias's
DequantizeLinear of constants is a float vector by then) and fuse_elementwise.
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ops.fused import ELEMENTWISE, QDQ_STEPS
from woodpecker.ops.quant_dense import FUSED, N_DENSE, OP
from woodpecker.passes.fuse_elementwise import element_program, per_last_axis
from woodpecker.passes.fuse_qconv_program import remapped


def _per_tensor(node: Node) -> bool:
    """A QuantizeLinear/DequantizeLinear with a constant scalar scale and zero point."""
    params = node.inputs[1:3]
    return len(node.inputs) == 3 and all(v is not None and v.is_const and v.data.size == 1
                                         for v in params)


def _side(graph: Graph, node: Node, v: Value, shape) -> Node | None | bool:
    """How a run-time input `v` of chain node `node` enters: its per-tensor DequantizeLinear
    as a step (returned), as an input of its own (None), or not at all (False)."""
    if tuple(v.shape or ()) != tuple(shape):
        return False
    p = v.producer
    if p is not None and p.op == "DequantizeLinear" and _per_tensor(p) and \
            not graph.is_output(v) and v.consumers == [node]:
        return p
    return None if v.dtype == np.float32 else False


def _step(graph: Graph, node: Node, v: Value, shape) -> list[Node] | None:
    """`node` (reading `v`) and the side DequantizeLinears it brings, when it may join."""
    if node.op in QDQ_STEPS:
        return [node] if _per_tensor(node) and node.inputs[0] is v else None
    if node.op not in ELEMENTWISE or len(node.outputs) != 1 or \
            node.outputs[0].dtype != np.float32 or tuple(node.outputs[0].shape) != shape:
        return None
    sides = []
    for u in node.inputs:
        if u is None or u is v:
            continue
        if u.is_const:
            if u.data.size != 1 and per_last_axis(u, shape) is None:
                return None
            continue
        side = _side(graph, node, u, shape)
        if side is False:
            return None
        if side is not None:
            sides.append(side)
    return [*sides, node]


def _chain(graph: Graph, dense: Node) -> list[Node]:
    v, shape = dense.outputs[0], tuple(dense.outputs[0].shape)
    chain: list[Node] = []
    while not graph.is_output(v) and len(v.consumers) == 1:
        nodes = _step(graph, v.consumers[0], v, shape)
        if nodes is None:
            break
        chain += nodes
        v = nodes[-1].outputs[0]
    last = max((i for i, n in enumerate(chain) if n.op == "QuantizeLinear"), default=-1)
    return chain[:last + 1]


def _fuse(graph: Graph, dense: Node) -> bool:
    chain = _chain(graph, dense)
    if not chain:
        return False
    order = {id(n): k for k, n in enumerate(graph.nodes)}
    nodes = sorted(chain, key=lambda n: order[id(n)])
    program, inputs, consts = element_program(nodes, per_last_axis)
    first = inputs.index(dense.outputs[0])
    others = [v for i, v in enumerate(inputs) if i != first]
    ins = list(dense.inputs) + [None] * (N_DENSE - len(dense.inputs)) + others
    if consts:
        ins.append(graph.const(np.array(consts, np.float32), dense.name + ".consts"))
    out = chain[-1].outputs[0]
    index = order[id(dense)]
    for n in [*chain, dense]:
        graph.remove_node(n)
    graph.add_node(FUSED, ins, [out], {"program": remapped(program, first)}, name=dense.name,
                   index=index)
    return True


def fuse_qdense_programs(graph: Graph) -> int:
    fused = sum(_fuse(graph, n) for n in list(graph.nodes) if n.op == OP)
    if fused:
        graph.toposort()
        graph.dce()
    return fused
