"""ConvInteger: an integer convolution without requantisation (ONNX's op, opset 10+), as ONNX
Runtime's dynamic quantizer writes a Conv: DynamicQuantizeLinear → ConvInteger → Cast → Mul by
the scales (→ Add bias).

Contract: `ConvInteger(x, w, x_zero_point, w_zero_point)` with Conv's attributes computes

    y[n, m, p] = Σ (x − x_zp)·(w[m] − w_zp[m])          (exact, int32)

x uint8 or int8 with a zero point per tensor, w uint8 or int8 with one per tensor or per
output channel (each zero point of its operand's type; absent: 0). The reference sums in
float64, exact below 2^53, so it equals any integer accumulation that does not overflow int32.

Bad input is one ModelError line naming the node: operands of other types, a zero point of
another type than its operand (mixed int8/uint8) or of another length.
"""

from __future__ import annotations

import numpy as np

from woodpecker.errors import ModelError
from woodpecker.ir.graph import Node
from woodpecker.ops import window
from woodpecker.ops.conv import conv, conv_flops
from woodpecker.ops.quant import QUANT_TYPES
from woodpecker.ops.quant_conv import grouped_shapes
from woodpecker.ops.registry import DataOf, dtype_of, numel, op, shape_of, where

X, W, XZ, WZ = range(4)


def _infer(node: Node, data_of: DataOf):
    x, w = grouped_shapes(node, X, W)
    for qi, zi, what, n in ((X, XZ, "input", 1), (W, WZ, "weight", w[0])):
        if dtype_of(node, qi) not in QUANT_TYPES:
            raise ModelError(f"{where(node)}: its {what} is {dtype_of(node, qi)} (int8 or uint8)")
        if node.input(zi) is None:
            continue
        if dtype_of(node, zi) != dtype_of(node, qi):
            raise ModelError(f"{where(node)}: its {what} zero point is {dtype_of(node, zi)}, "
                             f"the {what} {dtype_of(node, qi)} (mixed int8/uint8)")
        s = shape_of(node, zi)
        if numel(s) not in (1, n) or len(s) > 1:
            raise ModelError(f"{where(node)}: its {what} zero point has shape {s}")
    kernel = tuple(node.attr("kernel_shape") or w[2:])
    if kernel != tuple(w[2:]):
        raise ModelError(f"{where(node)}: kernel_shape {list(kernel)} disagrees with the "
                         f"weight's {list(w[2:])}")
    out = window.resolve(node, x[2:], kernel)
    return [((x[0], w[0]) + out, np.dtype(np.int32))]


@op("ConvInteger", _infer, conv_flops)
def conv_integer(attrs, x, w, x_zero_point=None, w_zero_point=None):
    m = w.shape[0]
    xz = 0.0 if x_zero_point is None else float(np.ravel(x_zero_point)[0])
    wz = np.zeros(m) if w_zero_point is None else \
        np.broadcast_to(np.ravel(w_zero_point).astype(np.float64), (m,))
    wi = w.astype(np.float64) - wz.reshape((m,) + (1,) * (w.ndim - 1))
    # integer sums below 2^53 are exact in float64; the result is what int32 accumulates
    return np.rint(conv(attrs, x.astype(np.float64) - xz, wi)).astype(np.int64).astype(np.int32)
