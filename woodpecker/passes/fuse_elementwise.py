"""Element-wise fusion: a connected group of element-wise nodes becomes one FusedElementwise
node that an engine runs in one call (WPK §2.1 operator fusion, for what no conv or product
absorbs as an epilogue).

Why: RandWire's nodes sum their inputs weighted by constants, then apply ReLU (Mul, Mul, Add,
ReLU before each separable conv) and DARTS applies ReLU before each op; whatever runs these
between two generated kernels pays per node, and they were 60 % of RandWire's all-Halide plan.
As one node they are one Halide kernel (engines/halide/elementwise.py) or, on a library, the
same ops expanded back (frontend/onnx_export.py).

Choices: a group is grown from a root towards its producers; a producer joins when the group
holds every reader of its value and the value is not a graph output, so nothing inside is
needed outside. Only 4-d float32 nodes whose run-time inputs all have the output's shape (no
broadcasting) and whose constants are scalars or one value per channel join: the kernel is
then one loop over the output, and the generated kernel takes the channels-innermost layout of
the convolutions around it. An inference BatchNormalization that folded into no conv (DARTS
normalises its pooling branches) joins as x · a + b per channel, a = scale / sqrt(var + ε),
b = bias − mean · a. A single eligible node becomes a group of one. Per-tensor QuantizeLinear
and DequantizeLinear join as steps too (issue 53: a quantized model's Q/DQ pairs around its
additions folded, never run as passes of their own): the group's inputs and output may then be
8-bit. Groups over tensors of another rank (a statically quantized transformer's (batch,
tokens, features)) are made by a later pass, `fuse_row_elementwise` (rule `ROWS`): the same
growth, constants per last axis, computed in the tensors' own layout (tasks/elementwise.py),
and only where a Q/DQ step joins (GPU plans group the float ones too, `fuse_float_rows`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ops.fused import ELEMENTWISE, QDQ_STEPS, with_reciprocals


def eligible(node: Node) -> bool:
    """An element-wise node over one 4-d float32 shape, its constants scalars or per channel
    (a BatchNormalization: its four parameters constant); or a per-tensor QuantizeLinear /
    DequantizeLinear between float32 and 8 bits (`_qdq_eligible`)."""
    return _eligible(node, FOUR_D)


def _eligible(node: Node, rule: "GroupRule") -> bool:
    if node.op in QDQ_STEPS:
        return _qdq_eligible(node, rule)
    if node.op not in ELEMENTWISE + ("BatchNormalization",) or len(node.outputs) != 1:
        return False
    y = node.outputs[0]
    if y.dtype != np.float32 or y.shape is None or not rule.rank(len(y.shape)):
        return False
    if node.op == "BatchNormalization":
        return rule is FOUR_D and all(v is not None and v.is_const for v in node.inputs[1:5])
    for v in node.inputs:
        if v is None:
            continue
        if v.is_const:
            if v.data.size != 1 and rule.per_channel(v, y.shape) is None and not (
                    rule.whole_constants and _whole(v, y)):
                return False
        elif tuple(v.shape) != tuple(y.shape) or v.dtype != y.dtype:
            return False
    return True


def _whole(v: Value, y: Value) -> bool:
    """A float32 constant of `y`'s whole shape."""
    return v.data.dtype == np.float32 and tuple(v.data.shape) == tuple(y.shape)


def _qdq_eligible(node: Node, rule: "GroupRule") -> bool:
    """A QuantizeLinear (float32 → int8/uint8) or DequantizeLinear (int8/uint8 → float32) of
    the rule's rank with a constant scalar scale and zero point: one more step of the group,
    so a quantized model's DequantizeLinear → Add → Relu → QuantizeLinear is one pass over
    8-bit tensors."""
    x, y = node.inputs[0], node.outputs[0]
    params = node.inputs[1:3]
    if len(node.inputs) != 3 or any(v is None or not v.is_const or v.data.size != 1
                                    for v in params):
        return False
    eight = (np.dtype(np.uint8), np.dtype(np.int8))
    a, b = (x.dtype, y.dtype) if node.op == "DequantizeLinear" else (y.dtype, x.dtype)
    return (a in eight and b == np.float32 and params[1].dtype == a and x.shape is not None
            and rule.rank(len(x.shape)) and tuple(x.shape) == tuple(y.shape))


def _per_channel(v: Value, shape: tuple[int, ...]) -> np.ndarray | None:
    """A constant's values, one per channel, when it broadcasts over everything but axis 1."""
    s = (1,) * (4 - len(v.shape)) + tuple(v.shape)
    if len(s) != 4 or s[0] != 1 or s[2:] != (1, 1) or s[1] != shape[1]:
        return None
    return v.data.reshape(-1)


def per_last_axis(v: Value, shape: tuple[int, ...]) -> np.ndarray | None:
    """A constant's values, one per index of the last axis, when it broadcasts over all the
    others (a bias of N values after a (…, N) product)."""
    s = tuple(v.shape)
    if not s or s[-1] != shape[-1] or any(d != 1 for d in s[:-1]) or len(s) > len(shape):
        return None
    return v.data.reshape(-1)


@dataclass(frozen=True)
class GroupRule:
    """Which element-wise groups a pass makes: of which ranks (`rank`), constants along which
    axis (`per_channel`: a constant's values per channel, or None), and which groups are worth
    a node (`keep`); `whole_constants`: a constant of the output's whole shape (a ViT's
    position embedding) joins as an input of the group, not as constants."""

    rank: Callable[[int], bool]
    per_channel: Callable[[Value, tuple[int, ...]], np.ndarray | None]
    keep: Callable[[list[Node]], bool]
    whole_constants: bool = False


# 4-d groups, computed in NHWC like the convolutions around them, constants per axis 1
FOUR_D = GroupRule(lambda r: r == 4, _per_channel, lambda nodes: True)
# groups over tensors of any other rank (a transformer's (batch, tokens, features)), constants
# per last axis, computed in their own layout; only where a Q/DQ step joins (issue 53: no Q/DQ
# pass of its own) — a float model's element-wise nodes there stay as they were
ROWS = GroupRule(lambda r: 0 < r != 4, per_last_axis,
                 lambda nodes: any(n.op in QDQ_STEPS for n in nodes))
# every float group of another rank, Q/DQ or not: GPU plans only (compiler_gpu.GPU_PASSES,
# issue 54), whose element-wise template computes them; the CPU pipelines leave a float
# transformer's residual sums to the library nodes they were measured with
FLOAT_ROWS = GroupRule(ROWS.rank, per_last_axis, lambda nodes: True, whole_constants=True)


def _group(graph: Graph, root: Node, taken: set[int], rule: GroupRule) -> list[Node]:
    """The root and, transitively, every eligible producer whose value only the group reads
    — all its readers in the group, so a value read twice inside joins too (a SiLU's x
    feeds its Sigmoid and its Mul; quantized, its DequantizeLinear then joins the group, which
    reads the 8-bit tensor). A worklist: each member's inputs are looked at when it joins (a
    value refused because a reader was not in yet is looked at again when that reader joins,
    as it reads the value), so a group costs its members' edges, not their square (a chain of
    3,000 Relus took 61 s here)."""
    group, members = [root], {id(root)}
    outputs = {id(v) for v in graph.outputs}
    work = [root]
    while work:
        for v in work.pop().inputs:
            p = None if v is None or v.is_const else v.producer
            if p is None or id(p) in taken or id(p) in members or id(v) in outputs or \
                    any(id(r) not in members for r in v.consumers) or not _eligible(p, rule):
                continue
            group.append(p)
            members.add(id(p))
            work.append(p)
    return group


def element_program(nodes: list[Node], per_channel=None, whole_constants: bool = False,
                    ) -> tuple[list[dict], list[Value], list[float]]:
    """The steps of `nodes` (in graph order), their run-time inputs and the constant vector;
    `per_channel(v, shape)` gives a non-scalar constant's values, one per channel (by default
    along axis 1 of a 4-d tensor; a product's output columns for passes/fuse_qdense_program.py);
    with `whole_constants`, a constant of the output's whole shape is an input like a run-time
    one."""
    per_channel = per_channel or _per_channel
    step_of: dict[int, int] = {}
    inputs: list[Value] = []
    consts: list[float] = []
    program: list[dict] = []

    def constant(values: np.ndarray, kind: str) -> list:
        consts.extend(float(c) for c in values.reshape(-1))
        return [kind, len(consts) - values.size]

    def ref(v: Value | None, shape) -> list | None:
        if v is None:
            return None
        if v.is_const and not (whole_constants and v.data.size > 1
                               and per_channel(v, shape) is None):
            if v.data.size == 1:
                return constant(v.data, "const")
            return constant(per_channel(v, shape), "channel")
        if id(v) in step_of:
            return ["step", step_of[id(v)]]
        if v not in inputs:
            inputs.append(v)
        return ["in", inputs.index(v)]

    for n in nodes:
        shape = n.outputs[0].shape
        if n.op == "BatchNormalization":
            scale, bias, mean, var = (v.data.astype(np.float64) for v in n.inputs[1:5])
            a = scale / np.sqrt(var + n.attrs.get("epsilon", 1e-5))
            program.append({"op": "Mul", "args": [ref(n.inputs[0], shape),
                                                  constant(a, "channel")], "attrs": {}})
            program.append({"op": "Add", "args": [["step", len(program) - 1],
                                                  constant(bias - mean * a, "channel")],
                            "attrs": {}})
        else:
            attrs = {k: a for k, a in n.attrs.items() if not k.startswith("_")}
            if n.op in QDQ_STEPS:      # the 8-bit type: its zero point's
                attrs = {"dtype": n.inputs[2].dtype.name}
            program.append({"op": n.op, "args": [ref(v, shape) for v in n.inputs],
                            "attrs": attrs})
        step_of[id(n.outputs[0])] = len(program) - 1
    return with_reciprocals(program, [v.dtype for v in inputs], consts), inputs, consts


def fuse_elementwise(graph: Graph) -> int:
    return fuse_groups(graph, FOUR_D)


def fuse_row_elementwise(graph: Graph) -> int:
    """The groups of rank other than 4 that hold a Q/DQ step (`ROWS`): a statically quantized
    transformer's DequantizeLinear → Add → QuantizeLinear around its residual sums and GELU.
    Runs after fuse_qdense_programs, which takes the chains right after its products first."""
    return fuse_groups(graph, ROWS)


def fuse_float_rows(graph: Graph) -> int:
    """Every element-wise group of rank other than 4 (`FLOAT_ROWS`): a float transformer's
    residual sums, for GPU plans, after fuse_row_elementwise."""
    return fuse_groups(graph, FLOAT_ROWS)


def fuse_groups(graph: Graph, rule: GroupRule) -> int:
    taken: set[int] = set()
    groups = []
    for root in reversed(list(graph.nodes)):
        if id(root) in taken or not _eligible(root, rule):
            continue
        group = _group(graph, root, taken, rule)
        taken.update(id(n) for n in group)
        if rule.keep(group):
            groups.append(group)
    order = {id(n): k for k, n in enumerate(graph.nodes)}   # groups hold original nodes only
    for group in groups:
        nodes = sorted(group, key=lambda n: order[id(n)])
        program, inputs, consts = element_program(nodes, rule.per_channel, rule.whole_constants)
        root = nodes[-1]
        ins = list(inputs)
        if consts:
            ins.append(graph.const(np.array(consts, np.float32), root.name + ".consts"))
        out = root.outputs[0]
        index = graph.nodes.index(root) - (len(nodes) - 1)
        for n in nodes:
            graph.remove_node(n)
        graph.add_node("FusedElementwise", ins, [out], {"program": program}, name=root.name,
                       index=index)
    if groups:
        graph.toposort()
        graph.dce()
    return len(groups)
