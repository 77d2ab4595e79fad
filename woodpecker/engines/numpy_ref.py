"""The numpy engine: runs each op's reference. Always available, every op and dtype."""

from __future__ import annotations

import numpy as np

from woodpecker.config import SHORT_AXIS
from woodpecker.engines import names
from woodpecker.engines.base import NUMERIC, BuildContext, Capabilities, Engine, Kernel, full_inputs
from woodpecker.engines.choice import KernelSpec
from woodpecker.ir.graph import Node
from woodpecker.ops import OPS, run_reference
from woodpecker.ops.fused import (
    built_steps,
    channel_shape,
    reference_step,
    run_program,
    runtime_count,
)
from woodpecker.ops.opaque import OP as OPAQUE
from woodpecker.ops.shape import slice_index


class NumpyEngine(Engine):
    name = names.NUMPY
    ops = frozenset(OPS) - {OPAQUE}   # an opaque node runs on the libraries only
    dtypes = NUMERIC
    caps = Capabilities(views=True)
    rank = (0, 2)   # views for data movement; the last resort for compute

    def build(self, node: Node, ctx: BuildContext, kernel: KernelSpec | None = None) -> Kernel:
        merge = full_inputs(node)

        def run(*args):
            return run_reference(node, merge(args))

        return Kernel(run, _into(node, merge))


def _into(node: Node, merge):
    """Where the op can write straight into the arena (a new result would be page-faulted in,
    then copied), its `into`; else None."""
    if node.op == "Transpose":
        return _transpose(node)
    if node.op == "Concat":
        axis = node.attrs["axis"]
        return lambda outs, *xs: np.concatenate(merge(xs), axis, outs[0])
    if node.op == "Slice":
        index = slice_index(node.attrs["_slices"])   # ShuffleNet: 26 per run
        return lambda outs, x, *bounds: np.copyto(outs[0], x[index])
    if node.op == "FusedElementwise" and _float32_program(node):
        return _program_into(node)
    if node.op == "Gather" and (index := _scalar_index(node)) is not None:
        # One constant index (an attention's q/k/v split: 6 per transformer layer pair):
        # copy the selected view once, not np.take's new array and then that array.
        at = (slice(None),) * node.attrs["axis"] + (index,)
        return lambda outs, x: np.copyto(outs[0], x[at])
    return None


# Float32 element-wise steps as bare ufuncs: the op references (ops/) handle every dtype, with
# a cast and an error-state context per call, 10-20 µs of Python around a 3 µs map of 16 K floats.
_UFUNCS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
           "Relu": lambda x: np.maximum(x, np.float32(0))}


def _float32_program(node: Node) -> bool:
    """A FusedElementwise on float32 whose constants, if any, are bound."""
    n = runtime_count(node.attrs["program"])
    return node.outputs[0].dtype == np.float32 and all(v.data is not None
                                                        for v in node.inputs[n:])


def _program_into(node: Node):
    """`into` of a float32 FusedElementwise: its steps built once, Add/Sub/Mul/Relu as bare
    ufuncs (the rest through their reference), the result copied into the output."""
    program = node.attrs["program"]
    n = runtime_count(program)
    consts = np.ascontiguousarray(node.inputs[n].data, np.float32).reshape(-1) \
        if len(node.inputs) > n else np.zeros(0, np.float32)
    channels = channel_shape(tuple(node.inputs[0].shape))
    steps = built_steps(program, lambda step: _UFUNCS.get(step["op"]) or reference_step(step))

    def into(outs, *xs):
        np.copyto(outs[0], run_program(program, list(xs), consts, channels, steps))

    return into


def _scalar_index(node: Node) -> int | None:
    """A Gather's index when it is one constant and its data the only run-time input."""
    data, idx = node.inputs[0], node.inputs[1]
    if data.data is not None or idx.data is None or np.ndim(idx.data) != 0:
        return None
    return int(idx.data)


def _transpose(node: Node):
    """`into` of a Transpose: a swap of two blocks of axes on dense float32 arrays (layout
    conversions, channel shuffles between Halide kernels) runs natively where the Halide runtime
    is there (engines/halide/movement.py), anything else through `transpose_into`."""
    perm, source = node.attrs["perm"], node.inputs[0]
    swap = None
    if source.shape is not None and source.dtype is not None:
        from woodpecker.engines.halide.movement import swapper

        swap = swapper(perm, tuple(source.shape), source.dtype.name)

    def into(outs, x):
        if swap is None or not swap(outs[0], x):
            transpose_into(outs[0], x, perm)

    return into


def transpose_into(out: np.ndarray, x: np.ndarray, perm) -> None:
    """Write `x.transpose(perm)` into `out`. numpy copies a transposed view one element per
    inner step; when the output's innermost axis is short (the NCHW → NHWC conversion of a
    3-channel image) each step writes a few floats far apart. Copying one index of that axis
    at a time reads whole contiguous planes instead: 0.066 vs 0.24 ms for 1×3×224×224."""
    t = x.transpose(perm)
    if out.ndim >= 2 and out.shape[-1] <= SHORT_AXIS:
        for i in range(out.shape[-1]):
            np.copyto(out[..., i], t[..., i])
    else:
        np.copyto(out, t)
