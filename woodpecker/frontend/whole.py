"""The user's original graph as one Opaque node: the library-first plan's graph.

Contract: `whole_graph(model, input_shapes, input_values)` returns a `Graph` with the model's
inputs and outputs, its initializers as constants, and one `Opaque` node (ops/opaque.py)
carrying every node of the model as written — no opset conversion, no pass, no Woodpecker
definition needed (a sparse initializer made dense, a model-local function's calls
inlined: frontend/as_loaded.py). A library engine (ONNX Runtime, OpenVINO) runs that node as
one session over the user's own graph, keeping the library's own fusions and layout choices:
an all-library plan *is* the library (issue 50: ORT regions over Woodpecker's rewrite of the
graph ran 0.83× as fast as ORT on the exporter's graph). Output shapes come from ONNX shape
inference at the given input shapes; an output dimension that inference leaves open (one the
data decides: the detections after NonMaxSuppression, an If whose branches differ) is
`DYNAMIC` (-1), which only a plan without an arena can hold — the library then allocates its
outputs each run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from woodpecker.errors import DynamicShapeError, ModelError, first_line
from woodpecker.frontend.as_loaded import as_loaded
from woodpecker.frontend.onnx_import import (
    bind_values,
    check_graph,
    dims_of,
    load_model_proto,
    specialise,
    value_types,
)
from woodpecker.frontend.onnx_types import library_dtype
from woodpecker.ir.graph import DYNAMIC, Graph
from woodpecker.ops.opaque import OP, WHOLE_MODEL, encode_graph


def _session_ranks(proto: onnx.ModelProto, types: dict) -> dict:
    """Output name → (open dims, element type) from an ONNX Runtime session of the model, for
    outputs whose rank neither inference gives (quantized LSTMs of com.microsoft)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    try:
        sess = ort.InferenceSession(proto.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ORT raises its own types
        raise ModelError(f"no library runs this model (onnxruntime: {first_line(e)})") from None
    elems = {vi.name: vi.type.tensor_type.elem_type for vi in proto.graph.output}
    return {o.name: ([None] * len(o.shape), types.get(o.name, ([None], elems[o.name]))[1]
                     or elems[o.name]) for o in sess.get_outputs()
            if types.get(o.name, ([None], 0))[0] == [None] and o.name in elems}


def whole_graph(model: "str | os.PathLike | bytes | onnx.ModelProto",
                input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                input_values: Mapping[str, np.ndarray] | None = None,
                known: Mapping[str, tuple[list[int], np.dtype]] | None = None) -> Graph:
    """`known`: output name → (shape, dtype) from the node-level import of the same model
    (Woodpecker's rules: zero-size and computed shapes included), taken where given."""
    proto = load_model_proto(model)
    check_graph(proto)
    proto = as_loaded(proto)     # sparse initializers dense, local functions inlined
    # the library's session sees the inputs and outputs as the file declares them (a dynamic
    # dimension left open): silero VAD's If has a branch ONNX Runtime cannot infer once its
    # input is fixed to the other branch's shape
    declared = {vi.name: [d if isinstance(d, int) and d > 0 else None for d in dims_of(vi)]
                for vi in list(proto.graph.input) + list(proto.graph.output)
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")}
    proto = bind_values(proto, dict(input_values or {}))
    proto = specialise(proto, dict(input_shapes or {}))
    for vi in list(proto.graph.output) + list(proto.graph.value_info):
        # what the file declares is not trusted: the shapes are inferred from the inputs'
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    g = proto.graph
    graph = Graph(g.name or "model")
    opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in proto.opset_import}
    graph.opset = opsets.get("", 1)
    inits = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name not in inits:
            dt = library_dtype(vi.type.tensor_type.elem_type, f"input {vi.name!r}")
            graph.inputs.append(graph.value(vi.name, tuple(dims_of(vi)), dt))
    formal = [v.name for v in graph.inputs]
    for t in g.initializer:
        library_dtype(t.data_type, f"initializer {t.name!r}", constant=True)
        try:
            data = numpy_helper.to_array(t)
        except Exception as e:  # noqa: BLE001 - raw bytes that do not fill the shape, …
            raise ModelError(f"initializer {t.name!r} cannot be read: {first_line(e)}") from None
        graph.value(t.name, data.shape, data.dtype, data)
        formal.append(t.name)
    produced = {x for n in g.node for x in n.output}
    # ONNX's inference from the inputs' shapes; the rank of an output it leaves unknown
    # (com.microsoft ops) from an ONNX Runtime session, every dimension open
    types = dict(known) if known else value_types(proto)
    if any(types.get(vi.name, ([None], 0))[0] == [None] for vi in g.output):
        types.update(_session_ranks(proto, types))
    shapes, dtypes = [], []
    for vi in g.output:
        if vi.name not in produced:
            raise ModelError(f"graph output {vi.name!r} is produced by no node")
        dims, elem = types.get(vi.name, (dims_of(vi), vi.type.tensor_type.elem_type))
        if isinstance(elem, np.dtype):
            shapes.append([int(d) for d in dims])
            dtypes.append(elem.name)
            continue
        if dims == [None]:
            raise DynamicShapeError(f"output {vi.name!r}: its rank is not known; Woodpecker "
                                    "plans need it")
        dt = library_dtype(elem, f"output {vi.name!r}")
        # a dimension the data decides (detections after NonMaxSuppression) is -1: the plan
        # runs without an arena, the library allocating its outputs (compiler.py)
        shapes.append([int(d) if isinstance(d, int) else DYNAMIC for d in dims])
        dtypes.append(dt.name)
    carried = onnx.GraphProto(node=list(g.node))
    attrs: dict[str, Any] = {"graph": encode_graph(carried), "opsets": opsets,
                             "op_type": WHOLE_MODEL, "why": "the user's original graph",
                             "inputs": formal, "outputs": [vi.name for vi in g.output],
                             "declared": declared,
                             "_shapes": shapes, "_dtypes": dtypes}
    outs = [graph.value(vi.name, s, d) for vi, s, d in zip(g.output, shapes, dtypes)]
    graph.add_node(OP, [graph.values[n] for n in formal], outs, attrs, "model")
    graph.outputs.extend(outs)
    return graph
