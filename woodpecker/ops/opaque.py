"""Opaque library nodes: ONNX nodes Woodpecker has no definition of, kept as they were written.

Contract. An `Opaque` node carries original ONNX nodes verbatim (`attrs["graph"]`: a
serialized `GraphProto` of those nodes, subgraph attributes — If/Loop/Scan bodies — included,
base64 so that plan.json holds it) and the opset of every domain they use (`attrs["opsets"]`).
Its inputs are the values those nodes read from outside (constants and the values the
subgraphs read from the enclosing scope included), its outputs the values the rest of the graph
reads; the names inside the carried nodes are the names the model gave them
(`attrs["inputs"]`, `attrs["outputs"]`: the formal names, in `node.inputs`/`node.outputs`
order, so a pass may rename the IR's values without touching the carried nodes). Output shapes
and types are resolved at import from ONNX shape inference at the user's input shapes
(`attrs["_shapes"]`, `attrs["_dtypes"]`) — Woodpecker has no rule of its own for them.

Who runs it: only library engines that declare they can (ONNX Runtime, OpenVINO: each asked
by building the node's model, engines/*). The numpy engine does not declare it. The
"reference" of an opaque node is ONNX Runtime itself, on the carried nodes as one model: the
only definition of such an op Woodpecker has is the library's (Woodpecker-DL §2.5 runs library
kernels in place of its own; thesis ch. 5, XLVM: an engine is described by what it runs).

One node may carry one op (an unsupported op of a model Woodpecker otherwise compiles) or the
whole model (the library-first plan, frontend/whole.py: the user's original graph run by one
library session).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.registry import DataOf, op

if TYPE_CHECKING:
    import onnx

OP = "Opaque"
WHOLE_MODEL = "model"    # the op_type of the node carrying the user's whole graph


def encode_graph(graph: "onnx.GraphProto") -> str:
    return base64.b64encode(graph.SerializeToString()).decode("ascii")


def carried_graph(node: Node) -> "onnx.GraphProto":
    """The ONNX nodes an Opaque node carries (a GraphProto with nodes only)."""
    import onnx

    return onnx.GraphProto.FromString(base64.b64decode(node.attrs["graph"]))


def carried_ops(node: Node) -> list[str]:
    """The op types an Opaque node carries, each once, in order (`inspect`, `ops`)."""
    return list(dict.fromkeys(_key(n) for n in carried_graph(node).node))


def _key(n: onnx.NodeProto) -> str:
    return n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"


def _infer(node: Node, data_of: DataOf):
    return [(tuple(s), np.dtype(d)) for s, d in zip(node.attrs["_shapes"], node.attrs["_dtypes"])]


def _flops(node: Node) -> int:
    return 0     # unknown to Woodpecker: its time is measured, never estimated


def opsets(attrs: dict) -> dict[str, int]:
    """The opset of each domain the carried nodes use ("" the standard one)."""
    return {str(k): int(v) for k, v in attrs["opsets"].items()}


@op(OP, _infer, _flops)
def _reference(attrs, *inputs):
    """ONNX Runtime's result for the carried nodes (see the module): every input fed,
    constants too, under the names the carried nodes read."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    graph = onnx.GraphProto.FromString(base64.b64decode(attrs["graph"]))
    formal = [(n, x) for n, x in zip(attrs["inputs"], inputs) if n and x is not None]
    feeds = dict(formal)
    graph.input.extend(helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype), np.shape(x))
        for n, x in feeds.items())
    graph.output.extend(helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(np.dtype(d)), s)
        for n, s, d in zip(attrs["outputs"], attrs["_shapes"], attrs["_dtypes"]))
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid(d, v) for d, v in opsets(attrs).items()])
    model.ir_version = min(model.ir_version, 10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in sess.run(list(attrs["outputs"]),
                                             {n: np.asarray(x) for n, x in feeds.items()})]
