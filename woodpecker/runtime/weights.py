"""A plan's weights file: every constant's raw bytes (C order, native little-endian) in one
file, each at a 64-byte aligned offset, no pickle and no archive. Loading maps the file
read-only instead of reading it (issue 33: a small process): a weight costs resident memory
only while its pages are touched, and `MappedWeights.release()` hands back the pages touched so
far (the page cache keeps them; a later read faults them in again) — the runtime calls it as it
builds kernels, so weights that kernels repack at build time (Halide's blocked conv and dense
weights) are not resident twice.

Contract: `write_weights(file, arrays)` → each array's offset; `MappedWeights(path)` then
`array(offset, shape, dtype)` → a read-only array over the mapping, checked to lie inside the
file. The plan loader checks `sha256()` — of the mapped bytes themselves, so a file renamed
over the path after the check is not what the plan runs on — before reading any array.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from woodpecker.errors import PlanError
from woodpecker.files import inside

ALIGN = 64


def aligned(n: int) -> int:
    """`n` rounded up to the next multiple of ALIGN: where the weight after `n` bytes starts."""
    return -(-n // ALIGN) * ALIGN


def write_weights(f: BinaryIO, arrays: Sequence[np.ndarray]) -> list[int]:
    """Write `arrays` one after another, each at an aligned offset; returns the offsets."""
    offsets, at = [], 0
    for a in arrays:
        a = np.ascontiguousarray(a)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        pad = -at % ALIGN
        f.write(b"\0" * pad)
        at += pad
        offsets.append(at)
        f.write(a.reshape(-1).view(np.uint8).data if a.size else b"")
        at += a.nbytes
    return offsets


def dtype_named(name: str) -> np.dtype:
    """numpy's dtype of this name, or ml_dtypes' (bfloat16, float8_e4m3fn, int4, …: the types
    of initializers only a library reads, which numpy does not name itself)."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        found = getattr(ml_dtypes, str(name), None)
        if found is None:
            raise PlanError(f"plan.json names an unknown element type {name!r}") from None
        return np.dtype(found)


class MappedWeights:
    """The weights file mapped read-only; arrays are views of the mapping."""

    def __init__(self, path: "str | os.PathLike") -> None:
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self.size = size

    def array(self, offset: int, shape: Sequence[int], dtype: str, name: str) -> np.ndarray:
        dt = dtype_named(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if offset < 0 or offset % ALIGN or offset + count * dt.itemsize > self.size:
            raise PlanError(f"weight {name!r} does not lie inside {self.path}")
        if count == 0 or self._map is None:
            return np.zeros(shape, dt)
        return np.frombuffer(self._map, dt, count, offset).reshape(shape)

    def sha256(self) -> str:
        """The hex sha256 of the mapped bytes (the pages read are handed back after)."""
        h = hashlib.sha256()
        if self._map is not None:
            view = memoryview(self._map)
            for at in range(0, self.size, 1 << 22):
                h.update(view[at:at + (1 << 22)])
            view.release()
            self.release()
        return h.hexdigest()

    def release(self) -> None:
        """Drop the pages touched so far from this process's resident memory."""
        if self._map is not None and hasattr(self._map, "madvise"):
            self._map.madvise(mmap.MADV_DONTNEED)


def load_weights(d: Path, doc: dict) -> tuple[dict[str, np.ndarray], MappedWeights]:
    wdoc = doc["weights"]
    path = inside(d, wdoc["file"], "weights file")
    if not path.is_file():
        raise PlanError(f"plan weights file missing: {path}")
    if doc["schema_version"] == 3:
        if _sha256_of(path) != wdoc["sha256"]:
            raise _weights_differ(path)
        return _npz_weights(path, wdoc), None
    # the mapping's own bytes are hashed: a file renamed over this one after the check is
    # not what the plan runs on
    mapped = MappedWeights(path)
    if mapped.sha256() != wdoc["sha256"]:
        raise _weights_differ(path)
    out, end = {}, 0
    for t in wdoc["tensors"]:     # the tensors tile the file in order: an edited shape shows
        shape, dtype = [int(n) for n in t["shape"]], np.dtype(t["dtype"])
        if int(t["offset"]) != aligned(end):
            raise PlanError(f"weight {t['name']!r} is not what is stored: plan says "
                            f"{dtype.name}{shape} at offset {t['offset']}, but the weights "
                            f"before it end at {end} (plan.json and {path.name} disagree)")
        out[t["name"]] = mapped.array(int(t["offset"]), shape, dtype.name, t["name"])
        end = int(t["offset"]) + out[t["name"]].nbytes
    if end != mapped.size:
        raise PlanError(f"{path.name} holds {mapped.size} bytes but its weights end at {end} "
                        "(plan.json and the weights file disagree)")
    return out, mapped


def _weights_differ(path: Path) -> PlanError:
    return PlanError(f"{path} does not match plan.json (sha256 differs): plan was edited or "
                     "the weights file corrupted")


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _npz_weights(path: Path, wdoc: dict) -> dict[str, np.ndarray]:
    """A schema-3 plan's weights.npz, read whole (no pickle)."""
    out = {}
    with np.load(path, allow_pickle=False) as z:
        for t in wdoc["tensors"]:
            if t["key"] not in z:
                raise PlanError(f"weight {t['name']!r} missing from {path}")
            a = z[t["key"]]
            if list(a.shape) != list(t["shape"]) or a.dtype.name != t["dtype"]:
                raise PlanError(f"weight {t['name']!r}: stored {a.dtype.name}{list(a.shape)}, "
                                f"plan says {t['dtype']}{t['shape']}")
            out[t["name"]] = a
    return out
