"""Bring element-wise work that a product's epilogue could do next to the product, so that
passes/fuse_epilogue.py absorbs it (WPK §2.1 operator fusion).

- A scalar Mul on an input of a MatMul moves to its output: (a·x)·(b·y) = (a·b)·(x·y) for
  constant scalars a, b. PyTorch's `nn.MultiheadAttention` scales q and kᵀ by d^-1/4 each
  before q·kᵀ; two element-wise passes over q and kᵀ become one scaling in the product's
  epilogue.
- A reshape between a product and the residual Add that reads it moves below the Add:
  Add(Reshape(p), r) = Reshape(Add(p, Reshape(r))) when r has the Add's shape (all reshapes
  are row-major reinterpretations). `nn.TransformerEncoderLayer` adds the attention's output
  projection, (L, E) reshaped to (1, L, E), to its input; the Add then fuses into the Gemm.
- An activation (one run-time input: Relu, Gelu, Sigmoid, …) reading a chain of reshapes and
  transposes of a convolution's output moves above the chain: act(move(p)) = move(act(p)) for
  any element-wise act. SegFormer's Mix-FFN applies GELU after its depthwise conv's output is
  flattened and transposed back to tokens; above the movement it joins the conv's epilogue
  (SegFormer-B0's Woodpecker plan: 1.34 → 1.18 × OpenVINO's session, Zen 5). Not above a
  MatMul's: LeViT's HardSwish after its attention's P·V product, moved into that batched
  product's epilogue, took its Woodpecker plan from 1.02 to 1.34 and 1.39 × the library's.

Only what then fuses is rewritten: the MatMul's output has one reader or none (a graph output
keeps its Mul), and the product below the reshape has the reshape as its only reader.
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.pattern import add_reshape, const_scalar, producer, sole_reader, static
from woodpecker.ops.shape import RESHAPES

_PRODUCTS = ("Conv", "Gemm", "MatMul")
_ACTIVATIONS = frozenset({"Relu", "Sigmoid", "Tanh", "Gelu", "HardSwish", "HardSigmoid",
                          "Clip"})
_MOVEMENT = RESHAPES | {"Transpose"}


def _input_scale(graph: Graph, node: Node, i: int) -> tuple[Value, float] | None:
    """(x, s) when input `i` of `node` is Mul(x, s) of a constant scalar s read only there."""
    mul = producer(node.inputs[i], "Mul")
    if mul is None or sole_reader(graph, node.inputs[i]) is not node:
        return None
    for x, s in (mul.inputs, mul.inputs[::-1]):
        scale = const_scalar(s, x)
        if scale is not None and not x.is_const and x.shape == node.inputs[i].shape:
            return x, scale
    return None


def _move_scale(graph: Graph, node: Node) -> bool:
    y = node.outputs[0]
    if len(y.consumers) > 1 or graph.is_output(y):
        return False
    scale = 1.0
    for i in range(2):
        found = _input_scale(graph, node, i)
        if found is not None:
            mul = node.inputs[i].producer
            graph.set_input(node, i, found[0])
            graph.remove_node(mul)
            scale *= found[1]
    if scale == 1.0:
        return False
    product = graph.value(graph.fresh_name(node.name), y.shape, y.dtype)
    node.outputs[0], product.producer = product, node
    graph.add_node("Mul", [product, graph.const(np.array(scale, y.dtype), "scale")], [y],
                   name=graph.fresh_name(f"{node.name}/scale"),
                   index=graph.nodes.index(node) + 1)
    return True


def _sink_reshape(graph: Graph, add: Node) -> bool:
    out = add.outputs[0]
    for side in range(2):
        a, r = add.inputs[side], add.inputs[1 - side]
        reshape = producer(a, *RESHAPES)
        if reshape is None or sole_reader(graph, a) is not add or r.shape != out.shape \
                or a.shape != out.shape:
            continue
        p = reshape.inputs[0]
        if producer(p, *_PRODUCTS) is None or sole_reader(graph, p) is not reshape \
                or not static(p):
            continue
        index = graph.nodes.index(add)
        graph.remove_node(add)
        graph.remove_node(reshape)
        r2 = graph.value(graph.fresh_name(r.name), p.shape, r.dtype)
        total = graph.value(graph.fresh_name(out.name), p.shape, out.dtype)
        add_reshape(graph, r, r2, graph.fresh_name(f"{add.name}/operand"), index)
        graph.add_node("Add", [p, r2][::1 - 2 * side], [total], name=add.name, index=index + 1)
        add_reshape(graph, total, out, reshape.name, index + 2)
        return True
    return False


def _hoist_activation(graph: Graph, act: Node) -> bool:
    """Move `act` above the reshapes/transposes it reads, when a conv computes what they move
    and each value on the way has one reader."""
    if any(v is not None and not v.is_const for v in act.inputs[1:]):
        return False
    chain, v = [], act.inputs[0]
    while (move := producer(v, *_MOVEMENT)) is not None and \
            sole_reader(graph, v) is (chain[-1] if chain else act) and static(v):
        chain.append(move)
        v = move.inputs[0]
    if not chain or producer(v, "Conv") is None or \
            sole_reader(graph, v) is not chain[-1] or not static(v):
        return False
    y, m = act.outputs[0], chain[0].outputs[0]
    graph.remove_node(act)
    active = graph.value(graph.fresh_name(f"{v.name}/{act.op.lower()}"), v.shape, v.dtype)
    graph.add_node(act.op, [v] + act.inputs[1:], [active], act.attrs, name=act.name,
                   index=graph.nodes.index(chain[-1]))
    graph.set_input(chain[-1], 0, active)
    chain[0].outputs[0], y.producer, m.producer = y, chain[0], None   # y keeps its readers
    return True


def expose_epilogues(graph: Graph) -> int:
    rewritten = 0
    for node in list(graph.nodes):
        if node not in graph.nodes:
            continue
        if node.op == "MatMul":
            rewritten += _move_scale(graph, node)
        elif node.op == "Add":
            rewritten += _sink_reshape(graph, node)
        elif node.op in _ACTIVATIONS:
            rewritten += _hoist_activation(graph, node)
    if rewritten:
        graph.toposort()
    return rewritten
