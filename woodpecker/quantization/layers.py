"""Where a quantized model loses its accuracy: each layer's own quantization noise, measured.

Contract: `layer_errors(float_model, qdq_model, feeds)` runs both models on the feeds with
every intermediate value exposed and returns one `LayerError` per value a consumer of the
quantized model sees (the DequantizeLinear after a QuantizeLinear of it, or the value itself
where it stays float): the float nodes that made it since the last such value (a conv and the
Relu the quantizer folded into its output's range are one layer), its signal-to-quantization-
noise ratio (SQNR, ONNX Runtime's `compute_signal_to_quantization_noice_ratio`: the float
value's norm over the difference's, in dB), the worst SQNR of its inputs, and its own SQNR —
the noise the layer adds: noise powers add, so with n = 10^(-SQNR/10) the layer's own is
n_out − n_in. `output_errors` gives the SQNR of the model's outputs and, for an output whose
last axis holds class scores, how often both models pick the same class.

Why own noise and not the output's SQNR: noise accumulates, so every layer late in a deep
network has a low SQNR whichever layer caused it; keeping in fp32 the layers whose *own*
noise is large (a conv whose weights or output have outliers) is what repairs the model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from woodpecker.bench.accuracy import CAP_DB, sqnr_db, top1_agreement


@dataclass(frozen=True)
class LayerError:
    value: str                  # the float model's value the layer ends at
    nodes: tuple[str, ...]      # the float model's nodes that made it since its inputs
    ops: tuple[str, ...]
    sqnr_db: float
    input_sqnr_db: float
    own_sqnr_db: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OutputError:
    name: str
    sqnr_db: float
    top1_agreement: float | None    # None: not a class-score output

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def own_sqnr_db(out_db: float, in_db: float) -> float:
    """The SQNR the layer's own noise alone would give (see the module's contract)."""
    own = 10.0 ** (-out_db / 10.0) - 10.0 ** (-in_db / 10.0)
    return CAP_DB if own <= 10.0 ** (-CAP_DB / 10.0) else min(CAP_DB, -10.0 * math.log10(own))


def _session(proto, outputs: list[str]):
    import onnx
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(proto)
    have = {o.name for o in m.graph.output}
    for name in outputs:
        if name not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
            have.add(name)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _collect(proto, names: list[str], feeds) -> dict[str, list[np.ndarray]]:
    sess = _session(proto, names)
    out: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for feed in feeds:
        for n, a in zip(names, sess.run(names, feed)):
            out[n].append(a)
    return out


def _visible(qdq) -> dict[str, str]:
    """Float value name → the quantized model's value its consumers see."""
    by_input: dict[str, list] = {}
    for n in qdq.graph.node:
        for i in n.input:
            by_input.setdefault(i, []).append(n)
    seen = {}
    for n in qdq.graph.node:
        if n.op_type != "QuantizeLinear":
            continue
        dq = [c for c in by_input.get(n.output[0], []) if c.op_type == "DequantizeLinear"]
        if dq:
            name = n.input[0].removesuffix("_QuantizeLinear_Input")
            seen[name] = dq[0].output[0]
    return seen


def layer_errors(float_model, qdq_model, feeds: list[dict[str, np.ndarray]]) -> list[LayerError]:
    """Each layer's errors on `feeds` (see the module's contract)."""
    inits = {t.name for t in float_model.graph.initializer}
    producer = {o: n for n in float_model.graph.node for o in n.output}
    position = {n.name: i for i, n in enumerate(float_model.graph.node)}
    kinds = {n.name: n.op_type for n in float_model.graph.node}
    float_values = [o for n in float_model.graph.node for o in n.output if o]
    inputs = [i.name for i in float_model.graph.input if i.name not in inits]
    seen = _visible(qdq_model)
    q_values = {o for n in qdq_model.graph.node for o in n.output}
    q_values |= {i.name for i in qdq_model.graph.input}
    visible = {v: seen.get(v, v) for v in inputs + float_values
               if v in seen or (v in q_values and v not in inputs)}
    names = list(visible)
    ref = _collect(float_model, [v for v in names if v not in inputs], feeds)
    for v in inputs:
        ref[v] = [f[v] for f in feeds]
    got = _collect(qdq_model, [visible[v] for v in names], feeds)
    db = {v: sqnr_db(ref[v], got[visible[v]]) for v in names
          if ref[v] and np.asarray(ref[v][0]).dtype.kind == "f"}
    layers = []
    for v in float_values:
        if v not in db:
            continue
        nodes, ins, stack = set(), [], [producer[v]]
        while stack:
            n = stack.pop()
            if n.name in nodes:
                continue
            nodes.add(n.name)
            for i in n.input:
                if not i or i in inits:
                    continue
                if i in db or i not in producer:
                    ins.append(i)
                else:
                    stack.append(producer[i])
        in_db = min((db.get(i, CAP_DB) for i in ins), default=CAP_DB)
        made = sorted(nodes, key=position.__getitem__)      # in the graph's order
        ops = tuple(kinds[name] for name in made)
        order = tuple(made)
        layers.append(LayerError(v, order, ops, round(db[v], 2), round(in_db, 2),
                                 round(own_sqnr_db(db[v], in_db), 2)))
    return layers


def float_outputs(float_model, feeds) -> dict[str, list[np.ndarray]]:
    """The float model's outputs on `feeds` (what `output_errors` compares with), to compute
    once where several quantized models are compared on the same feeds."""
    return _collect(float_model, [o.name for o in float_model.graph.output], feeds)


def output_errors(float_model, quantized_model, feeds,
                  reference: dict[str, list[np.ndarray]] | None = None) -> list[OutputError]:
    """The SQNR of each model output and, where its last axis holds class scores, top-1
    agreement (see the module's contract); `reference`: `float_outputs` on the same feeds."""
    names = [o.name for o in float_model.graph.output]
    ref = reference if reference is not None else float_outputs(float_model, feeds)
    got = _collect(quantized_model, names, feeds)
    out = []
    for n in names:
        out.append(OutputError(n, round(sqnr_db(ref[n], got[n]), 2),
                               top1_agreement(ref[n], got[n])))
    return out
