"""Calibration data: the feeds a quantizer runs the float model on, from files or Python.

Contract: `feeds(source, inputs)` turns what a user hands over into a list of feeds
(`{input name: array}`), each checked against the model's inputs (`InputSpec`: name, element
type, shape with `None` for a free dimension) — the first mismatch is one `InputError` line
naming the input, the file and what was expected. Sources:

- a `.npz` file: arrays named by the model's inputs (a single-input model may use any one
  name); a `.npy` file: the one input's array;
- a folder: its `.npz`/`.npy` files in name order, each as above;
- a Python iterable of feeds (dicts) or of arrays (single-input models);
- a dict of arrays or one array: as an `.npz` or `.npy` file would give.

An array whose first axis is larger than the model's static batch dimension is cut into feeds
of that batch (a `.npy` of 500 images feeds a batch-1 model 500 times). Floating arrays are cast
to the input's float type; any other type difference is refused. Nothing is read with pickle.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from woodpecker.errors import InputError, first_line


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    shape: tuple[int | None, ...]   # None: a dimension the model leaves free

    @staticmethod
    def of(proto) -> "list[InputSpec]":
        """The graph inputs that are not initializers, from an onnx ModelProto."""
        from onnx import helper

        inits = {t.name for t in proto.graph.initializer}
        specs = []
        for v in proto.graph.input:
            if v.name in inits:
                continue
            t = v.type.tensor_type
            dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                         for d in t.shape.dim)
            specs.append(InputSpec(v.name, np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)),
                                   dims))
        return specs


def _check(feed: dict[str, Any], specs: list[InputSpec], where: str) -> list[dict[str, np.ndarray]]:
    """The feed checked and cast, cut along the batch axis where the model's is smaller."""
    names = {s.name for s in specs}
    if len(specs) == 1 and len(feed) == 1 and next(iter(feed)) not in names:
        feed = {specs[0].name: next(iter(feed.values()))}
    missing = sorted(names - set(feed))
    extra = sorted(set(feed) - names)
    if missing or extra:
        raise InputError(f"calibration data {where}: "
                         + (f"missing input(s) {', '.join(missing)}" if missing else "")
                         + ("; " if missing and extra else "")
                         + (f"unknown name(s) {', '.join(extra)}" if extra else "")
                         + f" (the model's inputs: {', '.join(sorted(names))})")
    out: dict[str, np.ndarray] = {}
    for s in specs:
        try:
            a = np.asarray(feed[s.name])
        except (ValueError, TypeError) as e:     # a ragged list
            raise InputError(f"calibration data {where}: input {s.name} is not an array "
                             f"({first_line(e)})") from None
        if a.dtype != s.dtype:
            if a.dtype.kind == "f" and s.dtype.kind == "f":
                a = a.astype(s.dtype)
            else:
                raise InputError(f"calibration data {where}: input {s.name} is {a.dtype}, the "
                                 f"model takes {s.dtype}")
        if a.ndim != len(s.shape) or any(d is not None and d != n
                                        for d, n in zip(s.shape[1:], a.shape[1:])):
            want = "x".join("?" if d is None else str(d) for d in s.shape)
            raise InputError(f"calibration data {where}: input {s.name} has shape "
                             f"{'x'.join(map(str, a.shape))}, the model takes {want}")
        out[s.name] = a
    batch = {s.shape[0] for s in specs if s.shape and s.shape[0] is not None}
    rows = {a.shape[0] for a in out.values() if a.ndim}
    if len(batch) == 1 and len(rows) == 1:
        b, n = batch.pop(), rows.pop()
        if n != b:
            if n % b:
                raise InputError(f"calibration data {where}: {n} samples do not split into "
                                 f"the model's batch of {b}")
            return [{k: v[i:i + b] for k, v in out.items()} for i in range(0, n, b)]
    return [out]


def _read(path: Path) -> dict[str, np.ndarray] | np.ndarray:
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise InputError(f"calibration data {path}: cannot read it ({e})") from None


def _as_feed(item: Any, specs: list[InputSpec]) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    if len(specs) != 1:
        raise InputError(f"calibration data: the model has {len(specs)} inputs, so each "
                         "sample must be a dict naming them")
    return {specs[0].name: item}


def feeds(source: "str | os.PathLike | dict | np.ndarray | Iterable[Any]",
          specs: list[InputSpec]) -> list[dict[str, np.ndarray]]:
    """Every feed `source` gives, checked (see the module's contract)."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz"))
            if not files:
                raise InputError(f"calibration data {path}: no .npy or .npz files in it")
        elif path.suffix in (".npy", ".npz"):
            if not path.is_file():
                raise InputError(f"calibration data {path}: no such file")
            files = [path]
        else:
            raise InputError(f"calibration data {path}: expected a .npy or .npz file or a "
                             "folder of them")
        out = []
        for f in files:
            out += _check(_as_feed(_read(f), specs), specs, str(f))
        return out
    if isinstance(source, (dict, np.ndarray)):
        return _check(_as_feed(source, specs), specs, "(given)")
    if not isinstance(source, Iterable) or isinstance(source, (bytes, bytearray)):
        raise InputError(f"calibration data must be a .npy/.npz file or a folder of them, an "
                         f"array, a dict of arrays or an iterable of them, not a "
                         f"{type(source).__name__}")
    out = []
    for i, item in enumerate(source):
        out += _check(_as_feed(item, specs), specs, f"sample {i}")
    if not out:
        raise InputError("calibration data: the iterable gave no samples")
    return out
