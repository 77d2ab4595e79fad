"""Open world: which ONNX nodes stay opaque to Woodpecker, what they read from enclosing scopes,
and their output types from ONNX's shape inference.

Contract: `opaque_reason(node)` says why a node has no Woodpecker definition (None: it has
one); `opaque_node(graph, node, …)` adds it to the IR as an `Opaque` node (ops/opaque.py) whose
inputs include the outer values its subgraphs read; `value_types(proto)` gives every value's
dims and element type at the model's (specialised) input shapes. The libraries the plan embeds
run hundreds of ops Woodpecker does not define (issue 50); rather than list them, each library
is asked when a node is placed (engines/*: `accepts`).
"""

from __future__ import annotations

import onnx
from onnx import shape_inference

from woodpecker.errors import DynamicShapeError
from woodpecker.frontend.onnx_types import dims_of, element_dtype
from woodpecker.ir.graph import Graph
from woodpecker.ops import SUPPORTED
from woodpecker.ops.opaque import OP as OPAQUE
from woodpecker.ops.opaque import encode_graph


def op_key(n: onnx.NodeProto) -> str:
    """The op's name as Woodpecker's registry spells it (domain-qualified outside ONNX's)."""
    return n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"


_SUBGRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
_OPAQUE_ATTRS = (*_SUBGRAPH_ATTRS, onnx.AttributeProto.SPARSE_TENSOR,
                 onnx.AttributeProto.TENSORS)


def opaque_reason(n: onnx.NodeProto) -> str | None:
    """Why node `n` must stay opaque to Woodpecker (None: it has a definition)."""
    if op_key(n) not in SUPPORTED:
        return f"no Woodpecker definition of {op_key(n)}"
    for a in n.attribute:
        if a.type in _OPAQUE_ATTRS:
            return (f"attribute {a.name!r} of type "
                    f"{onnx.AttributeProto.AttributeType.Name(a.type)}")
    return None


def outer_names(n: onnx.NodeProto) -> list[str]:
    """The values of the enclosing scope that `n`'s subgraphs read (implicit inputs), in
    order of first use."""
    found: dict[str, None] = {}

    def visit(g: onnx.GraphProto, bound: set[str]) -> None:
        bound = bound | {i.name for i in g.input} | {i.name for i in g.initializer} | \
            {i.name for i in g.sparse_initializer}
        for m in g.node:
            for x in m.input:
                if x and x not in bound:
                    found.setdefault(x)
            for a in m.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                            a.graphs if a.type == onnx.AttributeProto.GRAPHS else []):
                    visit(sub, bound)
            bound = bound | set(m.output)

    for a in n.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                    a.graphs if a.type == onnx.AttributeProto.GRAPHS else []):
            visit(sub, set())
    return [x for x in found if x not in n.input]


def value_types(proto: onnx.ModelProto) -> dict[str, tuple[list, int]]:
    """Every value's dims and element type from ONNX shape inference (data propagation on); a
    dim it leaves unknown is not an int. ONNX Runtime's symbolic inference is not asked: its
    sympy simplification took 650 s on torchvision's Faster R-CNN (36 Slices), and where it
    stays incomplete it writes the model into the current folder."""
    try:
        inferred = shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - the strict pass of import_onnx reports model faults
        inferred = proto
    return types_of(inferred)


def types_of(proto: onnx.ModelProto) -> dict[str, tuple[list, int]]:
    g = proto.graph
    out = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type"):
            out[vi.name] = (dims_of(vi), vi.type.tensor_type.elem_type)
    for t in g.initializer:
        out[t.name] = (list(t.dims), t.data_type)
    return out


def opaque_node(graph: Graph, n: onnx.NodeProto, name: str, reason: str,
                 opsets: dict[str, int], types: dict) -> None:
    """Add node `n` to `graph` as an Opaque node (ops/opaque.py) with its output types from
    `types`; a DynamicShapeError where a shape stays unknown at the given input shapes."""
    formal_in = list(n.input) + outer_names(n)
    shapes, dtypes = [], []
    for x in n.output:
        dims, elem = types.get(x, ([None], 0))
        if not x or not all(isinstance(d, int) for d in dims):
            raise DynamicShapeError(f"node {name!r} ({op_key(n)}): the shape of its output "
                                    f"{x!r} depends on the data ({dims}); Woodpecker plans "
                                    "need static shapes")
        shapes.append([int(d) for d in dims])
        dtypes.append(element_dtype(elem, f"output {x!r} of node {name!r}").name)
    carried = onnx.GraphProto(node=[n])
    attrs = {"graph": encode_graph(carried), "opsets": dict(opsets), "op_type": op_key(n),
             "why": reason, "inputs": formal_in, "outputs": list(n.output),
             "_shapes": shapes, "_dtypes": dtypes}
    ins = [graph.value(x) if x else None for x in formal_in]
    graph.add_node(OPAQUE, ins, [graph.value(x) for x in n.output], attrs, name)
