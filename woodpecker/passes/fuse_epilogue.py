"""Epilogue fusion: Conv/Gemm/MatMul followed by a chain of bias/residual Adds, activations and
(Gemm/MatMul only) scalings by a constant scalar becomes one Fused* node that an engine runs in
one call (WPK §2.1 operator fusion). SiLU as exported — `y * Sigmoid(y)`, two nodes both
reading `y` — is one activation step, `Silu` (EfficientNet's convs end in it; as a separate
element-wise node it read and wrote the whole activation once more).

Identity relied on: the chain computes act(...(base(x) + r1)...) element by element on the base
output, so it can be applied in place right after the base op. An Add is absorbed only when its
other operand broadcasts into the running result without growing it; every absorbed
intermediate must have exactly one reader and not be a graph output.
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.pattern import const_inputs, const_scalar, sole_reader
from woodpecker.ops.fused import ACTIVATIONS, BASE_INPUTS

_FUSED = {base: fused for fused, (base, _) in BASE_INPUTS.items()}
# Bases whose epilogue takes a scaling by a constant scalar (attention's, passes/
# expose_epilogues.py). After a Conv the scalar Mul stays for fuse_elementwise: RandWire's
# weighted input sums become one group whose learned scalars are kernel arguments, so nodes
# that differ only in them share one tuned kernel; in a conv's epilogue each scalar would make
# the conv a task of its own.
SCALED = ("Gemm", "MatMul")


def _step(node: Node, y: Value, base: str) -> tuple[dict, Value | None] | None:
    """The epilogue step `node` would add on top of `y` (computed by a `base` op), with its
    operand, or None."""
    if node.op == "Add":
        a, b = node.inputs
        other = b if a is y else a
        if other is y or other.dtype != y.dtype:
            return None
        if np.broadcast_shapes(y.shape, other.shape) != y.shape:
            return None
        return {"op": "Add"}, other
    if node.op == "Mul" and base in SCALED:
        scale = const_scalar(node.inputs[1] if node.inputs[0] is y else node.inputs[0], y)
        return None if scale is None else ({"op": "Mul", "scale": scale}, None)
    if node.op not in ACTIVATIONS or node.inputs[0] is not y:
        return None
    step = {"op": node.op}
    if node.op == "Clip":
        if not const_inputs(node, 1, 2):
            return None
        for i, key in ((1, "min"), (2, "max")):
            v = node.input(i)
            step[key] = None if v is None else float(v.data.reshape(-1)[0])
    else:
        step.update({k: v for k, v in node.attrs.items() if not k.startswith("_")})
    return step, None


def _silu(graph: Graph, y: Value) -> tuple[dict, list[Node], Value] | None:
    """(the Silu step, its two nodes, their output) when `y`'s only readers are a Sigmoid of
    `y` and a Mul of `y` by that Sigmoid's output, which nothing else reads."""
    if len(y.consumers) != 2 or graph.is_output(y):
        return None
    sig = next((c for c in y.consumers if c.op == "Sigmoid"), None)
    mul = next((c for c in y.consumers if c.op == "Mul"), None)
    if sig is None or mul is None or sig.inputs[0] is not y:
        return None
    s = sig.outputs[0]
    if sole_reader(graph, s) is not mul or {id(v) for v in mul.inputs} != {id(y), id(s)}:
        return None
    return {"op": "Silu"}, [sig, mul], mul.outputs[0]


def fuse_epilogues(graph: Graph) -> int:
    fused = 0
    for base in list(graph.nodes):
        if base.op not in _FUSED or base not in graph.nodes:
            continue
        y = base.outputs[0]
        steps: list[dict] = []
        operands: list[Value] = []
        absorbed: list[Node] = []
        while True:
            silu = _silu(graph, y)
            if silu is not None:
                step, nodes, y = silu
                steps.append(step)
                absorbed += nodes
                continue
            nxt = sole_reader(graph, y)
            if nxt is None:
                break
            found = _step(nxt, y, base.op)
            if found is None:
                break
            step, operand = found
            steps.append(step)
            if operand is not None:
                operands.append(operand)
            absorbed.append(nxt)
            y = nxt.outputs[0]
        if not steps:
            continue
        n_base = BASE_INPUTS[_FUSED[base.op]][1]
        ins = list(base.inputs) + [None] * (n_base - len(base.inputs)) + operands
        attrs = dict(base.attrs, epilogue=steps)
        index = graph.nodes.index(absorbed[-1])
        out = y
        for n in [base] + absorbed:
            graph.remove_node(n)
        graph.add_node(_FUSED[base.op], ins, [out], attrs, name=base.name,
                       index=index - len(absorbed))
        fused += 1
    if fused:
        graph.toposort()
        graph.dce()
    return fused
