"""Fold inference BatchNormalization into the preceding Conv or Gemm (WPK §2.1).

Identity: BN(W*x + b) = (s·W)*x + (s·(b − μ) + β), with s = γ / sqrt(σ² + ε) per output
channel; for Gemm the channel is the output column.
"""

from __future__ import annotations

import numpy as np

from woodpecker.ir.graph import Graph, Node
from woodpecker.ir.pattern import const_inputs, producer, sole_reader


def _bn_scale(bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    if not const_inputs(bn, 1, 2, 3, 4):
        return None
    gamma, beta, mean, var = (p.data.astype(np.float64) for p in bn.inputs[1:5])
    s = gamma / np.sqrt(var + bn.attr("epsilon", 1e-5))
    return s, beta - mean * s


def fold_batchnorm(graph: Graph) -> int:
    folded = 0
    for bn in list(graph.nodes):
        if bn.op != "BatchNormalization" or len(bn.outputs) != 1:
            continue
        x = bn.inputs[0]
        prod = producer(x, "Conv", "Gemm")
        if prod is None or sole_reader(graph, x) is None or not graph.can_bypass(x, bn.outputs[0]):
            continue
        w, bias = prod.inputs[1], prod.input(2)
        if not const_inputs(prod, 1, 2):
            continue
        if prod.op == "Gemm" and prod.attr("transA", 0):
            continue
        sb = _bn_scale(bn)
        if sb is None:
            continue
        s, shift = sb
        n_out = s.shape[0]
        b0 = np.zeros(n_out) if bias is None else bias.data.astype(np.float64)
        if b0.size not in (1, n_out):
            continue  # a full (M, N) Gemm bias has no per-column form
        b0 = np.broadcast_to(b0.reshape(-1), (n_out,))
        if prod.op == "Conv":
            new_w = w.data * s.reshape((-1,) + (1,) * (w.data.ndim - 1))
        else:
            col = s[:, None] if prod.attr("transB", 0) else s[None, :]
            new_w = w.data * col * prod.attr("alpha", 1.0)
            b0 = b0 * prod.attr("beta", 1.0)
            prod.attrs["alpha"], prod.attrs["beta"] = 1.0, 1.0
        new_b = b0 * s + shift
        dtype = w.dtype
        graph.set_input(prod, 1, graph.const(new_w.astype(dtype), w.name + "_bnfold"))
        b_val = graph.const(np.asarray(new_b, dtype=dtype).reshape(-1), w.name + "_bnbias")
        if len(prod.inputs) < 3:
            prod.inputs.append(None)
        graph.set_input(prod, 2, b_val)
        graph.bypass(bn, x, bn.outputs[0])
        folded += 1
    return folded
