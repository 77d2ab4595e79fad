"""How far one model's outputs lie from another's on the same inputs: the measures a quantized
model (quantization/layers.py) and a lower-precision plan (selection/accuracy.py) report.

Contract: `sqnr_db(reference, other)` — the signal-to-noise ratio, ONNX Runtime's
`compute_signal_to_quantization_noice_ratio` (the reference's norm over the difference's, in
dB), capped at CAP_DB (an exact copy); `top1_agreement(reference, other)` — for an output whose
last axis holds class scores (float, more than one, at most 2-d per input), the share of rows
where both pick the same class; None for any other output.
"""

from __future__ import annotations

import numpy as np

CAP_DB = 120.0          # the SQNR of an exact value (float inputs, a copy)


def sqnr_db(reference: list[np.ndarray], other: list[np.ndarray]) -> float:
    from onnxruntime.quantization.qdq_loss_debug import (
        compute_signal_to_quantization_noice_ratio,
    )

    ref = [np.asarray(r, np.float64).ravel() for r in reference]
    oth = [np.asarray(o, np.float64).ravel() for o in other]
    return min(CAP_DB, compute_signal_to_quantization_noice_ratio(ref, oth))


def top1_agreement(reference: list[np.ndarray], other: list[np.ndarray]) -> float | None:
    """Per input one array of the output (module docstring)."""
    first = np.asarray(reference[0])
    if first.ndim == 0 or first.ndim > 2 or first.dtype.kind != "f" or first.shape[-1] < 2:
        return None
    a = np.concatenate([np.asarray(x).reshape(-1, first.shape[-1]) for x in reference])
    b = np.concatenate([np.asarray(x).reshape(-1, first.shape[-1]) for x in other])
    return float(np.mean(a.argmax(-1) == b.argmax(-1)))
