"""What a plan save writes besides plan.json's document (runtime/plan.py's save_plan): which
constants the weights file stores and which only a library step's model holds, the weights'
sha256 as they are written, which of a folder's files belong to a plan (a save in progress
included), and the files an older plan saved there left behind (removed)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from woodpecker.engines import names
from woodpecker.engines.registry import get_engine

if TYPE_CHECKING:
    from woodpecker.runtime.plan import Plan

PLAN_FILE, WEIGHTS_FILE = "plan.json", "weights.bin"


def only_plan_parts(d: Path) -> bool:
    """`d` holds nothing but what saves write: weights.bin, the engines' artifact
    folders and saves' hidden temporaries (a plan another process is saving right now); a
    plan.json that is no plan's is the user's file."""
    def part(e: Path) -> bool:
        return e.name == WEIGHTS_FILE or (e.name.startswith(".") and e.name.endswith(".tmp")) \
            or (e.name in names.ARTIFACT_DIRS and e.is_dir() and not e.is_symlink())

    return not (d / PLAN_FILE).exists() and all(part(e) for e in d.iterdir())


def remove_stale(d: Path, artifacts: dict) -> None:
    """Remove the files of the engines' artifact folders that the plan just saved does not
    name: a plan saved over another (its library changed from ONNX Runtime to OpenVINO, its
    kernels retuned) kept the old one's files (resnet18's plan: 90 MB for 45 MB of weights)."""
    named = {os.path.normpath(f) for engine, section in artifacts.items()
             for f in get_engine(engine).artifact_files(section)}
    for folder in names.ARTIFACT_DIRS:
        root = d / folder
        if not root.is_dir() or root.is_symlink():
            continue
        for path in sorted(root.rglob("*"), reverse=True):
            rel = os.path.normpath(path.relative_to(d))
            if path.is_dir() and not path.is_symlink():
                if not any(path.iterdir()):
                    path.rmdir()
            elif rel not in named and not path.name.endswith(".tmp"):
                path.unlink(missing_ok=True)
        if not any(root.iterdir()):
            root.rmdir()


# Constants up to this many elements are stored in weights.bin even where a library step holds
# them too: shape rules read small constants' values (a Reshape's target), so the load-time
# shape check needs them (the same line engines/node_builds.SMALL draws).
HELD_MIN_ELEMENTS = 4096


def stored_constants(plan: "Plan") -> "tuple[list, list]":
    """(the constants weights.bin stores, those only library steps read, whose step models
    hold them): a library-first plan's weights are in its session's model and were stored
    twice (resnet18's plan 90 MB for a 45 MB model). A held constant is recorded by name,
    shape and dtype, and loads as a zero-byte stand-in no step reads."""
    g = plan.graph
    holds = {e: get_engine(e).caps.holds_constants for e in set(plan.engines)}
    read_by_own = {id(v) for n in g.nodes if not holds[plan.choices[n.name].engine]
                   for v in n.inputs if v is not None and v.is_const}
    stored, held = [], []
    for v in g.constants():
        keep = id(v) in read_by_own or g.is_output(v) or v.data.size <= HELD_MIN_ELEMENTS
        (stored if keep else held).append(v)
    return stored, held


class HashingWriter:
    """A file that also hashes what is written to it (the weights' sha256 without reading the
    file back)."""

    def __init__(self, f) -> None:
        self._f, self._h = f, hashlib.sha256()

    def write(self, data) -> int:
        self._h.update(data)
        return self._f.write(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()
