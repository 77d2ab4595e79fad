"""The shipped tuning database: measured configurations of the zoo's and the real-world set's
tasks on every CPU family the project has run on, inside the package, so a compile on a new
machine does not start from nothing (issue 52; TVM's TopHub logs and TenSet play this part for
TVM, the thesis's Glimpse transfers across machines the same way).

Contract:
- Format: gzip JSON lines. The first line is the header `{"format": FORMAT, "version":
  VERSION, "records": n, "targets": {target key: records}}`; each further line one valid record
  `{"target", "task", "template", "config", "cost_s"}` (and `"machine"`, the microarchitecture
  that measured it, where known: one target key can stand for two CPU families) — configs and
  costs only, no errors, timestamps or searcher provenance. A task's records on one target
  come from one source log (the one holding most valid records of it), so they share one cost
  scale.
- `load_database(path)` reads a database whole; `default_database()` the packaged one
  (`PACKAGED`), or the file `WOODPECKER_DATABASE` names, or none when it says `off`, through
  its index (`indexed_database`, tune/db_index.py: built once per file digest in the
  Woodpecker cache, so a compile reads only its own tasks' records and a sample of the
  rest). A file that is missing, unreadable, corrupt or of another format version is ignored
  with one warning line on stderr — never an error: a database only ever adds knowledge.
- How a tuning log uses it (`tune/records.TuningLog.attach`): the records of the log's own
  target speak for a task only while the user's log holds no valid record of that task (the
  user's records are never overridden); they then nominate the task's finalists and are the
  first configurations tuning measures (`shipped_configs`). Where the database holds none of
  the task on this target, its records of other targets are those first configurations
  instead, fitted to this target's constraints (`KnobSpace.nearest_valid`) — never a cost, a
  finalist or a kernel. Every record, of any target, is a transfer record for the searchers'
  cost models and priors and for the template weights.
- `database_records(logs)` selects what a database holds from tuning logs and `write_database`
  writes one; `benchmarks/tuning_database.py` regenerates the packaged file from the project's
  logs, `woodpecker tune --export-db FILE` writes a user's log in this format to contribute.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sqlite3
import sys
import zlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import TextIO

from woodpecker.cache import cache_dir
from woodpecker.engines.halide.templates import known_template
from woodpecker.errors import first_line
from woodpecker.tune.db_index import (
    MemoryIndex,
    RecordIndex,
    build_index,
    file_digest,
    index_path,
    open_index,
)
from woodpecker.tune.records import TuningRecord, seconds_per_cost

FORMAT = "woodpecker-tuning-db"
VERSION = 1
PACKAGED = Path(__file__).with_name("tuning_db.jsonl.gz")
ENV = "WOODPECKER_DATABASE"
OFF = ("off", "0", "none", "")


class TuningDatabase:
    """A database's records (all targets), answered through an index (tune/db_index.py:
    `index`), and where they came from. `records` reads them all (a test's, a benchmark's,
    distributed tuning's); a compile asks the index for its own tasks' alone."""

    def __init__(self, index: RecordIndex | None = None) -> None:
        self.index = index if index is not None else MemoryIndex()
        self._records: tuple[TuningRecord, ...] | None = None

    @property
    def records(self) -> tuple[TuningRecord, ...]:
        if self._records is None:
            self._records = tuple(self.index.all())
        return self._records

    @property
    def source(self) -> str:
        return self.index.source

    @property
    def targets(self) -> dict[str, int]:
        return dict(self.index.targets)

    def __len__(self) -> int:
        return len(self.index)


EMPTY = TuningDatabase()


def _record(d: dict) -> TuningRecord:
    rec = TuningRecord.from_json(d)
    if not (isinstance(rec.target, str) and rec.valid and float(rec.cost_s) > 0):
        raise ValueError("a database record has a target and a positive cost")
    return rec


def _parsed(path: "str | os.PathLike", out: TextIO) -> tuple[TuningRecord, ...] | None:
    """Every record of the file at `path`; None, with one warning line, when it cannot be
    used."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            header = json.loads(f.readline())
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise ValueError("not a Woodpecker tuning database")
            if header.get("version") != VERSION:
                raise ValueError(f"format version {header.get('version')!r}, this Woodpecker "
                                 f"reads {VERSION}")
            return tuple(_record(json.loads(line)) for line in f if line.strip())
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError) as e:
        print(f"warning: tuning database {path} not used ({first_line(e)[:120]})",
              file=out, flush=True)
        return None


def load_database(path: "str | os.PathLike", out: TextIO | None = None) -> TuningDatabase:
    """The database at `path`, parsed whole into memory; EMPTY, with one warning line, when
    it cannot be used."""
    records = _parsed(path, out or sys.stderr)
    if records is None:
        return EMPTY
    return TuningDatabase(MemoryIndex(records, os.fspath(path)))


def indexed_database(path: "str | os.PathLike", where: Path | None = None,
                     out: TextIO | None = None) -> TuningDatabase:
    """The database at `path` through its sqlite index in `where` (default: the Woodpecker
    cache), built on first use from the parsed file (tune/db_index.py); where the index
    cannot be written, the file parsed in memory (`load_database`). EMPTY, with one warning
    line, when the file cannot be used."""
    out = out or sys.stderr
    source = os.fspath(path)
    try:
        digest = file_digest(path)
    except OSError as e:
        print(f"warning: tuning database {path} not used ({first_line(e)[:120]})",
              file=out, flush=True)
        return EMPTY
    at = index_path(where or cache_dir(), digest)
    index = open_index(at, source)
    if index is None:
        records = _parsed(path, out)
        if records is None:
            return EMPTY
        try:
            build_index(list(records), at, digest)
        except (OSError, sqlite3.Error):     # a read-only cache: this process parses
            return TuningDatabase(MemoryIndex(records, source))
        index = open_index(at, source)
        if index is None:
            return TuningDatabase(MemoryIndex(records, source))
    return TuningDatabase(index)


@lru_cache(maxsize=4)
def _cached(path: str, where: str) -> TuningDatabase:
    return indexed_database(path, Path(where))


def default_database() -> TuningDatabase:
    """The database compiles use: `WOODPECKER_DATABASE` (a file, or `off`), else the packaged
    one, through its index in the Woodpecker cache (opened once per process and cache)."""
    chosen = os.environ.get(ENV)
    if chosen is not None and chosen.strip().lower() in OFF:
        return EMPTY
    return _cached(os.fspath(chosen) if chosen else os.fspath(PACKAGED), os.fspath(cache_dir()))


def database_records(records: Iterable[Iterable[TuningRecord]]) -> list[TuningRecord]:
    """What a database holds from tuning logs (each an iterable of records): valid records of
    known templates that carry a target; per target and task, those of the one log with the
    most valid records of it (one cost scale), the fastest record of each config; provenance,
    errors and times left out, the measuring machine kept, each cost in seconds (times its
    task's `seconds_per_cost` in its log: a database built from databases keeps their costs).
    Sorted by target, task, template, cost."""
    chosen: dict[tuple[str, str], tuple[int, dict[tuple[str, str], TuningRecord]]] = {}
    for source, log in enumerate(records):
        mine: dict[tuple[str, str], dict[tuple[str, str], TuningRecord]] = defaultdict(dict)
        paired: dict[tuple[str, str], list[TuningRecord]] = defaultdict(list)
        for r in log:
            template = known_template(r.template)
            if not r.valid or r.target is None or template is None:
                continue
            paired[(r.target, r.task)].append(r)
            configs = mine[(r.target, r.task)]
            key = (template, r.key)
            if key not in configs or r.cost_s < configs[key].cost_s:
                configs[key] = TuningRecord(r.task, template, dict(r.config), float(r.cost_s),
                                            target=r.target, machine=r.machine)
        for task, configs in mine.items():
            if task not in chosen or len(configs) > len(chosen[task][1]):
                unit = seconds_per_cost(paired[task])
                chosen[task] = (source, {k: replace(r, cost_s=r.cost_s * unit)
                                         for k, r in configs.items()})
    out = [r for _, configs in chosen.values() for r in configs.values()]
    return sorted(out, key=lambda r: (r.target, r.task, r.template, r.cost_s))


def write_database(records: Iterable[TuningRecord], path: "str | os.PathLike") -> dict:
    """Write `records` (each with a target and a cost) as a database; returns its header.
    The file is written whole to a temporary name first and then renamed over `path`."""
    rows = [r for r in records if r.target is not None and r.valid]
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[r.target] += 1
    header = {"format": FORMAT, "version": VERSION, "records": len(rows),
              "targets": dict(sorted(counts.items()))}
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    # no name, mtime 0: the same records give the same bytes
    with open(tmp, "wb") as file, \
            gzip.GzipFile("", "wb", compresslevel=9, fileobj=file, mtime=0) as raw, \
            io.TextIOWrapper(raw, encoding="utf-8") as f:
        f.write(json.dumps(header, sort_keys=True) + "\n")
        for r in rows:
            row = {"target": r.target, "task": r.task, "template": r.template,
                   "config": dict(r.config), "cost_s": r.cost_s}
            if r.machine:
                row["machine"] = r.machine
            f.write(json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n")
    os.replace(tmp, path)
    return header
