"""A quantized model in the QOperator form rewritten into the QDQ form: the same model, in
standard ONNX ops that Woodpecker's import, passes and int8 kernels know.

Contract: `qdq_form(model)` returns a copy of the ModelProto in which each node of an integer
operator listed in `REWRITES` — ONNX's QLinearMatMul and ONNX Runtime's contrib ops
(com.microsoft) QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QLinearSoftmax and QGemm, which
ONNX Runtime's quantizer writes with `QuantFormat.QOperator` — is replaced by its definition:
each quantized input dequantized (DequantizeLinear with the node's scale and zero point), the
float operator, and the result quantized (QuantizeLinear with the output's scale and zero
point; QGemm without an output scale gives float32). None where the model has no such node.
QLinearConv stays (the IR has it: ops/quant_conv.py) unless `conv`: the QDQ form the
libraries are offered (selection/library_first.py; OpenVINO 2026.4's ONNX reader refuses a
per-channel QLinearConv, 'The number of dequantization scale elements '64' must match the
input shape dimension '3'', and runs the same conv in the QDQ form). Other contrib ops stay,
and the import reports them as it does any op it does not know (the libraries then run the
file whole).

Why it is the same model: each contrib op is specified as exactly that composition (ONNX
Runtime's contrib-op documentation); the passes then fold the groups back into integer work
(passes/fold_qdq.py: Q/DQ steps of element-wise groups, the residual epilogue of a conv, an
8-bit max pool), as they do for files written in the QDQ form. Rounding: ONNX Runtime's
kernels for the contrib ops compute the composition with their own float order (MLAS's
QLinearAdd multiplies by ratios of the scales, A_scale / C_scale, with a folded zero point), so
a value on the edge of a quantization step may round to the neighbouring step, as ONNX Runtime
itself does between its x86 and portable code paths. Library-first's output check therefore
takes ONNX Runtime's run of this form without graph optimisations as the model's spread
(selection/library_first.py), as for files written in the QDQ form.

A zero point the node leaves out is 0 of its input's element type (the contrib ops' default);
where that type cannot be told from the graph, one UnsupportedOpError line names the node.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from woodpecker.errors import UnsupportedOpError

MS = "com.microsoft"


def qdq_form(model: onnx.ModelProto, conv: bool = False) -> onnx.ModelProto | None:
    rules = {**REWRITES, ("", "QLinearConv"): _conv} if conv else REWRITES
    if not any((n.domain, n.op_type) in rules for n in model.graph.node):
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    rewriter = _Rewriter(out)
    nodes: list[onnx.NodeProto] = []
    for node in out.graph.node:
        rule = rules.get((node.domain, node.op_type))
        rewritten = [node] if rule is None else rule(rewriter, node)
        nodes.extend(rewriter.pending + rewritten)
        rewriter.pending.clear()
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    if not any(n.domain == MS for n in out.graph.node):
        kept = [o for o in out.opset_import if o.domain != MS]
        del out.opset_import[:]
        out.opset_import.extend(kept)
    out.graph.initializer.extend(rewriter.initializers)
    return out


class _Rewriter:
    """Fresh names, new initializers and element types of the model being rewritten."""

    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.inits = {i.name: i for i in g.initializer}
        self.taken = set(self.inits) | {i.name for i in g.input} | \
            {n for node in g.node for n in node.output} | {n.name for n in g.node}
        self.types = {v.name: v.type.tensor_type.elem_type
                      for v in (*g.input, *g.output, *g.value_info)}
        self.types.update({i.name: i.data_type for i in g.initializer})
        self.shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None
                                for d in v.type.tensor_type.shape.dim]
                       for v in (*g.input, *g.output, *g.value_info)
                       if v.type.tensor_type.HasField("shape")}
        self.shapes.update({i.name: list(i.dims) for i in g.initializer})
        self.pending: list[onnx.NodeProto] = []   # nodes the next rewrite's nodes need first
        self.producer = {o: node for node in g.node for o in node.output}
        self.initializers: list[TensorProto] = []

    def fresh(self, name: str) -> str:
        k, candidate = 0, name
        while candidate in self.taken:
            k += 1
            candidate = f"{name}_{k}"
        self.taken.add(candidate)
        return candidate

    def constant(self, value: np.ndarray, name: str) -> str:
        tensor = numpy_helper.from_array(value, self.fresh(name))
        self.initializers.append(tensor)
        self.inits[tensor.name] = tensor
        self.types[tensor.name] = tensor.data_type
        self.shapes[tensor.name] = list(tensor.dims)
        return tensor.name

    def elem_type(self, name: str, node: onnx.NodeProto, seen: int = 0) -> int:
        """The element type of tensor `name`: declared, an initializer's, or that of the
        quantized tensor the producing node's zero point (or first input) gives."""
        if name in self.types:
            return self.types[name]
        producer = self.producer.get(name)
        if producer is not None and seen < 64:
            zp = _zero_point_of_output(producer)
            if zp is not None:
                return self.elem_type(zp, node, seen + 1) if zp else TensorProto.UINT8
            if producer.op_type in _SAME_TYPE and producer.input:
                return self.elem_type(producer.input[0], node, seen + 1)
        raise UnsupportedOpError(
            f"{node.op_type} node {node.name!r}: the element type of {name!r} cannot be told "
            "from the graph and the node gives no zero point for it")

    def scale(self, name: str) -> str:
        """A scale (or zero point) input as written, or a scalar of a one-element vector (which
        DequantizeLinear would otherwise read as per-axis): a copy of an initializer, a
        Reshape of a run-time one."""
        if self.shapes.get(name) != [1]:
            return name
        init = self.inits.get(name)
        if init is not None:
            return self.constant(numpy_helper.to_array(init).reshape(()), f"{name}_scalar")
        scalar = self.fresh(f"{name}_scalar")
        self.pending.append(helper.make_node(
            "Reshape", [name, self.constant(np.zeros(0, np.int64), f"{name}_scalar_shape")],
            [scalar], name=self.fresh(f"{name}/Reshape")))
        self.shapes[scalar] = []
        return scalar

    def dequantize(self, node: onnx.NodeProto, x: str, scale: str, zp: str,
                   axis: int | None = None) -> tuple[onnx.NodeProto, str]:
        y = self.fresh(f"{x}_dequantized")
        scale = self.scale(scale)
        inputs = [x, scale] + ([self.scale(zp)] if zp else [])
        attrs = {} if axis is None or self._scalar(scale) else {"axis": axis}
        return helper.make_node("DequantizeLinear", inputs, [y],
                                name=self.fresh(f"{node.name or y}/DequantizeLinear"),
                                **attrs), y

    def quantize(self, node: onnx.NodeProto, x: str, scale: str, zp: str, like: str,
                 out: str) -> onnx.NodeProto:
        """QuantizeLinear of `x` into `out`; a zero point left out is 0 of `like`'s type."""
        if not zp:
            dtype = helper.tensor_dtype_to_np_dtype(self.elem_type(like, node))
            zp = self.constant(np.zeros((), dtype), f"{out}_zero_point")
        return helper.make_node("QuantizeLinear", [x, self.scale(scale), self.scale(zp)], [out],
                                name=self.fresh(f"{node.name or out}/QuantizeLinear"))

    def _scalar(self, scale: str) -> bool:
        return self.shapes.get(scale) == []


# ops whose output has their first input's element type (a zero point's type followed back)
_SAME_TYPE = frozenset({"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
                        "Identity", "Slice", "Split", "Concat", "Pad", "Resize", "Gather",
                        "DepthToSpace", "SpaceToDepth", "Tile", "Expand"})


# per quantizing op, the input holding its output's zero point
_OUTPUT_ZERO_POINT = {"QuantizeLinear": 2, "QLinearConv": 7, "QLinearMatMul": 7, "QLinearAdd": 7,
                      "QLinearMul": 7, "QLinearSigmoid": 4, "QLinearLeakyRelu": 4,
                      "QLinearGlobalAveragePool": 4, "QLinearAveragePool": 4,
                      "QLinearConcat": 1, "QLinearSoftmax": 4, "QGemm": 8}


def _zero_point_of_output(node: onnx.NodeProto) -> str | None:
    """The input naming the zero point of `node`'s quantized output ('' where the node leaves
    it out), or None where `node` does not quantize."""
    index = _OUTPUT_ZERO_POINT.get(node.op_type)
    if index is None:
        return None
    return node.input[index] if len(node.input) > index else ""


def _arg(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


def _attrs(node: onnx.NodeProto, drop: tuple[str, ...] = ()) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in drop}


def _float_op(r: _Rewriter, node: onnx.NodeProto, op: str, inputs: list[str],
              attrs: dict | None = None) -> tuple[onnx.NodeProto, str]:
    y = r.fresh(f"{node.output[0]}_float")
    return helper.make_node(op, inputs, [y], name=r.fresh(f"{node.name or y}/{op}"),
                            **(attrs or {})), y


def _binary(op: str) -> Callable[[_Rewriter, onnx.NodeProto], list[onnx.NodeProto]]:
    """QLinearAdd / QLinearMul: A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp."""
    def rule(r: _Rewriter, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        qa, a = r.dequantize(node, node.input[0], node.input[1], _arg(node, 2))
        qb, b = r.dequantize(node, node.input[3], node.input[4], _arg(node, 5))
        f, y = _float_op(r, node, op, [a, b])
        return [qa, qb, f, r.quantize(node, y, node.input[6], _arg(node, 7), node.input[0],
                                      node.output[0])]
    return rule


def _unary(op: str) -> Callable[[_Rewriter, onnx.NodeProto], list[onnx.NodeProto]]:
    """X, X_scale, X_zp, Y_scale, Y_zp around a float op taking the node's attributes; with
    `channels_last` (pools) the float op runs on a transposed copy."""
    def rule(r: _Rewriter, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        attrs = _attrs(node, ("channels_last",))
        last = bool(_attrs(node).get("channels_last", 0))
        qx, x = r.dequantize(node, node.input[0], node.input[1], _arg(node, 2))
        nodes = [qx]
        if last:
            rank = _rank(r, node, node.input[0])
            t, x = _float_op(r, node, "Transpose", [x],
                             {"perm": [0, rank - 1, *range(1, rank - 1)]})
            nodes.append(t)
        f, y = _float_op(r, node, op, [x], attrs)
        nodes.append(f)
        if last:
            t, y = _float_op(r, node, "Transpose", [y], {"perm": [0, *range(2, rank), 1]})
            nodes.append(t)
        return nodes + [r.quantize(node, y, node.input[3], _arg(node, 4), node.input[0],
                                   node.output[0])]
    return rule


def _rank(r: _Rewriter, node: onnx.NodeProto, name: str) -> int:
    kernel = _attrs(node).get("kernel_shape")
    if kernel is not None:
        return len(kernel) + 2
    if name in r.shapes:
        return len(r.shapes[name])
    raise UnsupportedOpError(f"{node.op_type} node {node.name!r} with channels_last: the "
                             "rank of its input cannot be told from the node")


def _softmax(r: _Rewriter, node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """QLinearSoftmax: X, X_scale, X_zp, Y_scale, Y_zp; attributes axis and opset, the
    Softmax version whose meaning it takes. Before opset 13 Softmax normalised over every axis
    from `axis` on; that equals opset 13's over `axis` alone only for the last axis, so
    another axis under an older opset stays as written (the libraries run it)."""
    attrs = _attrs(node)
    axis = int(attrs.get("axis", -1 if int(attrs.get("opset", 13)) >= 13 else 1))
    shape = r.shapes.get(node.input[0])
    if int(attrs.get("opset", 13)) < 13 and axis != -1 and \
            (shape is None or axis != len(shape) - 1):
        return [node]
    qx, x = r.dequantize(node, node.input[0], node.input[1], _arg(node, 2))
    f, y = _float_op(r, node, "Softmax", [x], {"axis": axis})
    return [qx, f, r.quantize(node, y, node.input[3], _arg(node, 4), node.input[0],
                              node.output[0])]


def _concat(r: _Rewriter, node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """QLinearConcat: Y_scale, Y_zp, then (X, X_scale, X_zp) per input; attribute axis."""
    nodes, floats = [], []
    for i in range(2, len(node.input), 3):
        q, x = r.dequantize(node, node.input[i], node.input[i + 1], _arg(node, i + 2))
        nodes.append(q)
        floats.append(x)
    f, y = _float_op(r, node, "Concat", floats, _attrs(node))
    return nodes + [f, r.quantize(node, y, node.input[0], _arg(node, 1), node.input[2],
                                  node.output[0])]


def _matmul(r: _Rewriter, node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """QLinearMatMul: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp; a 1-D scale of b
    (or of a) is per column (per row)."""
    qa, a = r.dequantize(node, node.input[0], node.input[1], node.input[2], axis=-2)
    qb, b = r.dequantize(node, node.input[3], node.input[4], node.input[5], axis=-1)
    f, y = _float_op(r, node, "MatMul", [a, b])
    return [qa, qb, f, r.quantize(node, y, node.input[6], node.input[7], node.input[0],
                                  node.output[0])]


def _conv(r: _Rewriter, node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """QLinearConv: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B (int32 bias of scale
    x_scale · w_scale); Conv's attributes."""
    qx, x = r.dequantize(node, node.input[0], node.input[1], node.input[2])
    qw, w = r.dequantize(node, node.input[3], node.input[4], node.input[5], axis=0)
    nodes, inputs = [qx, qw], [x, w]
    if _arg(node, 8):
        qb, b = _bias(r, node, node.input[1], node.input[4], node.input[8])
        nodes += qb
        inputs.append(b)
    f, y = _float_op(r, node, "Conv", inputs, _attrs(node))
    return nodes + [f, r.quantize(node, y, node.input[6], node.input[7], node.input[0],
                                  node.output[0])]


def _bias(r: _Rewriter, node: onnx.NodeProto, x_scale: str, w_scale: str, bias: str
          ) -> tuple[list[onnx.NodeProto], str]:
    """The int32 bias dequantized with the product of the input's and the weights'
    scales."""
    nodes = []
    sa, sb = r.scale(x_scale), r.scale(w_scale)
    if sa in r.inits and sb in r.inits:
        product = numpy_helper.to_array(r.inits[sa]) * numpy_helper.to_array(r.inits[sb])
        s = r.constant(product.astype(np.float32), f"{bias}_scale")
    else:
        s = r.fresh(f"{bias}_scale")
        nodes.append(helper.make_node("Mul", [sa, sb], [s],
                                      name=r.fresh(f"{node.name or s}/bias_scale")))
    q, b = r.dequantize(node, bias, s, "", axis=0)
    return nodes + [q], b


def _gemm(r: _Rewriter, node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """QGemm: A, a_scale, a_zp, B, b_scale, b_zp, C (int32 bias of scale a_scale · b_scale),
    y_scale, y_zp; attributes alpha, transA, transB. Float32 out without y_scale."""
    attrs = _attrs(node)
    trans_b = int(attrs.get("transB", 0))
    qa, a = r.dequantize(node, node.input[0], node.input[1], _arg(node, 2))
    qb, b = r.dequantize(node, node.input[3], node.input[4], _arg(node, 5),
                         axis=0 if trans_b else 1)
    nodes, inputs = [qa, qb], [a, b]
    if _arg(node, 6):
        qc, c = _bias(r, node, node.input[1], node.input[4], node.input[6])
        nodes += qc
        inputs.append(c)
    gemm = {"alpha": float(attrs.get("alpha", 1.0)), "transA": int(attrs.get("transA", 0)),
            "transB": trans_b}
    if not _arg(node, 7):
        nodes.append(helper.make_node("Gemm", inputs, [node.output[0]],
                                      name=r.fresh(f"{node.name or 'QGemm'}/Gemm"), **gemm))
        return nodes
    f, y = _float_op(r, node, "Gemm", inputs, gemm)
    return nodes + [f, r.quantize(node, y, node.input[7], _arg(node, 8), node.input[0],
                                  node.output[0])]


REWRITES: dict[tuple[str, str], Callable[[_Rewriter, onnx.NodeProto], list[onnx.NodeProto]]] = {
    ("", "QLinearMatMul"): _matmul,
    (MS, "QLinearAdd"): _binary("Add"),
    (MS, "QLinearMul"): _binary("Mul"),
    (MS, "QLinearSigmoid"): _unary("Sigmoid"),
    (MS, "QLinearLeakyRelu"): _unary("LeakyRelu"),
    (MS, "QLinearGlobalAveragePool"): _unary("GlobalAveragePool"),
    (MS, "QLinearAveragePool"): _unary("AveragePool"),
    (MS, "QLinearConcat"): _concat,
    (MS, "QLinearSoftmax"): _softmax,
    (MS, "QGemm"): _gemm,
}
