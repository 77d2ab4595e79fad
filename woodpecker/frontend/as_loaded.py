"""The model as ONNX Runtime loads it: what a file may write in a form Woodpecker's import does
not read, rewritten into the form it does, the same model.

Contract: `as_loaded(proto)` returns `proto` itself where nothing needs rewriting, else a copy
with each sparse initializer of the main graph dense (an initializer of the same name; ONNX
Runtime makes them dense when it loads the file too) and every call of a model-local function
(`model.functions`) inlined by `onnx.inliner` (ONNX Runtime inlines them as well: its
optimiser sees the function's nodes). Node-level import, the whole-model plan and the file's
nodes a library region runs (`Graph.source`, engines/onnx_step.original_region) all read this
form; ONNX Runtime's own check of the user's file (selection/ort_reference.ort_refusal) reads
the file as given.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import inliner, numpy_helper

from woodpecker.errors import ModelError, first_line


def as_loaded(proto: onnx.ModelProto) -> onnx.ModelProto:
    if not proto.graph.sparse_initializer and not proto.functions:
        return proto
    proto = onnx.ModelProto.FromString(proto.SerializeToString())
    g = proto.graph
    g.initializer.extend(dense(s) for s in g.sparse_initializer)
    g.ClearField("sparse_initializer")
    if proto.functions:
        try:
            proto = inliner.inline_local_functions(proto)
        except Exception as e:  # noqa: BLE001 - the inliner raises its own types
            raise ModelError(f"the model's local functions cannot be inlined: "
                             f"{first_line(e)}") from None
    return proto


def dense(sparse: onnx.SparseTensorProto) -> onnx.TensorProto:
    """A sparse tensor as the dense tensor of its name: its values at their indices (linear,
    shape (NNZ,), or coordinates, shape (NNZ, rank)), zero elsewhere."""
    name = sparse.values.name
    try:
        values = numpy_helper.to_array(sparse.values).reshape(-1)
        indices = numpy_helper.to_array(sparse.indices).astype(np.int64) \
            if sparse.HasField("indices") else np.zeros((0,), np.int64)
        shape = tuple(int(d) for d in sparse.dims)
        out = np.zeros(shape, values.dtype)
        if indices.ndim == 2:        # coordinates
            indices = np.ravel_multi_index(tuple(indices.T), shape)
        out.reshape(-1)[indices.reshape(-1)] = values
    except Exception as e:  # noqa: BLE001 - indices out of range, sizes that disagree, …
        raise ModelError(f"sparse initializer {name!r} cannot be read: {first_line(e)}") \
            from None
    return numpy_helper.from_array(out, name)
