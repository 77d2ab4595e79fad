"""The shipped tuning database as an indexed store: a compile reads the records of its own tasks
and a bounded sample of the rest, never the whole file (issue 76: parsing the packaged
database's 88,828 lines took 2.7 s of every compile's budget here, 12.6 s on a user's 2-vCPU
machine; measured in config.py, next to `PRETRAIN_RECORDS_PER_S`).

Contract: a `RecordIndex` answers what a tuning log asks of a database (tune/records.py,
`TuningLog.attach`) —
- `of_task(task)`: every record of one task, every target, in the file's order;
- `bests(kind)`: per (target, task, template) of one task kind, the least cost (the template
  votes, tune/tuner.template_weights);
- `sample(n, seed, template=…, same=…, except_task=…)`: a seeded sample of `n` records of (or
  not of) a template, leaving out one task (the searchers' transfer records);
- `groups(n, seed)`: whole (target, task) ranking groups, seeded order, up to `n` records (the
  pre-trained cost model's sample, tune/pretrained.py);
- `all()`, `len()`, `targets` (records per target), `task_count(target)`, `digest` (of the
  records: the cache key of what is derived from them) and `source`.
`MemoryIndex` holds records given in memory (a test's, `load_database`'s); `SqliteIndex` is a
database file's index, built once per file digest into the Woodpecker cache
(`tuning-db-<digest>.sqlite`, `index_for`) with the standard library's sqlite3 and read-only
from then on. Building parses and checks the file once as `load_database` does; a cache that
cannot be written leaves the caller to parse the file in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import threading
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from woodpecker.tune.records import TuningRecord

INDEX_VERSION = 1     # the sqlite layout; a new one builds a new file
_COLUMNS = "r.target, t.key, r.template, r.config, r.cost_s, r.machine"
_FROM = "records r JOIN tasks t ON t.id = r.task"


def _kind(task: str) -> str:
    return task.split(":", 1)[0]


def _rows_digest(records: Iterable[TuningRecord]) -> str:
    h = hashlib.sha256()
    for r in records:
        h.update(f"{r.target}|{r.task}|{r.template}|{r.key}|{r.cost_s!r}\n".encode())
    return h.hexdigest()[:20]


class MemoryIndex:
    """Records held in memory, answered as an index."""

    def __init__(self, records: Iterable[TuningRecord] = (), source: str = "",
                 digest: str | None = None) -> None:
        """`digest`: the records' (default: hashed from them), e.g. the file's they came
        from."""
        self.records = tuple(records)
        self.source = source
        self._by_task: dict[str, list[TuningRecord]] = defaultdict(list)
        self.targets: dict[str, int] = defaultdict(int)
        for r in self.records:
            self._by_task[r.task].append(r)
            if r.target is not None:
                self.targets[r.target] += 1
        self.targets = dict(self.targets)
        self._digest = digest

    def __len__(self) -> int:
        return len(self.records)

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = _rows_digest(self.records)
        return self._digest

    def all(self) -> list[TuningRecord]:
        return list(self.records)

    def of_task(self, task: str) -> list[TuningRecord]:
        return list(self._by_task.get(task, ()))

    def task_count(self, target: str) -> int:
        return sum(any(r.target == target for r in rs) for rs in self._by_task.values())

    def bests(self, kind: str) -> list[tuple[str | None, str, str, float]]:
        best: dict[tuple, float] = {}
        for r in self.records:
            if r.cost_s and _kind(r.task) == kind:
                k = (r.target, r.task, r.template)
                best[k] = min(r.cost_s, best.get(k, r.cost_s))
        return [(*k, c) for k, c in best.items()]

    def sample(self, n: int, seed: int, *, template: str, same: bool,
               except_task: str | None = None) -> list[TuningRecord]:
        pool = [r for r in self.records
                if (r.template == template) == same and r.task != except_task]
        return random.Random(seed).sample(pool, n) if len(pool) > n else pool

    def groups(self, n: int, seed: int) -> list[TuningRecord]:
        by: dict[tuple, list[TuningRecord]] = defaultdict(list)
        for r in self.records:
            by[(r.target, r.task)].append(r)
        return _take_groups(list(by.values()), n, seed)


def _take_groups(groups: list[list[TuningRecord]], n: int, seed: int) -> list[TuningRecord]:
    random.Random(seed).shuffle(groups)
    out: list[TuningRecord] = []
    for g in groups:
        if len(out) >= n:
            break
        out += g
    return out


class SqliteIndex:
    """A database file's index in sqlite (read-only once built)."""

    def __init__(self, path: Path, source: str) -> None:
        self.path, self.source = path, source
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        meta = dict(self._query("SELECT key, value FROM meta"))
        self.digest = meta["digest"]
        self.targets: dict[str, int] = json.loads(meta["targets"])
        self._len = int(meta["records"])

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    @staticmethod
    def _record(row: tuple) -> TuningRecord:
        target, task, template, config, cost, machine = row
        return TuningRecord(task, template, json.loads(config), cost, target=target,
                            machine=machine)

    def __len__(self) -> int:
        return self._len

    def all(self) -> list[TuningRecord]:
        return [self._record(r) for r in self._query(f"SELECT {_COLUMNS} FROM {_FROM} "
                                                     "ORDER BY r.id")]

    def of_task(self, task: str) -> list[TuningRecord]:
        return [self._record(r) for r in self._query(
            f"SELECT {_COLUMNS} FROM {_FROM} WHERE t.key = ? ORDER BY r.id", (task,))]

    def task_count(self, target: str) -> int:
        return self._query("SELECT COUNT(DISTINCT task) FROM records WHERE target = ?",
                           (target,))[0][0]

    def bests(self, kind: str) -> list[tuple[str | None, str, str, float]]:
        return self._query("SELECT r.target, t.key, r.template, MIN(r.cost_s) FROM "
                           f"{_FROM} WHERE t.kind = ? GROUP BY r.target, r.task, r.template",
                           (kind,))

    def _rows(self, ids: list[int]) -> list[TuningRecord]:
        out: list[TuningRecord] = []
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            out += [self._record(r) for r in self._query(
                f"SELECT {_COLUMNS} FROM {_FROM} WHERE r.id IN "
                f"({','.join('?' * len(chunk))}) ORDER BY r.id", tuple(chunk))]
        return out

    def sample(self, n: int, seed: int, *, template: str, same: bool,
               except_task: str | None = None) -> list[TuningRecord]:
        op = "=" if same else "!="
        ids = [i for (i,) in self._query(
            f"SELECT r.id FROM {_FROM} WHERE r.template {op} ? AND t.key != ? ORDER BY r.id",
            (template, except_task or ""))]
        if len(ids) > n:
            ids = sorted(random.Random(seed).sample(ids, n))
        return self._rows(ids)

    def groups(self, n: int, seed: int) -> list[TuningRecord]:
        sizes = self._query("SELECT target, task, COUNT(*) FROM records GROUP BY target, task "
                            "ORDER BY target, task")
        keys = [(t, k) for t, k, _ in sizes]
        random.Random(seed).shuffle(keys)
        chosen, total = [], 0
        count = {(t, k): c for t, k, c in sizes}
        for key in keys:
            if total >= n:
                break
            chosen.append(key)
            total += count[key]
        out: list[TuningRecord] = []
        for target, task in chosen:
            out += [self._record(r) for r in self._query(
                f"SELECT {_COLUMNS} FROM {_FROM} WHERE r.task = ? AND r.target = ? "
                "ORDER BY r.id", (task, target))]
        return out


RecordIndex = MemoryIndex | SqliteIndex


def file_digest(path: "str | os.PathLike") -> str:
    """The sha256 of a database file's bytes (20 hex digits): its index's name."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:20]


def build_index(records: list[TuningRecord], path: Path, digest: str) -> None:
    """Write `records`' index at `path` (through a temporary file renamed over it, so a
    reader never sees half of one; two processes building it at once both write whole
    files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    try:
        targets: dict[str, int] = defaultdict(int)
        for r in records:
            targets[r.target] += 1
        db.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
            "CREATE TABLE tasks (id INTEGER PRIMARY KEY, key TEXT UNIQUE, kind TEXT);"
            "CREATE TABLE records (id INTEGER PRIMARY KEY, target TEXT, task INTEGER,"
            " template TEXT, config TEXT, cost_s REAL, machine TEXT);")
        tasks: dict[str, int] = {}
        for r in records:
            tasks.setdefault(r.task, len(tasks) + 1)
        db.executemany("INSERT INTO tasks VALUES (?, ?, ?)",
                       ((i, k, _kind(k)) for k, i in tasks.items()))
        db.executemany("INSERT INTO records (target, task, template, config, cost_s, machine)"
                       " VALUES (?, ?, ?, ?, ?, ?)",
                       ((r.target, tasks[r.task], r.template,
                         json.dumps(dict(r.config), sort_keys=True, separators=(",", ":")),
                         r.cost_s, r.machine) for r in records))
        db.executescript("CREATE INDEX by_task ON records (task, target);"
                         "CREATE INDEX by_kind ON tasks (kind);"
                         "CREATE INDEX by_template ON records (template);")
        db.executemany("INSERT INTO meta VALUES (?, ?)",
                       [("digest", digest), ("records", str(len(records))),
                        ("targets", json.dumps(dict(sorted(targets.items())))),
                        ("version", str(INDEX_VERSION))])
        db.commit()
    finally:
        db.close()
    os.replace(tmp, path)


def index_path(where: Path, digest: str) -> Path:
    return where / f"tuning-db-{digest}-v{INDEX_VERSION}.sqlite"


def open_index(path: Path, source: str) -> SqliteIndex | None:
    """The index at `path`, or None where there is none (or it cannot be read)."""
    if not path.exists():
        return None
    try:
        return SqliteIndex(path, source)
    except (sqlite3.Error, KeyError, ValueError, OSError):
        return None
