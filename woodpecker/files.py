"""Files written safely and checked: what plans and engines' artifacts are made of.

Contract: `install` never rewrites a file in place (a loaded shared object is mapped into the
process; an interrupted copy leaves the old file); `verified` raises one-line PlanErrors;
`read_npy` reads a user's .npy file (never a pickle) or says in one line what it is instead;
`distinct_stems` gives outputs file names that never collide.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np

from woodpecker.errors import PlanError, WoodpeckerError


def sha256_file(path: "str | os.PathLike") -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def install(src: Path, dst: Path) -> Path:
    """Copy `src` to `dst` through a temporary name (nothing to do when they are one file)."""
    if src.resolve() != dst.resolve():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    return dst


def write_bytes(dst: Path, data: bytes) -> Path:
    """Write `data` to `dst` through a temporary name."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dst)
    return dst


def inside(directory: Path, name: str, what: str) -> Path:
    """`directory / name` for a plain relative `name` that stays inside `directory`; a
    PlanError for an absolute path or one that climbs out (a plan names only its own files)."""
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise PlanError(f"plan.json: {what} {name!r} is not a file inside the plan folder")
    return directory / rel


def verified(path: Path, sha256: str | None, what: str) -> Path:
    """`path`, after checking it exists and its sha256 is the one recorded."""
    if not path.is_file():
        raise PlanError(f"plan {what} missing: {path}")
    if sha256_file(path) != sha256:
        raise PlanError(f"{path} does not match plan.json (sha256 differs): {what} edited or "
                        "corrupted")
    return path


def read_npy(name: str, path: str) -> np.ndarray:
    """One array from a .npy file (never pickled objects), or a one-line error that says what
    the file is instead."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError as e:
        raise WoodpeckerError(f"cannot read input {name!r} from {path}: {e.strerror}") from None
    if head[:4] == b"PK\x03\x04":
        raise WoodpeckerError(f"input {name!r}: {path} is an .npz archive; give one .npy file "
                              "per input (np.save)")
    if head != b"\x93NUMPY":
        raise WoodpeckerError(f"input {name!r}: {path} is not a .npy file (np.save writes one)")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise WoodpeckerError(f"cannot read input {name!r} from {path}: {e}") from None


def distinct_stems(names) -> list[str]:
    """A distinct file stem per output name: unsafe characters become "_", and a stem that
    another output already has (`a/b` and `a_b`) gets "-2", "-3", … (case-insensitively:
    some file systems are)."""
    taken: set[str] = set()
    out = []
    for name in names:
        base = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "output"
        stem, k = base, 1
        while stem.lower() in taken:
            k += 1
            stem = f"{base}-{k}"
        taken.add(stem.lower())
        out.append(stem)
    return out
