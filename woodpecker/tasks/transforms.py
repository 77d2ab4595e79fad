"""Transforms a kernel template applies to a task's constant arguments once, before any run:
named, serialisable specs (`Transform`) and their numpy application, so the build machine
(a GPU plan's weights) and a remote runner measuring a tuning batch (runtime/gpu_measure.py,
numpy only) compute the same arrays from the same inputs.

Contract: `apply(spec, array)` returns the transformed array; `WINOGRAD_FILTER` with `m` is
Winograd's filter transform U = G g Gᵀ of HWIO 3×3 weights (Lavin & Gray 2016, the matrices
`MATRICES` the CPU and GPU Winograd templates share), computed in float64 and returned as
numpy (b, a, C, K) in the weights' own float type (a along x, b along y).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WINOGRAD_FILTER = "winograd_filter"

# Lavin & Gray (2016): Bᵀ (input), G (filter), Aᵀ (output) for F(m, 3).
MATRICES = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float),
        np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]]),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], float)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], float),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                  [0, 1, -1, 8, -8, 1]], float)),
}


@dataclass(frozen=True)
class Transform:
    kind: str
    m: int = 0

    def to_json(self) -> dict:
        return {"kind": self.kind, "m": self.m}

    @classmethod
    def from_json(cls, doc: dict) -> "Transform":
        if doc.get("kind") != WINOGRAD_FILTER or doc.get("m") not in MATRICES:
            raise ValueError(f"unknown argument transform {doc!r}")
        return cls(doc["kind"], int(doc["m"]))


def apply(spec: Transform, array: np.ndarray) -> np.ndarray:
    """`array` transformed by `spec` (see the module contract)."""
    if spec.kind != WINOGRAD_FILTER:
        raise ValueError(f"unknown argument transform {spec.kind!r}")
    _, g, _ = MATRICES[spec.m]
    u = np.einsum("bv,au,vuck->back", g, g, np.asarray(array, np.float64))
    return np.ascontiguousarray(u, array.dtype)
