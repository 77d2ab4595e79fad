"""IR nodes → ONNX: a node (or a group of nodes) as a small standalone ONNX model.

Used by the onnxruntime engine (WPK §2.5: library kernels run in place of our own) and by
tests. Fused nodes are expanded back into their standard ONNX ops; resolved `_` attributes are
dropped, since the original attributes and constant inputs are still on the node.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

import woodpecker.ops  # noqa: F401 - registers every op, the composite ones' parts included
from woodpecker.frontend.onnx_types import onnx_elem_type
from woodpecker.ir.graph import Node, Value
from woodpecker.ops.fused import (
    BASE_INPUTS,
    QDQ_STEPS,
    channel_shape,
    runtime_count,
    split_operands,
)
from woodpecker.ops.opaque import OP as OPAQUE
from woodpecker.ops.opaque import carried_graph, opsets
from woodpecker.ops.registry import PARTS
from woodpecker.ops.shape import view_indices


def _attrs(op: str, attrs: dict, opset: int) -> dict:
    """The node's ONNX attributes: resolved `_` ones dropped, and so are normalised defaults the
    op does not have at this opset (the window geometry fills in `dilations`, which
    AveragePool only has from opset 19 — ORT rejects the node otherwise)."""
    try:
        known = set(onnx.defs.get_schema(op, opset).attributes)
    except onnx.defs.SchemaError:
        known = None
    out = {}
    for k, v in attrs.items():
        if k.startswith("_") or k in ("epilogue", "prologue") or \
                (known is not None and k not in known):
            continue
        out[k] = numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
    return out


def node_protos(node: Node, fresh, opset: int) -> tuple[list[onnx.NodeProto],
                                                        list[onnx.TensorProto]]:
    """ONNX nodes (and extra initializers) computing `node`."""
    name = lambda v: "" if v is None else v.name  # noqa: E731
    if node.op == "FusedElementwise":
        return _elementwise_protos(node, fresh, opset)
    if node.op == OPAQUE:
        return _opaque_protos(node), []
    if node.op in PARTS:
        protos, inits = [], []
        for part in PARTS[node.op](node):
            ps, extra = node_protos(part, fresh, opset)
            protos += ps
            inits += extra
            inits += [numpy_helper.from_array(np.asarray(v.data), v.name) for v in part.inputs
                      if v is not None and v.data is not None and v not in node.inputs]
        return protos, inits
    if node.op == "StridedView":
        flat, shape = fresh(node.name), fresh(f"{node.name}_minus1")
        indices = fresh(f"{node.name}_indices")
        return [helper.make_node("Reshape", [node.inputs[0].name, shape], [flat]),
                helper.make_node("Gather", [flat, indices], [node.outputs[0].name], axis=0)], \
            [numpy_helper.from_array(np.array([-1], np.int64), shape),
             numpy_helper.from_array(view_indices(node.attrs["view"]), indices)]
    if node.op == "Gelu" and opset < GELU_OPSET:
        return _gelu_protos(node.inputs[0].name, node.outputs[0].name, node.outputs[0].dtype,
                            fresh, node.attrs)
    if node.op == "RMSNormalization" and opset < RMS_OPSET:
        return _rmsnorm_protos(node, fresh, opset)
    if node.op not in BASE_INPUTS:
        return [helper.make_node(node.op, [name(v) for v in node.inputs],
                                 [v.name for v in node.outputs], name=node.name,
                                 **_attrs(node.op, node.attrs, opset))], []
    base, n_base = BASE_INPUTS[node.op]
    ins = [name(v) for v in node.inputs[:n_base]]
    while ins and ins[-1] == "":
        ins.pop()
    protos, inits = [], []
    residuals, vectors = split_operands(node.attrs, node.inputs[n_base:])
    if node.attrs.get("prologue"):
        x = node.inputs[0]
        ins[0] = fresh(node.name)
        protos, inits = _program_protos(node.attrs["prologue"],
                                        [x.name] + [v.name for v in vectors], np.zeros(0), x,
                                        ins[0], node.name, fresh, opset)
    cur = fresh(node.name)
    if base in PARTS:       # a composite base: its standard ops
        inner = Node(base, node.name, list(node.inputs[:n_base]),
                     [Value(cur, node.outputs[0].shape, node.outputs[0].dtype)], {})
        more, extra = node_protos(inner, fresh, opset)
        protos, inits = protos + more, inits + extra
    else:
        protos.append(helper.make_node(base, ins, [cur], name=node.name,
                                       **_attrs(base, node.attrs, opset)))
    operands = iter(residuals)
    steps = node.attrs["epilogue"]
    for i, step in enumerate(steps):
        out = node.outputs[0].name if i == len(steps) - 1 else fresh(node.name)
        kind = step["op"]
        if kind == "Add":
            protos.append(helper.make_node("Add", [cur, next(operands).name], [out]))
        elif kind == "Mul":
            t = numpy_helper.from_array(np.array(step["scale"], dtype=node.outputs[0].dtype),
                                        fresh("scale"))
            inits.append(t)
            protos.append(helper.make_node("Mul", [cur, t.name], [out]))
        elif kind == "Clip":
            bounds = []
            for key in ("min", "max"):
                if step.get(key) is None:
                    bounds.append("")
                    continue
                t = numpy_helper.from_array(np.array(step[key], dtype=node.outputs[0].dtype),
                                            fresh(key))
                inits.append(t)
                bounds.append(t.name)
            protos.append(helper.make_node("Clip", [cur] + bounds, [out]))
        elif kind == "Gelu" and opset < GELU_OPSET:
            ps, extra = _gelu_protos(cur, out, node.outputs[0].dtype, fresh, step)
            protos += ps
            inits += extra
        elif kind == "Silu":
            s = fresh(node.name)
            protos += [helper.make_node("Sigmoid", [cur], [s]),
                       helper.make_node("Mul", [cur, s], [out])]
        else:
            protos.append(helper.make_node(kind, [cur], [out],
                                           **{k: v for k, v in step.items() if k != "op"}))
        cur = out
    if not steps:
        protos[-1].output[0] = node.outputs[0].name
    return protos, inits


def _opaque_protos(node: Node) -> list[onnx.NodeProto]:
    """An Opaque node's carried nodes as they were written, with Identity nodes where a pass
    renamed a value the node reads or writes (ops/opaque.py)."""
    before = [helper.make_node("Identity", [v.name], [formal])
              for formal, v in zip(node.attrs["inputs"], node.inputs)
              if formal and v is not None and v.name != formal]
    after = [helper.make_node("Identity", [formal], [v.name])
             for formal, v in zip(node.attrs["outputs"], node.outputs) if v.name != formal]
    return before + list(carried_graph(node).node) + after


def _elementwise_protos(node: Node, fresh, opset: int) -> tuple[list[onnx.NodeProto],
                                                                  list[onnx.TensorProto]]:
    """A FusedElementwise's steps as ONNX nodes, its constants as scalars or (1, C, 1, 1)."""
    program = node.attrs["program"]
    n = runtime_count(program)
    consts = node.inputs[n].data.reshape(-1) if len(node.inputs) > n else np.zeros(0)
    return _program_protos(program, [v.name for v in node.inputs[:n]], consts,
                           node.outputs[0], node.outputs[0].name, node.name, fresh, opset)


GELU_OPSET = 20   # Gelu is an ONNX op from opset 20; below it, the erf form PyTorch exports


def _gelu_protos(x: str, out: str, dtype, fresh, attrs: dict) -> tuple[list[onnx.NodeProto],
                                                                      list[onnx.TensorProto]]:
    """GELU of `x` into `out` in ops every opset has: 0.5 · x · (1 + erf(x / √2)), or with
    `approximate` "tanh" its tanh form."""
    def const(v: float) -> str:
        inits.append(numpy_helper.from_array(np.array(v, dtype=dtype), fresh("gelu.c")))
        return inits[-1].name

    inits: list[onnx.TensorProto] = []
    t = [fresh("gelu") for _ in range(6)]
    if attrs.get("approximate", "none") == "tanh":
        inner = [helper.make_node("Mul", [x, x], [t[0]]),
                 helper.make_node("Mul", [t[0], x], [t[1]]),
                 helper.make_node("Mul", [t[1], const(0.044715)], [t[2]]),
                 helper.make_node("Add", [x, t[2]], [t[3]]),
                 helper.make_node("Mul", [t[3], const(float(np.sqrt(2 / np.pi)))], [t[4]]),
                 helper.make_node("Tanh", [t[4]], [t[5]])]
    else:
        inner = [helper.make_node("Div", [x, const(float(np.sqrt(2)))], [t[4]]),
                 helper.make_node("Erf", [t[4]], [t[5]])]
    s, h = fresh("gelu"), fresh("gelu")
    return inner + [helper.make_node("Add", [t[5], const(1.0)], [s]),
                    helper.make_node("Mul", [x, s], [h]),
                    helper.make_node("Mul", [h, const(0.5)], [out])], inits


RMS_OPSET = 23   # RMSNormalization is an ONNX op from opset 23; below it, the ops T5 exports


def _rmsnorm_protos(node: Node, fresh, opset: int) -> tuple[list[onnx.NodeProto],
                                                             list[onnx.TensorProto]]:
    """RMSNormalization in ops every opset has: x · (1 / sqrt(mean(x²) + ε)) · scale, the mean
    over the axes from `axis` on (an attribute before opset 18, an input from it)."""
    x, scale = node.inputs[0], node.inputs[1]
    rank = len(x.shape)
    axes = list(range(node.attrs.get("axis", -1) % rank, rank))
    t = [fresh(f"{node.name}.rms") for _ in range(5)]
    inits = [numpy_helper.from_array(np.array(node.attrs.get("epsilon", 1e-5), x.dtype),
                                     fresh("rms.eps"))]
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), fresh("rms.axes")))
        mean = helper.make_node("ReduceMean", [t[0], inits[-1].name], [t[1]], keepdims=1)
    else:
        mean = helper.make_node("ReduceMean", [t[0]], [t[1]], axes=axes, keepdims=1)
    return [helper.make_node("Mul", [x.name, x.name], [t[0]]), mean,
            helper.make_node("Add", [t[1], inits[0].name], [t[2]]),
            helper.make_node("Sqrt", [t[2]], [t[3]]),
            helper.make_node("Div", [x.name, t[3]], [t[4]]),
            helper.make_node("Mul", [t[4], scale.name], [node.outputs[0].name])], inits


def _program_protos(program: list[dict], inputs: list[str], consts: np.ndarray, y: Value,
                    out: str, name: str, fresh, opset: int) -> tuple[list[onnx.NodeProto],
                                                                     list[onnx.TensorProto]]:
    """ONNX nodes computing an element-wise program (ops/fused.py) of `inputs` into `out`;
    constants become initializers shaped to broadcast over `y` (scalars, or per channel)."""
    inits: list[onnx.TensorProto] = []

    shape = channel_shape(tuple(y.shape))
    channels = max(shape)
    # constants are float32 where the program's result is 8-bit (its QuantizeLinear's)
    float_type = np.float32 if y.dtype.kind in "iu" else y.dtype

    def initializer(data, dtype=None) -> str:
        inits.append(numpy_helper.from_array(np.asarray(data, dtype=dtype or float_type),
                                             fresh(name + ".c")))
        return inits[-1].name

    def constant(kind: str, i: int, per_channel: bool = False) -> str:
        """A program constant shaped to broadcast over `y`: a scalar or per channel
        (ops/fused.channel_shape: (1, C, 1, 1) for 4-d, (C,) along the last axis else); with
        `per_channel`, (C,) either way (as BatchNormalization takes them)."""
        data = consts[i:i + (1 if kind == "const" else channels)]
        if per_channel:
            return initializer(np.broadcast_to(data, (channels,)))
        return initializer(data.reshape(() if kind == "const" else shape))

    outs: list[str] = []
    protos = []
    affine = _affine_pairs(program)
    for k, step in enumerate(program):
        if k in affine:          # the Mul of a per-channel x · a + b: written at its Add
            outs.append("")
            continue
        if k - 1 in affine:
            x, a, b = affine[k - 1]
            kind, i = x
            args = [inputs[i] if kind == "in" else outs[i], constant(*a, per_channel=True),
                    constant(*b, per_channel=True), initializer(np.zeros(channels)),
                    initializer(np.ones(channels))]
            outs.append(out if k == len(program) - 1 else fresh(name))
            protos.append(helper.make_node("BatchNormalization", args, [outs[-1]],
                                           name=fresh(name), epsilon=0.0))
            continue
        args = []
        for a in step["args"]:
            if a is None:
                args.append("")
            else:
                kind, i = a
                args.append(inputs[i] if kind == "in" else outs[i]
                            if kind == "step" else constant(kind, i))
        attrs = step.get("attrs", {})
        if step["op"] in QDQ_STEPS:     # the zero point in its 8-bit type; no attributes
            args[2] = initializer(consts[step["args"][2][1]], np.dtype(attrs["dtype"]))
            attrs = {}
        outs.append(out if k == len(program) - 1 else fresh(name))
        protos.append(helper.make_node(step["op"], args, [outs[-1]], name=fresh(name),
                                       **_attrs(step["op"], attrs, opset)))
    return protos, inits


def _affine_pairs(program: list[dict]) -> dict[int, tuple[list, list, list]]:
    """Mul steps k of a program whose only reader is step k + 1, an Add, with a constant on
    each (a scalar or one value per channel): k → (x, a, b) for y = x · a + b, which the export
    writes as one BatchNormalization (mean 0, variance 1, epsilon 0: exactly x · a + b).
    fuse_elementwise turns every BatchNormalization that folded into no conv into such a Mul
    and Add; as two ONNX ops ONNX Runtime reads and writes the activation twice: DenseNet-121's
    62 pre-activation normalisations as Mul + Add ran 53.6 ms a run against the original
    model's 48.1 (Zen 3, 2 threads)."""
    readers: dict[int, int] = {}
    for step in program:
        for a in step["args"]:
            if a is not None and a[0] == "step":
                readers[a[1]] = readers.get(a[1], 0) + 1
    const = ("const", "channel")
    out = {}
    for k, (mul, add) in enumerate(zip(program, program[1:])):
        if mul["op"] != "Mul" or add["op"] != "Add" or readers.get(k) != 1:
            continue
        m_args = [None if a is None else tuple(a) for a in mul["args"]]
        a_args = [None if a is None else tuple(a) for a in add["args"]]
        if len(m_args) != 2 or len(a_args) != 2 or None in m_args + a_args or \
                ("step", k) not in a_args:
            continue
        x, a = m_args if m_args[1][0] in const else m_args[::-1]
        b = a_args[1] if a_args[0] == ("step", k) else a_args[0]
        if x[0] not in const and a[0] in const and b[0] in const:
            out[k] = (x, a, b)
    return out


def value_info(v: Value, declared: list | None = None) -> onnx.ValueInfoProto:
    """`v`'s type; `declared`: the dims its model file declares (None open), which a
    whole-model Opaque node's session keeps (frontend/whole.py)."""
    dims = declared if declared is not None else [None if d < 0 else d for d in v.shape]
    return helper.make_tensor_value_info(v.name, onnx_elem_type(v.dtype), dims)


def nodes_model(nodes: Iterable[Node], inputs: list[Value], outputs: list[Value],
                opset: int) -> onnx.ModelProto:
    """A model computing `outputs` from `inputs` with `nodes`; constants become initializers."""
    nodes = list(nodes)
    counter = iter(range(1 << 30))
    fresh = lambda hint: f"{hint}__x{next(counter)}"  # noqa: E731
    protos: list[onnx.NodeProto] = []
    inits: dict[str, onnx.TensorProto] = {}
    for n in nodes:
        ps, extra = node_protos(n, fresh, opset)
        protos += ps
        for t in extra:
            inits[t.name] = t
        for v in n.inputs:
            if v is not None and v.data is not None and v.name not in inits:
                inits[v.name] = numpy_helper.from_array(np.asarray(v.data), v.name)
    declared = nodes[0].attrs.get("declared", {}) if len(nodes) == 1 else {}
    graph = helper.make_graph(protos, "woodpecker_group",
                              [value_info(v, declared.get(v.name)) for v in inputs],
                              [value_info(v, declared.get(v.name)) for v in outputs],
                              list(inits.values()))
    domains = {"": opset}
    for n in nodes:
        if n.op == OPAQUE:     # the domains its carried nodes use (com.microsoft, …)
            domains.update({d: v for d, v in opsets(n.attrs).items() if d not in ("", "ai.onnx")})
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in domains.items()],
                              producer_name="woodpecker")
    model.ir_version = min(model.ir_version, 10)
    return model
