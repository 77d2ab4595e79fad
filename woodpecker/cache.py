"""Where Woodpecker caches what it can rebuild (exported zoo models, compiled kernels, the
sessions' plans): `$WOODPECKER_CACHE`, else the user cache directory of the platform.

A cache of folders keyed by what each was built from: an entry is the folder named
`entry_key(document)` (24 hex digits of the sha256 of the key document's JSON) and records that
document (source.json, written last by `save_entry`); `source_differs` says why a folder's
record is not the document asked for (none, unreadable, another), so an entry is served only
for the very document it was built from. `evict_least_recent` keeps such a cache bounded: its
entries (folders named as entries; nothing else there is touched) are removed least recently
used first — by modification time; `touch` marks an entry used — until the rest hold at most
the limit, the entry just written kept whatever its size. Removal takes no lock: a process
loading an entry as another removes it may see that load fail."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from woodpecker.files import write_bytes

SOURCE_FILE = "source.json"      # the key document an entry was built from
_ENTRY = re.compile(r"[0-9a-f]{24}")


def cache_dir() -> Path:
    env = os.environ.get("WOODPECKER_CACHE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("woodpecker"))


def entry_key(document: dict[str, Any]) -> str:
    """The name of the entry built from `document` (JSON values)."""
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:24]


def save_entry(folder: Path, document: dict[str, Any], save: Callable[[Path], Any],
               limit: int | None = None) -> None:
    """Fill `folder` (`save(folder)`) and record it built from `document` (the old record goes
    first, so a folder half replaced matches nothing); with `limit`, then evict the least
    recently used other entries of its cache (`evict_least_recent`)."""
    (folder / SOURCE_FILE).unlink(missing_ok=True)
    save(folder)
    write_bytes(folder / SOURCE_FILE, json.dumps(
        {"key": entry_key(document), "document": document}, sort_keys=True, indent=1).encode())
    touch(folder)
    if limit is not None:
        evict_least_recent(folder.parent, folder, limit)


def source_differs(folder: Path, document: dict[str, Any]) -> str | None:
    """Why `folder` is not known to be built from `document` (None: it is)."""
    try:
        recorded = json.loads((folder / SOURCE_FILE).read_text())
    except FileNotFoundError:
        return f"it records no {SOURCE_FILE}"
    except (OSError, ValueError) as e:
        return f"its {SOURCE_FILE} does not read ({type(e).__name__})"
    if not isinstance(recorded, dict) or json.dumps(recorded.get("document"), sort_keys=True) \
            != json.dumps(document, sort_keys=True):
        return f"its {SOURCE_FILE} records another model, options or versions"
    return None


def touch(folder: Path) -> None:
    """Mark `folder` used now (its modification time)."""
    try:
        os.utime(folder)
    except OSError:
        pass


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under `folder` (links not followed)."""
    total = 0
    for f in folder.rglob("*"):
        try:
            if f.is_file() and not f.is_symlink():
                total += f.stat().st_size
        except OSError:     # removed meanwhile
            pass
    return total


def evict_least_recent(root: Path, keep: Path, limit: int) -> list[Path]:
    """Remove the least recently used entries of `root` until the rest hold at most `limit`
    bytes, never `keep`; returns those removed."""
    entries = []
    try:
        listed = list(root.iterdir())
    except OSError:
        return []
    for d in listed:
        try:
            if _ENTRY.fullmatch(d.name) and d.is_dir() and not d.is_symlink():
                entries.append((d.stat().st_mtime_ns, d, folder_bytes(d)))
        except OSError:
            pass
    total, removed = sum(size for _, _, size in entries), []
    for _, d, size in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        if d == keep:
            continue
        shutil.rmtree(d, ignore_errors=True)
        total -= size
        removed.append(d)
    return removed
