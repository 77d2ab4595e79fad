"""Glimpse's blueprint (thesis ch. 4, §4.4.1): the machine's architectural facts as a small
vector of named numbers, so that cost models, priors and validity predictors can take the
hardware into account.

Contract: `blueprint(target)` returns the facts (`Blueprint`): the vector extensions (from the
target, i.e. /proc/cpuinfo), cores, the data-cache sizes (Linux sysfs, the same numbers
`py-cpuinfo` reads, without its one-second probe), vector lanes and registers, and two
measurements — peak float32 GFLOP/s of a matrix product (numpy's BLAS on the target's threads)
and the memory bandwidth of a 256 MiB copy — cached per machine under the cache directory
(`blueprint-<digest>.json`), so they are measured once (~1 s). `Blueprint.vector()` is the
embedding: log2 of each size and rate, 0/1 per extension.

`key_vector(record_key)` is the part of another machine's blueprint its records' target key
tells (extensions, lanes, registers, threads): a shipped tuning database's records of other
machines (tune/database.py) are featurized with it, not with this machine's blueprint.

Choice: the thesis compresses data-sheet specifications of many GPUs with PCA; the records here
come from a handful of CPU families, so the embedding is the named, scaled vector itself (the
measured rates and caches of another machine are not in its key: those columns stay 0 there).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from woodpecker.cache import cache_dir
from woodpecker.target import ISA_FLAGS, Target

FLAGS = ISA_FLAGS      # the extensions a target records


@dataclass(frozen=True)
class Blueprint:
    cpu: str
    isa: tuple[str, ...]
    cores: int
    l1d_kib: float
    l2_kib: float
    l3_kib: float
    lanes: int                 # float32 lanes of the widest vector
    registers: int             # vector registers
    gflops: float              # measured: float32 matrix product on `cores` threads
    gbps: float                # measured: a 256 MiB copy, GB/s

    def vector(self) -> dict[str, float]:
        out = {f"hw.{f}": float(f in self.isa) for f in FLAGS}
        for name in ("cores", "l1d_kib", "l2_kib", "l3_kib", "lanes", "registers", "gflops",
                     "gbps"):
            out[f"hw.{name}"] = math.log2(1.0 + getattr(self, name))
        return out


def _lanes(isa) -> int:
    return 16 if "avx512f" in isa else 8 if "avx2" in isa else 4


def key_vector(record_key: str) -> dict[str, float]:
    """The blueprint features a target key (`Target.record_key`, "arch:ext,ext:Nt") gives."""
    parts = record_key.split(":")
    isa = tuple(parts[1].split(",")) if len(parts) > 1 else ()
    threads = int(parts[2].rstrip("t")) if len(parts) > 2 and parts[2][:-1].isdigit() else 1
    out = {f"hw.{f}": float(f in isa) for f in FLAGS}
    for name, value in (("cores", threads), ("lanes", _lanes(isa)),
                        ("registers", 32 if "avx512f" in isa else 16)):
        out[f"hw.{name}"] = math.log2(1.0 + value)
    return out


def cache_sizes(cpu: int = 0) -> dict[str, float]:
    """KiB per data/unified cache level, from sysfs (0 where unknown)."""
    out = {"l1d_kib": 0.0, "l2_kib": 0.0, "l3_kib": 0.0}
    base = Path(f"/sys/devices/system/cpu/cpu{cpu}/cache")
    for d in sorted(base.glob("index*")):
        try:
            level = (d / "level").read_text().strip()
            kind = (d / "type").read_text().strip()
            size = (d / "size").read_text().strip().upper()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        mult = {"K": 1, "M": 1024, "G": 1 << 20}.get(size[-1:], 1 / 1024)
        kib = float(size.rstrip("KMG")) * mult
        out[{"1": "l1d_kib", "2": "l2_kib", "3": "l3_kib"}.get(level, "l3_kib")] = kib
    return out


def _measure(threads: int) -> tuple[float, float]:
    import numpy as np
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a = rng.standard_normal((768, 768), dtype=np.float32)
    with threadpool_limits(limits=threads):
        a @ a
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            a @ a
            best = min(best, time.perf_counter() - t0)
    gflops = 2 * 768 ** 3 / best / 1e9
    src = np.ones(32 << 20, dtype=np.float64)
    dst = np.empty_like(src)
    copy = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        copy = min(copy, time.perf_counter() - t0)
    return gflops, 2 * src.nbytes / copy / 1e9


def blueprint(target: Target | None = None, cache: Path | None = None) -> Blueprint:
    """This machine's blueprint for `target` (default: the host), measured once and cached."""
    target = target or Target.parse("cpu")
    ident = json.dumps([target.cpu, target.arch, list(target.isa), target.threads])
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    path = (cache or cache_dir()) / f"blueprint-{digest}.json"
    try:
        return Blueprint(**{**json.loads(path.read_text()), "isa": tuple(target.isa)})
    except (OSError, ValueError, TypeError):
        pass
    gflops, gbps = _measure(target.threads)
    wide = "avx512f" in target.isa
    bp = Blueprint(target.cpu, tuple(target.isa), target.threads, **cache_sizes(),
                   lanes=_lanes(target.isa),
                   registers=32 if wide else 16, gflops=round(gflops, 1), gbps=round(gbps, 1))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(bp)))
        os.replace(tmp, path)
    except OSError:
        pass
    return bp
