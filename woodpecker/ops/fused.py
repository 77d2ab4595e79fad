"""Fused ops made by the fusion passes: FusedConv, FusedGemm, FusedMatMul (epilogues),
FusedElementwise (element-wise groups).

A fused node holds the base op's inputs (fixed slots, None where omitted), then one extra input
per `Add` step of its epilogue. `attrs["epilogue"]` is a list of steps applied in order to the
base result, e.g. `[{"op": "Add"}, {"op": "Relu"}]` for ResNet's conv+bn+add+relu (the
BatchNorm having been folded into the weights first); `{"op": "Mul", "scale": s}` multiplies
by a constant scalar (attention's 1/sqrt(d) scaling, passes/expose_epilogues.py). A FusedConv
may also hold a `prologue`: an element-wise program without constants applied to its input
first (DARTS' and RandWire's ReLU before each conv; passes/fuse_prologue.py). The program's
("in", 0) is the input; ("in", j) for j ≥ 1 are per-channel run-time vectors, shaped (N, C, 1,
1), read as the node's last inputs after the epilogue's operands (squeeze-and-excitation's
channel scale, applied by the 1×1 conv that reads the scaled activation). Engines run the whole
node in one call.
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Node
from woodpecker.ops.registry import OPS, DataOf, op, output_numel

BASE_INPUTS = {"FusedConv": ("Conv", 3), "FusedGemm": ("Gemm", 3), "FusedMatMul": ("MatMul", 2),
               "FusedDynamicQuantizeMatMul": ("DynamicQuantizeMatMul", 5)}
ACTIVATIONS = ("Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Gelu")


def apply_epilogue(y: np.ndarray, epilogue: list[dict], operands: list[np.ndarray]) -> np.ndarray:
    """The numpy meaning of an epilogue: Add steps consume `operands` in order."""
    operands = list(operands)
    for step in epilogue:
        kind = step["op"]
        if kind == "Add":
            y = y + operands.pop(0)
        elif kind == "Mul":
            y = y * np.float32(step["scale"])
        elif kind == "Clip":
            lo, hi = step.get("min"), step.get("max")
            y = np.clip(y, -np.inf if lo is None else lo, np.inf if hi is None else hi)
        elif kind == "Silu":
            y = y * OPS["Sigmoid"].reference({}, y)
        else:
            y = OPS[kind].reference(step, y)
    return y


def prologue_vectors(attrs: dict) -> int:
    """How many per-channel run-time vectors a fused node's prologue reads (its last inputs)."""
    return runtime_count(attrs["prologue"]) - 1 if attrs.get("prologue") else 0


def split_operands(attrs: dict, operands: list) -> tuple[list, list]:
    """A fused node's inputs after the base op's: (the epilogue's Add operands, the prologue's
    per-channel vectors)."""
    m = prologue_vectors(attrs)
    cut = len(operands) - m
    return list(operands[:cut]), list(operands[cut:])


def _register(fused: str, base: str, n_base: int) -> None:
    def infer(node: Node, data_of: DataOf):
        return OPS[base].infer(node, data_of)

    def flops(node: Node) -> int:
        x = node.inputs[0]
        return OPS[base].flops(node) + output_numel(node) * len(node.attrs["epilogue"]) \
            + int(np.prod(x.shape)) * len(node.attrs.get("prologue", []))

    def reference(attrs, *inputs):
        residuals, vectors = split_operands(attrs, inputs[n_base:])
        if attrs.get("prologue"):
            x = inputs[0]
            x = run_program(attrs["prologue"], [x, *vectors], np.zeros(0, x.dtype),
                            (1, x.shape[1]) + (1,) * (x.ndim - 2))
            inputs = (x.astype(inputs[0].dtype), *inputs[1:])
        y = OPS[base].reference(attrs, *inputs[:n_base])
        return apply_epilogue(y, attrs["epilogue"], residuals).astype(y.dtype)

    op(fused, infer, flops)(reference)


for _fused, (_base, _n) in BASE_INPUTS.items():
    _register(_fused, _base, _n)


# -- FusedElementwise: a group of element-wise nodes (passes/fuse_elementwise.py) ---------------
# The ops a group may hold. Its node reads the group's run-time inputs (all of the output's
# shape), then, when any step takes a constant, one float vector of the group's constants.
# `attrs["program"]` lists the steps in order; each is {"op", "args", "attrs"} whose args
# refer to ["in", i] (run-time input i), ["const", j] (entry j of the vector, a scalar),
# ["channel", j] (entries j to j + C of the vector, one per channel), ["step", k] (an earlier
# step's result) or None (an omitted optional input, e.g. Clip's max). The last step's result
# is the node's output. (BatchNormalization joins a group as a Mul and an Add by channel.)
ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Clip", "HardSigmoid",
               "HardSwish", "LeakyRelu")


def runtime_count(program: list[dict]) -> int:
    """How many run-time inputs a program reads (its node's leading inputs)."""
    return 1 + max((a[1] for s in program for a in s["args"] if a is not None and a[0] == "in"),
                   default=-1)


# Per-tensor QuantizeLinear / DequantizeLinear steps (passes/fuse_elementwise.py): their
# scale and zero point are program constants (float32 like every constant) and the step's
# `dtype` attribute names the 8-bit type (Q's output, DQ's input).
QDQ_STEPS = ("QuantizeLinear", "DequantizeLinear")


def reference_step(step: dict):
    """A program step computed by its op's numpy reference (a Q/DQ step's zero point back in
    its 8-bit type; a QuantizeLinear marked `reciprocal` quantizes x · float32(1 / scale))."""
    attrs = step.get("attrs", {})
    ref = OPS[step["op"]].reference
    if step["op"] in QDQ_STEPS:
        dtype = np.dtype(attrs["dtype"])
        if attrs.get("reciprocal"):
            return lambda x, scale, zp: ref({}, x * (np.float32(1) / np.float32(scale)),
                                            np.float32(1), np.asarray(zp).astype(dtype))
        return lambda x, scale, zp: ref({}, x, np.float32(scale), np.asarray(zp).astype(dtype))
    return lambda *args: ref(attrs, *args)


def with_reciprocals(program: list[dict], in_dtypes: list[np.dtype],
                     consts: np.ndarray) -> list[dict]:
    """`program` with each QuantizeLinear step marked `reciprocal` — computing x · float32(1 /
    scale) in place of x / scale — where that leaves the program's output the same at every
    combination of its inputs' values: checked exhaustively, so exact. Only for programs of
    at most two run-time inputs, all 8-bit, and no per-channel constants (a domain of at most
    65536 points); others are returned as they are.

    Why: a 16-lane division costs an x86 vector unit about ten cycles, a product half of
    one; in an int8 conv's fused residual program (a quantized ResNet's DequantizeLinear →
    Add → QuantizeLinear) the division was a quarter to a third of the program's time (the
    product: 0.88-0.95 of the conv's time, benchmarks/int8_schedules.py). Near a tie the
    product can round the other way (about one value in 65536 does); then the step stays a
    division. Of ResNet-50's 16 residual programs (`woodpecker quantize`d), 14 are marked."""
    n = runtime_count(program)
    if n > 2 or any(np.dtype(d).kind not in "iu" or np.dtype(d).itemsize != 1
                    for d in in_dtypes[:n]) or len(in_dtypes) < n or \
            any(a is not None and a[0] == "channel" for s in program for a in s["args"]) or \
            not any(s["op"] == "QuantizeLinear" for s in program):
        return program
    axes = [np.arange(np.iinfo(d).min, np.iinfo(d).max + 1).astype(d) for d in in_dtypes[:n]]
    grid = [a.reshape(-1) for a in np.meshgrid(*axes, indexing="ij")]
    consts = np.asarray(consts, np.float32)
    want = run_program(program, grid, consts, (1,))
    marked = list(program)
    for i, step in enumerate(program):
        if step["op"] != "QuantizeLinear":
            continue
        trial = marked[:i] + [{**step, "attrs": {**step["attrs"], "reciprocal": True}}] + \
            marked[i + 1:]
        if np.array_equal(run_program(trial, grid, consts, (1,)), want):
            marked = trial
    return marked


def program_dtype(program: list[dict], first_input: np.dtype) -> np.dtype:
    """The type a program's result has: a last QuantizeLinear's 8-bit type; float32 where a
    DequantizeLinear reads 8-bit inputs; else the inputs' own."""
    last = program[-1]
    if last["op"] == "QuantizeLinear":
        return np.dtype(last["attrs"]["dtype"])
    if any(s["op"] in QDQ_STEPS for s in program):
        return np.dtype(np.float32)
    return np.dtype(first_input)


def built_steps(program: list[dict], make):
    """A `run_program` step function returning `make(step)` built once per step of `program`,
    not on every call (an engine's kernel runs the same program each time)."""
    fns = {id(step): make(step) for step in program}
    return lambda step: fns[id(step)]


def run_program(program: list[dict], inputs: list, consts, channel_shape: tuple[int, ...],
                step_fn=reference_step):
    """A FusedElementwise program on `inputs` and the constant vector `consts`, whose
    per-channel runs are reshaped to `channel_shape` (e.g. (1, C, 1, 1) for NCHW arrays,
    (C,) for NHWC): each step computed by `step_fn(step)(*args)` (by default the op's numpy
    reference; an engine passes its own)."""
    results: list = []
    size = int(np.prod(channel_shape))

    def arg(ref):
        if ref is None:
            return None
        kind, i = ref
        if kind == "channel":
            return consts[i:i + size].reshape(channel_shape)
        return inputs[i] if kind == "in" else consts[i] if kind == "const" else results[i]

    for step in program:
        results.append(step_fn(step)(*[arg(a) for a in step["args"]]))
    return results[-1]


def _elementwise_infer(node: Node, data_of: DataOf):
    x = node.inputs[0]
    return [(tuple(x.shape), program_dtype(node.attrs["program"], x.dtype))]


def _elementwise_flops(node: Node) -> int:
    return output_numel(node) * len(node.attrs["program"])


@op("FusedElementwise", _elementwise_infer, _elementwise_flops)
def _fused_elementwise(attrs, *inputs):
    n = runtime_count(attrs["program"])
    program = attrs["program"]
    out = program_dtype(program, inputs[0].dtype)
    constant_type = np.float32 if out.kind in "iu" or inputs[0].dtype.kind in "iu" \
        else inputs[0].dtype
    consts = inputs[n].astype(constant_type) if len(inputs) > n else np.zeros(0)
    return np.asarray(run_program(program, list(inputs[:n]), consts,
                                  channel_shape(inputs[0].shape)), dtype=out)


def channel_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """How a FusedElementwise's per-channel constants broadcast over its tensors: along axis 1
    of a 4-d one (NCHW channels, passes/fuse_elementwise.FOUR_D), along the last axis of any
    other rank (`ROWS`)."""
    return (1, shape[1], 1, 1) if len(shape) == 4 else (shape[-1],)


def channelwise_elementwise(node: Node) -> bool:
    """A FusedElementwise of one run-time input and no per-channel constants: it commutes
    with a channel Concat."""
    if node.op != "FusedElementwise":
        return False
    program = node.attrs["program"]
    return runtime_count(program) == 1 and not any(
        a is not None and a[0] == "channel" for s in program for a in s["args"])
