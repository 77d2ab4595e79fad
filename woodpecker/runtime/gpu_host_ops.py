"""Host steps of a GPU plan (issue 54: whatever model a user brings, its plan runs): a node no
GPU template computes runs by its numpy reference (woodpecker/ops) on the plan's host, between
a copy of its inputs off the device and a copy of its outputs back.

Contract: the plan records such a step as `"engine": "host"` with its op, its attributes
(`encode_attrs`: JSON, numpy arrays as {"ndarray", "dtype"}), its arguments (values, constants
among the weights in their own types, or {"none": true} for an omitted optional input) and
its outputs (`"outs"`, several for a Split). `HostStep(memory, op, attrs, ins, outs)` is the
launch: it waits for the device, downloads the inputs (float16 storage widened to float32 for
the reference), runs the op's reference and uploads each output into its view. ONNX
Runtime's opaque nodes are not host steps: the device needs numpy alone.

Choice: correctness before speed — each host step costs two copies and a device
synchronisation, so the plan says how many it has (`woodpecker gpu-plan` prints them); the
choice at load, DOS stages and CUDA graphs leave them alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from woodpecker.errors import PlanError


def encode_attrs(attrs: dict) -> dict:
    """`attrs` as JSON values; ValueError for one JSON cannot hold."""
    def enc(v):
        if isinstance(v, np.ndarray):
            return {"ndarray": v.tolist(), "dtype": v.dtype.name}
        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, (list, tuple)):
            return [enc(x) for x in v]
        if isinstance(v, dict):
            return {"dict": {str(k): enc(x) for k, x in v.items()}}
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        raise ValueError(f"attribute of type {type(v).__name__}")
    return {k: enc(v) for k, v in attrs.items()}


def decode_attrs(doc: dict) -> dict:
    def dec(v):
        if isinstance(v, dict) and "ndarray" in v:
            return np.asarray(v["ndarray"], v["dtype"])
        if isinstance(v, dict) and "dict" in v:
            return {k: dec(x) for k, x in v["dict"].items()}
        if isinstance(v, list):
            return [dec(x) for x in v]
        return v
    return {k: dec(v) for k, v in doc.items()}


class HostStep:
    """One host step's launch (see the module contract)."""

    def __init__(self, memory, op: str, attrs: dict, ins: list, outs: list) -> None:
        from woodpecker.ops import OPS

        if op not in OPS:
            raise PlanError(f"GPU plan: a host step runs op {op!r}, which this Woodpecker "
                            "does not define")
        self.memory, self.reference = memory, OPS[op].reference
        self.op, self.attrs, self.ins, self.outs = op, decode_attrs(attrs), ins, outs

    def _fetch(self, view) -> np.ndarray:
        host = self.memory.download(view, np.empty(view.shape, view.dtype))
        return host.astype(np.float32) if host.dtype == np.float16 else host

    def launch(self) -> None:
        self.memory.synchronize()
        args: list[Any] = [None if v is None else self._fetch(v) for v in self.ins]
        out = self.reference(self.attrs, *args)
        results = list(out) if isinstance(out, (tuple, list)) else [out]
        for view, y in zip(self.outs, results):
            self.memory.upload(view, np.asarray(y).reshape(view.shape))

    __call__ = launch
