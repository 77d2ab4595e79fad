"""Data movement that only renames axes becomes one Reshape of the original value.

- A Transpose that moves only axes of size 1 keeps every element where it is: it is a Reshape
  to its output shape. PyTorch's `nn.MultiheadAttention` exports two per layer,
  (1, L, E) ↔ (L, 1, E), around its batch-first input.
- A Reshape, Flatten, Squeeze or Unsqueeze of another one reads the first one's input instead:
  the attention's q/k/v split exports Reshape → Unsqueeze → Transpose → Squeeze chains.

Why: a reshape run by numpy is a free view of its input only when that input is an arena value
of its own (schedule/aliases.py), so the second of two chained reshapes was a copy, and a
size-1 Transpose always was; between generated kernels each is also a step of its own.
Identities relied on: Transpose(x, perm) = Reshape(x, shape) when the axes of size > 1 keep
their order; Reshape(Reshape(x, s1), s2) = Reshape(x, s2) (all are row-major reinterpretations).
The intermediate reshape, when nothing else reads it, is removed at once, so that the next
passes see the original value's true readers (passes/expose_epilogues.py needs a sole reader).
"""

from __future__ import annotations

from woodpecker.ir.graph import Graph, Node
from woodpecker.ir.pattern import add_reshape, static
from woodpecker.ops.shape import RESHAPES


def _static(node: Node) -> bool:
    """The node's input and output shapes are known (so it can become a Reshape)."""
    return static(node.inputs[0]) and static(node.outputs[0])


def _renames_axes(node: Node) -> bool:
    """A Transpose that moves only size-1 axes."""
    if node.op != "Transpose" or not _static(node):
        return False
    shape = node.inputs[0].shape
    moved = [a for a in node.attrs["perm"] if shape[a] != 1]
    return moved == sorted(moved)


def simplify_reshapes(graph: Graph) -> int:
    rewritten = 0
    for node in list(graph.nodes):
        if not (node.op in RESHAPES and _static(node) or _renames_axes(node)):
            continue
        x = node.inputs[0]
        source = x.producer
        chained = source is not None and source.op in RESHAPES and _static(source) \
            and not graph.is_output(x)
        if not chained and node.op != "Transpose":
            continue
        origin = source.inputs[0] if chained else x
        out, index = node.outputs[0], graph.nodes.index(node)
        graph.remove_node(node)
        add_reshape(graph, origin, out, node.name, index)
        rewritten += 1
    if rewritten:
        graph.dce()
    return rewritten
