"""ONNX → IR. Checks the model, specialises dynamic dimensions (a named one, or one written
`-1` or `0` as paddle2onnx and others do) to the shapes the user gives, and infers static shapes
with Woodpecker's own op rules (cross-checked against ONNX shape inference, so a disagreement is
caught at import).

Open world: a node Woodpecker has no definition of — an op it does not define, a variant its
rule refuses, an attribute holding a subgraph (If, Loop, Scan) — becomes an `Opaque` node
(ops/opaque.py) carrying the original node, its output shapes from ONNX shape inference at the
user's shapes. Only a
shape that depends on the data (NonZero, NonMaxSuppression) stops the import: a
DynamicShapeError. (An UnsupportedOpError — an opset the converter cannot convert, an element
type numpy has not — makes the compiler plan the whole model on a library, frontend/whole.py,
which refuses it where ONNX Runtime refuses the file: selection/library_first.py.)

What ONNX Runtime runs is imported as it loads it (frontend/as_loaded.py: sparse initializers
dense, model-local functions inlined); two Constant nodes may share a name (ONNX Runtime makes
them initializers first), Woodpecker's nodes then named apart."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from woodpecker.errors import (
    ModelError,
    UnsupportedOpError,
    WoodpeckerError,
    first_line,
)
from woodpecker.frontend.as_loaded import as_loaded
from woodpecker.frontend.onnx_types import dims_of, element_dtype
from woodpecker.frontend.open_world import opaque_node, opaque_reason, value_types
from woodpecker.frontend.qoperator import qdq_form
from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.types import onnx_type_name, to_numpy_dtype
from woodpecker.ops import OPS, run_reference
from woodpecker.ops.registry import static_inputs

MIN_OPSET = 13
# Shape subgraphs are evaluated during inference only while their results stay this small.
_KNOWN_LIMIT = 1 << 16


def load_model_proto(model: "str | os.PathLike | bytes | onnx.ModelProto") -> onnx.ModelProto:
    """Read and validate an ONNX model; any problem becomes one `ModelError` line."""
    model = bytes(model) if isinstance(model, (bytearray, memoryview)) else model
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif not isinstance(model, (str, bytes, os.PathLike)):
        raise ModelError(f"a model is an ONNX file's path, its bytes or an onnx.ModelProto "
                         f"(compile takes a torch.nn.Module too), not a {type(model).__name__}")
    else:
        where = "model bytes" if isinstance(model, bytes) else str(model)
        try:
            if isinstance(model, bytes):
                proto = onnx.load_from_string(model)
            else:
                if not os.path.isfile(model):
                    raise ModelError(f"{model} is a folder, not an ONNX model file"
                                     if os.path.isdir(model) else f"model file not found: {model}")
                proto = onnx.load(os.fspath(model))
        except ModelError:
            raise
        except OSError as e:  # unreadable, or an external data file missing
            raise ModelError(f"cannot read {e.filename or where}: {e.strerror or e}") from None
        except Exception as e:  # protobuf raises several types for garbage input
            raise ModelError(f"{where} is not a valid ONNX model ({type(e).__name__})") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelError("the ONNX model has an empty graph (is the file an ONNX model?)")
    try:
        check_model(proto)    # (onnx's checker, taking an open-rank graph input as ORT does)
    except Exception as e:
        raise ModelError(f"invalid ONNX model: {first_line(e)}") from None
    return lenient_declared_shapes(proto)


def lenient_declared_shapes(proto: onnx.ModelProto) -> onnx.ModelProto:
    """`proto`, or where it declares a shape of an output or value_info that its graph does
    not produce, a copy with those declared shapes dropped (their types kept) and a warning:
    ONNX Runtime warns ("Falling back to lenient merge") and runs with the inferred shapes.
    Done where the model is read, so the import and the whole-model plan (whose session's
    buffers take the declared dimensions) both see the shapes the graph makes — a declared
    [1, 4] output of a [2, 3] result would have had 6 values written into a buffer of 4."""
    try:
        shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
        return proto
    except Exception as e:  # noqa: BLE001 - onnx raises its own types
        if "existing shape differ" not in str(e):
            return proto      # the import reports it, one line
        why = _inference_error(e)
    warnings.warn(f"the model declares a shape its graph does not produce ({why}); the "
                  "inferred shape is used, as ONNX Runtime does", stacklevel=3)
    lenient = onnx.ModelProto.FromString(proto.SerializeToString())
    for vi in (*lenient.graph.output, *lenient.graph.value_info):
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    return lenient


def check_model(proto: onnx.ModelProto) -> None:
    """`onnx.checker.check_model`, but a graph input or output whose tensor type has no shape
    field (its rank unknown: ONNX Runtime runs such a model) is checked as if it had one: the
    checker requires the field in the main graph, ONNX Runtime does not. A model of IR version
    3 is checked as IR 4: an initializer not listed as a graph input, an error below IR 4 that
    ONNX Runtime does not raise (its test model mul_1.onnx). Leaves the model unchanged."""
    open_rank = [vi for vi in list(proto.graph.input) + list(proto.graph.output)
                 if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")]
    ir = proto.ir_version
    for vi in open_rank:
        vi.type.tensor_type.shape.SetInParent()
    proto.ir_version = 4 if ir == 3 else ir
    try:
        onnx.checker.check_model(proto)
    finally:
        proto.ir_version = ir
        for vi in open_rank:
            vi.type.tensor_type.ClearField("shape")


def import_onnx(model: Any, input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                input_values: Mapping[str, np.ndarray] | None = None) -> Graph:
    """Import an ONNX model into a `Graph` with static shapes.

    `input_values` binds graph inputs to fixed values (they become constants): a model whose
    shapes depend on an input's value (a Reshape target fed at run time) is specialised to it.
    """
    # a QOperator file's contrib integer ops as the QDQ form they are defined as
    # (frontend/qoperator.py); library regions then run the rewritten nodes. Sparse
    # initializers dense, local functions inlined: the model as ONNX Runtime loads it
    original = as_loaded(load_model_proto(model))
    original = qdq_form(original) or original
    proto = upgrade_opset(original)
    _check_opset(proto)
    check_graph(proto)
    proto = bind_values(proto, dict(input_values or {}))
    proto = specialise(proto, dict(input_shapes or {}))
    graph = _build(proto, lambda: value_types(proto))
    try:
        _infer_shapes(graph)     # Woodpecker's rules check attributes first: the right node
    except _RuleFailure:
        _onnx_inference(proto)   # ONNX's message where it sees the fault too
        raise
    _cross_check(_onnx_inference(proto), graph)
    graph.source = original      # library regions run the user's own nodes (onnx_step.py)
    return graph


class _RuleFailure(ModelError):
    """A shape rule or reference evaluation failed on a node with something other than a
    Woodpecker error (an attribute no rule validates)."""


def upgrade_opset(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A model of an opset below MIN_OPSET converted to MIN_OPSET by onnx.version_converter
    (a one-line UnsupportedOpError where it cannot be)."""
    old = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    if not old or old[0] >= MIN_OPSET:
        return proto
    try:
        from onnx import version_converter

        if proto.ir_version == 3:       # (read as IR 4, as check_model reads it)
            proto = onnx.ModelProto.FromString(proto.SerializeToString())
            proto.ir_version = 4
        converted = version_converter.convert_version(proto, MIN_OPSET)
        onnx.checker.check_model(converted)
    except Exception as e:  # noqa: BLE001 - the converter raises its own types
        raise UnsupportedOpError(f"opset {old[0]} is not supported (need {MIN_OPSET} or newer) "
                                 f"and onnx.version_converter could not convert it: "
                                 f"{first_line(e)}") from None
    return converted


def _check_opset(proto: onnx.ModelProto) -> None:
    newest = onnx.defs.onnx_opset_version()
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx") and o.version < MIN_OPSET:
            raise UnsupportedOpError(f"opset {o.version} is not supported (need {MIN_OPSET} or "
                                     "newer; convert with onnx.version_converter)")
        if o.domain in ("", "ai.onnx") and o.version > newest:
            raise UnsupportedOpError(f"opset {o.version} is newer than any this build knows "
                                     f"(onnx {onnx.__version__}: opset {newest})")


def check_graph(proto: onnx.ModelProto) -> None:
    """What ONNX Runtime refuses and the checker lets through: a graph without outputs, two
    nodes of one name other than Constant nodes (ONNX Runtime makes those initializers before
    it looks at the names: silero VAD's OpenVINO export has two Constants named 'F0::anon').
    Where names repeat, the import names Woodpecker's nodes apart (`_build`)."""
    g = proto.graph
    if not g.output:
        raise ModelError("the graph has no outputs: nothing to compute")
    seen: set[str] = set()
    for n in g.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            continue
        if n.name and n.name in seen:
            raise ModelError(f"two nodes are named {n.name!r}; node names must be unique")
        seen.add(n.name)


def _onnx_inference(proto: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX's own shape and type inference, strict: a wrong attribute (a zero stride, an axis
    out of range), a declared type the graph does not produce, … is one ModelError line
    before Woodpecker's shape rules see the model."""
    try:
        return shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
    except Exception as e:
        raise ModelError(f"invalid model: {_inference_error(e)}") from None


def _inference_error(e: Exception) -> str:
    """The useful line of an ONNX inference error (its first line is a generic heading)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    detail = [ln for ln in lines if "op_type:" in ln or "Error]" in ln]
    text = (detail or lines or [type(e).__name__])[-1]
    return text.replace("[ShapeInferenceError] Inference error(s): ", "")


def bind_values(proto: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    if not values:
        return proto
    proto = onnx.ModelProto.FromString(proto.SerializeToString())
    inputs = {vi.name: vi for vi in proto.graph.input}
    for name, value in values.items():
        if name not in inputs:
            raise ModelError(f"input_values names unknown input {name!r}")
        value = np.asarray(value)
        want = to_numpy_dtype(inputs[name].type.tensor_type.elem_type)
        if value.dtype != want:
            raise ModelError(f"input_values[{name!r}] has dtype {value.dtype}, expected {want}")
        proto.graph.initializer.append(numpy_helper.from_array(value, name))
        proto.graph.input.remove(inputs[name])
    return proto


def specialise(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """Fix every input dimension; a dynamic one must be given by the user. A dimension written
    0 takes the size the user gives (some exporters write 0 for "any"), else stays 0."""
    proto = onnx.ModelProto.FromString(proto.SerializeToString())
    inits = {i.name for i in proto.graph.initializer}
    inputs = [vi for vi in proto.graph.input if vi.name not in inits]
    unknown = set(shapes) - {vi.name for vi in inputs}
    if unknown:
        names = ", ".join(vi.name for vi in inputs)
        raise ModelError(f"--input-shape names unknown input(s) {sorted(unknown)}; inputs: {names}")
    for vi in inputs:
        dims = dims_of(vi)
        given = shapes.get(vi.name)
        if given is None:
            dynamic = [d for d in dims if not isinstance(d, int)]
            if dynamic or dims == [None]:
                raise ModelError(f"input {vi.name!r} has dynamic dimensions {dims}; give its "
                                 f"shape, e.g. --input-shape {vi.name}=1x3x224x224")
            continue
        if dims != [None] and (len(dims) != len(given) or any(
                isinstance(d, int) and d not in (0, g) for d, g in zip(dims, given))):
            raise ModelError(f"input {vi.name!r}: given shape {'x'.join(map(str, given))} does "
                             f"not match the model's {dims}")
        shape = vi.type.tensor_type.shape
        shape.ClearField("dim")
        for g in given:
            shape.dim.add().dim_value = int(g)
    for vi in list(proto.graph.value_info) + list(proto.graph.output):
        if vi.type.HasField("tensor_type"):   # -1 / 0 written for "dynamic": open
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value <= 0:
                    d.Clear()
    return proto


def _attr(a: onnx.AttributeProto, node_name: str) -> Any:
    if a.type == onnx.AttributeProto.TENSOR:
        t = a.t
        element_dtype(t.data_type, f"attribute {a.name!r} of node {node_name!r}")
        try:
            return numpy_helper.to_array(t)
        except Exception as e:
            raise ModelError(f"attribute {a.name!r} of node {node_name!r} cannot be read: "
                             f"{first_line(e)}") from None
    if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS,
                  onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.TENSORS):
        raise UnsupportedOpError(f"node {node_name!r}: attribute {a.name!r} of type "
                                 f"{onnx.AttributeProto.AttributeType.Name(a.type)}")
    value = onnx.helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


def _constant_value(node: Node) -> None:
    """Normalise Constant's value_* attributes into one `value` array."""
    a = node.attrs
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in a:
            a["value"] = np.array(a.pop(key), dtype=dtype)
    if "value" not in a:
        raise UnsupportedOpError(f"Constant node {node.name!r}: only tensor/float/int values "
                                 "are supported")


def _build(proto: onnx.ModelProto, types) -> Graph:
    """The IR of `proto`; nodes Woodpecker has no definition of become Opaque nodes, their
    output shapes read from `types()` (`value_types`, computed once, only when needed)."""
    g = proto.graph
    graph = Graph(g.name or "model")
    graph.opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in proto.opset_import}
    for init in g.initializer:
        element_dtype(init.data_type, f"initializer {init.name!r}")
        try:
            data = numpy_helper.to_array(init)
        except Exception as e:  # raw bytes that do not fill the shape, …
            raise ModelError(f"initializer {init.name!r} cannot be read: "
                             f"{first_line(e)}") from None
        graph.value(init.name, data.shape, data.dtype, data)
    for vi in g.input:
        if vi.name in graph.values:
            continue  # an initializer listed as input: a constant (IR < 4 convention)
        dt = element_dtype(vi.type.tensor_type.elem_type, f"input {vi.name!r}")
        graph.inputs.append(graph.value(vi.name, tuple(dims_of(vi)), dt))
    # every node's name its own: a repeated one (two Constants, `check_graph`) or one made for
    # a node without a name gets the node's index appended, the user's name kept before it
    names: set[str] = set()
    known: list = []
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        while name in names:
            name = f"{name}_{i}"
        names.add(name)
        reason = opaque_reason(n)
        if reason is None:
            attrs = {a.name: _attr(a, name) for a in n.attribute}
            ins = [graph.value(x) if x else None for x in n.input]
            outs = [graph.value(x) for x in n.output]
            node = graph.add_node(n.op_type, ins, outs, attrs, name)
            if n.op_type == "Constant":
                _constant_value(node)
            reason = OPS[node.op].check(node)
            if reason is None:
                continue
            graph.remove_node(node)
        if not known:
            known.append(types())
        opaque_node(graph, n, name, reason, opsets, known[0])
    for vi in g.output:
        if vi.name not in graph.values:
            raise ModelError(f"graph output {vi.name!r} is produced by no node")
        element_dtype(vi.type.tensor_type.elem_type, f"output {vi.name!r}")
        graph.outputs.append(graph.values[vi.name])
    for v in graph.values.values():
        if v.producer is None and v.data is None and v not in graph.inputs:
            raise ModelError(f"value {v.name!r} is read but never produced")
    return graph


def _infer_shapes(graph: Graph) -> None:
    """Shapes and dtypes for every value, in order; small shape subgraphs are evaluated so that
    Reshape/Slice/Expand targets computed from `Shape` become known."""
    known: dict[str, np.ndarray] = {}

    def data_of(v: Value) -> np.ndarray | None:
        return v.data if v.data is not None else known.get(v.name)

    limit = _memory_bytes()
    for node in graph.nodes:
        _check_types(node, graph.opset)
        try:
            _infer_node(node, data_of, known, limit)
        except WoodpeckerError:
            raise
        except Exception as e:
            raise _RuleFailure(f"node {node.name!r} ({node.op}): its attributes or inputs do "
                               f"not fit ({type(e).__name__}: {first_line(e)})") from None


def _infer_node(node: Node, data_of, known: dict, limit: int) -> None:
    """`node`'s output shapes and dtypes; its outputs' values too where they are small and its
    inputs known (shape subgraphs)."""
    results = OPS[node.op].infer(node, data_of)
    for v, (shape, dtype) in zip(node.outputs, results):
        v.shape, v.dtype = tuple(int(d) for d in shape), np.dtype(dtype)
        size = int(np.prod(v.shape, dtype=object)) * v.dtype.itemsize
        if size > limit:
            raise ModelError(f"value {v.name!r} of node {node.name!r} would hold "
                             f"{size / 2**30:.3g} GiB ({'x'.join(map(str, v.shape))} "
                             f"{v.dtype}), more than this machine's memory")
    small = all(int(np.prod(v.shape)) <= _KNOWN_LIMIT for v in node.outputs)
    ins = static_inputs(node, data_of) if small or node.op == "Shape" else None
    if ins is not None:
        for v, d in zip(node.outputs, run_reference(node, ins)):
            known[v.name] = d


def _memory_bytes() -> int:
    """This machine's physical memory (no value may be larger), or 2^40 where unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def _check_types(node: Node, opset: int) -> None:
    """The op's type constraints (its ONNX schema): inputs bound to one type parameter share
    one dtype, and it is one the op allows, else one ModelError line (ONNX Runtime refuses
    such a model; Woodpecker's engines would compute in whatever type came first)."""
    try:
        schema = onnx.defs.get_schema(node.op, opset, "")
    except onnx.defs.SchemaError:
        return  # Woodpecker's own fused ops
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formals = schema.inputs
    bound: dict[str, tuple[str, np.dtype]] = {}
    for i, v in enumerate(node.inputs):
        if v is None or v.dtype is None or not formals:
            continue
        formal = formals[min(i, len(formals) - 1)]
        param = formal.type_str
        if param not in allowed:
            continue
        type_str = f"tensor({onnx_type_name(onnx.helper.np_dtype_to_tensor_dtype(v.dtype))})"
        if type_str not in allowed[param]:
            raise ModelError(f"node {node.name!r} ({node.op}): input {v.name!r} is "
                             f"{v.dtype}, which {node.op} does not take there")
        first = bound.setdefault(param, (v.name, v.dtype))
        if first[1] != v.dtype:
            raise ModelError(f"node {node.name!r} ({node.op}): inputs {first[0]!r} ({first[1]}) "
                             f"and {v.name!r} ({v.dtype}) must have one type")


def _cross_check(inferred: onnx.ModelProto, graph: Graph) -> None:
    g = inferred.graph
    for vi in list(g.value_info) + list(g.output):
        v = graph.values.get(vi.name)
        dims = dims_of(vi) if vi.type.HasField("tensor_type") else [None]
        if v is None or v.shape is None or dims == [None] or not all(
                isinstance(d, int) for d in dims):
            continue
        if tuple(dims) != v.shape:
            raise ModelError(f"value {vi.name!r}: Woodpecker infers shape {v.shape} but ONNX "
                             f"shape inference gives {tuple(dims)}")
