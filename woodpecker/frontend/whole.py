"""The user's original graph as one Opaque node: the library-first plan's graph.

Contract: `whole_graph(model, input_shapes, input_values)` returns a `Graph` with the model's
inputs and outputs, its initializers as constants, and one `Opaque` node (ops/opaque.py)
carrying every node of the model as written — no opset conversion, no pass, no Woodpecker
definition needed. A library engine (ONNX Runtime, OpenVINO) runs that node as one session over
the user's own graph, keeping the library's own fusions and layout choices: an all-library plan
*is* the library (issue 50: ORT regions over Woodpecker's rewrite of the graph ran 0.83× as
fast as ORT on the exporter's graph). Output shapes come from ONNX shape inference at the given
input shapes (ONNX Runtime's symbolic inference where ONNX's leaves one open); an output whose
shape depends on the data is a DynamicShapeError.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from woodpecker.errors import DynamicShapeError, ModelError, first_line
from woodpecker.frontend.onnx_import import (
    bind_values,
    check_graph,
    dims_of,
    element_dtype,
    load_model_proto,
    specialise,
    value_types,
)
from woodpecker.ir.graph import Graph
from woodpecker.ops.opaque import OP, WHOLE_MODEL, encode_graph


def whole_graph(model: "str | os.PathLike | bytes | onnx.ModelProto",
                input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                input_values: Mapping[str, np.ndarray] | None = None,
                known: Mapping[str, tuple[list[int], np.dtype]] | None = None) -> Graph:
    """`known`: output name → (shape, dtype) from the node-level import of the same model
    (Woodpecker's rules: zero-size and computed shapes included), taken where given."""
    proto = load_model_proto(model)
    check_graph(proto)
    proto = bind_values(proto, dict(input_values or {}))
    proto = specialise(proto, dict(input_shapes or {}))
    g = proto.graph
    graph = Graph(g.name or "model")
    opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in proto.opset_import}
    graph.opset = opsets.get("", 1)
    inits = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name not in inits:
            dt = element_dtype(vi.type.tensor_type.elem_type, f"input {vi.name!r}")
            graph.inputs.append(graph.value(vi.name, tuple(dims_of(vi)), dt))
    formal = [v.name for v in graph.inputs]
    for t in g.initializer:
        element_dtype(t.data_type, f"initializer {t.name!r}")
        try:
            data = numpy_helper.to_array(t)
        except Exception as e:  # noqa: BLE001 - raw bytes that do not fill the shape, …
            raise ModelError(f"initializer {t.name!r} cannot be read: {first_line(e)}") from None
        graph.value(t.name, data.shape, data.dtype, data)
        formal.append(t.name)
    produced = {x for n in g.node for x in n.output}
    # ONNX's own inference only: where Woodpecker's rules found a shape data-dependent, ONNX
    # Runtime's symbolic inference has been seen to fill in a wrong size (a Range of inputs)
    types = dict(known) if known else value_types(proto, symbolic=False)
    shapes, dtypes = [], []
    for vi in g.output:
        if vi.name not in produced:
            raise ModelError(f"graph output {vi.name!r} is produced by no node")
        dims, elem = types.get(vi.name, (dims_of(vi), vi.type.tensor_type.elem_type))
        if isinstance(elem, np.dtype):
            shapes.append([int(d) for d in dims])
            dtypes.append(elem.name)
            continue
        if not all(isinstance(d, int) for d in dims):
            raise DynamicShapeError(f"output {vi.name!r}: its shape depends on the data "
                                    f"({dims}); Woodpecker plans need static shapes")
        dt = element_dtype(elem, f"output {vi.name!r}")
        shapes.append([int(d) for d in dims])
        dtypes.append(dt.name)
    carried = onnx.GraphProto(node=list(g.node))
    attrs: dict[str, Any] = {"graph": encode_graph(carried), "opsets": opsets,
                             "op_type": WHOLE_MODEL, "why": "the user's original graph",
                             "inputs": formal, "outputs": [vi.name for vi in g.output],
                             "_shapes": shapes, "_dtypes": dtypes}
    outs = [graph.value(vi.name, s, d) for vi, s, d in zip(g.output, shapes, dtypes)]
    graph.add_node(OP, [graph.values[n] for n in formal], outs, attrs, "model")
    graph.outputs.extend(outs)
    return graph
