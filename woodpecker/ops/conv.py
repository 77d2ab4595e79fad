"""Conv (N-d, groups, strides, pads, auto_pad, dilations) and its numpy reference (im2col)."""

from __future__ import annotations

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node
from woodpecker.ops import window
from woodpecker.ops.registry import DataOf, dtype_of, numel, op, shape_of, where


def conv_infer(node: Node, data_of: DataOf):
    x, w = shape_of(node, 0), shape_of(node, 1)
    groups = int(node.attr("group", 1))
    node.attrs["group"] = groups
    if len(x) < 3 or len(w) != len(x) or x[1] != w[1] * groups or w[0] % groups:
        raise ModelError(f"{where(node)}: input {x} and weight {w} do not fit group={groups}")
    kernel = bias_and_kernel(node, w, w[0])
    out = window.resolve(node, x[2:], kernel)
    return [((x[0], w[0]) + out, dtype_of(node, 0))]


def bias_and_kernel(node: Node, w: tuple[int, ...], channels: int) -> tuple[int, ...]:
    """The kernel's spatial shape (weights `w`: (…, …, *kernel)); a ModelError unless the
    bias, where there is one, is a vector of `channels` and `kernel_shape` agrees with `w`
    (Conv, ConvTranspose)."""
    if len(node.inputs) > 2 and node.inputs[2] is not None and \
            shape_of(node, 2) != (channels,):
        raise ModelError(f"{where(node)}: bias must be a vector of {channels} (one per output "
                         f"channel), got shape {shape_of(node, 2)}")
    kernel = tuple(node.attr("kernel_shape") or w[2:])
    if kernel != tuple(w[2:]):
        raise ModelError(f"{where(node)}: kernel_shape {list(kernel)} disagrees with the "
                         f"weight's {list(w[2:])}")
    return kernel


def conv_flops(node: Node) -> int:
    w = node.inputs[1].shape
    return 2 * numel(node.outputs[0].shape) * numel(w[1:])


def conv(attrs, x, w, b=None):
    """Convolution as one matrix product per group over the strided window view."""
    g = attrs.get("group", 1)
    kernel = w.shape[2:]
    n, c = x.shape[:2]
    m = w.shape[0]
    nd = len(kernel)
    out_sp = window.out_shape(x.shape[2:], kernel, attrs)
    cols = window.windows(x, attrs, kernel, out_sp, 0)         # N, C, *O, *K
    cols = cols.reshape((n, g, c // g) + out_sp + kernel)
    perm = (0, 1) + tuple(range(3, 3 + nd)) + (2,) + tuple(range(3 + nd, 3 + 2 * nd))
    cols = cols.transpose(perm).reshape(n, g, numel(out_sp), -1)  # N, G, P, C/G*K
    wm = w.reshape(g, m // g, -1)                                 # G, M/G, C/G*K
    y = np.einsum("ngpk,gmk->ngmp", cols, wm, optimize=True).reshape((n, m) + out_sp)
    if b is not None:
        y = y + b.reshape((1, m) + (1,) * nd)
    return y.astype(x.dtype, copy=False)


op("Conv", conv_infer, conv_flops)(conv)
