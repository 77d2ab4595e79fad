"""The tuning log: append-only JSON lines, one record per measured candidate, reused across
models and runs (Woodpecker-DL's caching of search results).

Each record is written with one `write` of a whole line, flushed and fsynced, so a kill at any
moment loses at most the line being written. A torn last line is skipped when reading, and the
next append starts on a fresh line so it never glues onto the fragment.

Records are keyed by target: a log opened for a target (`Target.record_key`: architecture,
vector extensions, thread count) stamps every record it appends with it — and with the host's
microarchitecture, which the key does not tell (a Zen 4 and a Zen 5 share one) — and leaves out
the records measured for another (a shared log moved between machines, or tuned at another thread
count): they are never taken as this machine's best, and their configs are measured again.
Records without a target (logs written before records carried one) are taken as they are.

A record is a frozen `TuningRecord`: the task, the template (its short identity,
engines/halide/templates.py; an older log's module path is mapped on read), the configuration
and the measurement; the fields a log line has beyond those (who searched, with what seed and
versions) ride along in `provenance` and are written back as they were read. The line format is
the one logs have always had: `TuningRecord.from_json` and `to_json` are its only readers and
writers.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import statistics
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from woodpecker.engines.halide.templates import known_template
from woodpecker.errors import WoodpeckerError
from woodpecker.target import host_machine
from woodpecker.tasks.space import KnobSpace

NUMBERS = ("cost_s", "compile_s", "gflops", "run_s", "vs_best")
SOURCE, DATABASE = "source", "database"     # the provenance mark of a database's records


@dataclass(frozen=True, slots=True)
class TuningRecord:
    """One measured candidate: `cost_s` its time (None: invalid, `error` says why); `run_s` and
    `vs_best` when it was timed paired with the task's best (`cost_s` is then on that record's
    scale); `target` the `Target.record_key` it was measured for and `machine` the
    microarchitecture of the host that measured it (`woodpecker.target.host_machine`: a Zen 4
    and a Zen 5 share one target key); None for logs written before records carried them.
    `config` is the candidate's knob values; never mutate it."""

    task: str
    template: str
    config: Mapping[str, Any]
    cost_s: float | None = None
    error: str | None = None
    compile_s: float | None = None
    gflops: float | None = None
    run_s: float | None = None
    vs_best: float | None = None
    target: str | None = None
    machine: str | None = None
    time: str | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict)   # searcher, seed, versions…

    @property
    def valid(self) -> bool:
        """Measured and correct: it has a cost."""
        return bool(self.cost_s)

    @property
    def from_database(self) -> bool:
        """A shipped tuning database's record (tune/database.py), not the user's."""
        return self.provenance.get(SOURCE) == DATABASE

    @property
    def key(self) -> str:
        """Its configuration's key (`KnobSpace.key`)."""
        return KnobSpace.key(self.config)

    @property
    def scale(self) -> tuple[str | None, str]:
        """The records whose costs share one scale with this one: the user's of its task, or
        a database's of its target and task (tune/database.py)."""
        return (self.target if self.from_database else None, self.task)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TuningRecord":
        """A log line's record; raises KeyError/TypeError/ValueError when it is not one (a
        cost that is not a positive finite number or None, say: a tampered line)."""
        own = {f.name for f in fields(cls)} - {"provenance"}
        if not isinstance(d["config"], Mapping):
            raise TypeError("a record's config is an object")
        for name in NUMBERS:
            v = d.get(name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not math.isfinite(v) or (name == "cost_s" and v <= 0)):
                raise ValueError(f"a record's {name} is a number (cost: positive)")
        for name in ("target", "machine", "error", "time"):
            if not isinstance(d.get(name), (str, type(None))):
                raise TypeError(f"a record's {name} is text")
        return cls(**{k: v for k, v in d.items() if k in own - {"task", "template", "config"}},
                   config=dict(d["config"]), task=str(d["task"]), template=str(d["template"]),
                   provenance={k: v for k, v in d.items() if k not in own})

    def to_json(self) -> dict[str, Any]:
        """The record as a log line's object: `cost_s` and `error` always (None where
        unset), the other fields where set, provenance flattened in."""
        d = {f.name: v for f in fields(self)
             if f.name != "provenance" and (v := getattr(self, f.name)) is not None}
        return {**self.provenance, **d, "config": dict(self.config), "cost_s": self.cost_s,
                "error": self.error}


def seconds_per_cost(records: Iterable[TuningRecord]) -> float:
    """How many seconds one unit of cost is, for records of one task on one scale: the
    median, over those timed paired (`run_s`: the record's own time in its pairing), of
    `run_s / cost_s`; 1.0 where none was. A task's scale starts at its first record, timed
    alone — one timing, which on these 2-core machines lands far from the kernel's usual
    time (Zen 3, 3-minute tunes of four models: the first record's lone time over its time
    when next timed paired, per task, median 0.99-1.07 but from 0.40 to 2.53); the paired
    timings of a whole tune average that out. Rankings within a task never need it; what
    compares a task's costs with other tasks' or a library's time does (`TuningLog.seconds`,
    the database's costs)."""
    ratios = [r.run_s / r.cost_s for r in records if r.valid and r.run_s and r.cost_s]
    return statistics.median(ratios) if ratios else 1.0


def _by_rank(records: list[TuningRecord]) -> list[TuningRecord]:
    """Records of one task from several targets (or machines), each target's fastest first
    and the targets in turn — its first, then its second, … —, the target with most records
    first: costs measured on different machines are never compared."""
    groups: dict[tuple, list[TuningRecord]] = {}
    for r in records:
        groups.setdefault((r.target, r.machine), []).append(r)
    ordered = sorted(groups.values(), key=lambda g: -len(g))
    for g in ordered:
        g.sort(key=lambda r: r.cost_s)
    return [g[i] for i in range(max(map(len, ordered), default=0)) for g in ordered
            if i < len(g)]


class TuningLog:
    def __init__(self, path: "str | os.PathLike", target: str | None = None,
                 exclude: Collection[str] = ()) -> None:
        """`target`: the `Target.record_key` the log is read and written for (None: every
        record, none stamped). `exclude`: templates whose records are left out (and which
        are not tuned: a memory plan's, engines/halide/templates.weight_expanding)."""
        self.path = Path(path)
        self.target = target
        self.exclude = frozenset(exclude)
        self.foreign = 0   # records measured for another target, left out
        self.excluded = 0  # records of excluded templates, left out
        self.unknown = 0   # records of templates this Woodpecker does not have (kept, inert)
        self.records: list[TuningRecord] = []
        # task key -> its fastest valid record (first on ties)
        self._best: dict[str, TuningRecord] = {}
        self._first: dict[str, TuningRecord] = {}   # task key -> its first valid record
        self.skipped_lines = 0
        # What searchers compute from these records and share within a compile (the records'
        # feature rows), by their owner's key; it goes with the log.
        self.derived: dict = {}
        # a shipped database (tune/database.py, `attach`): its index, asked per task — its
        # records of this log's target by task, cached here, and of other targets
        # (`shipped_configs`' fallback) —; never written to the log's file
        self.database = None
        self._shipped: dict[str, list[TuningRecord]] = {}
        self._elsewhere: dict[str, list[TuningRecord]] = {}
        if self.path.exists():
            self._read()

    def _read(self) -> None:
        # a gzip-compressed log (a committed result's, `.jsonl.gz`) reads the same, read-only
        opener = gzip.open if self.path.suffix == ".gz" else open
        with opener(self.path, "rt", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    rec = TuningRecord.from_json(json.loads(line))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    self.skipped_lines += 1
                    continue
                self._add(rec)

    @staticmethod
    def line(record: TuningRecord) -> str:
        """A record as the log's line (JSON, keys sorted)."""
        return json.dumps(record.to_json(), sort_keys=True) + "\n"

    def append(self, record: TuningRecord) -> None:
        """Write `record` (stamped with the time and, for a log opened for a target, that
        target and this host's microarchitecture unless it has them) as one line, then take
        it in."""
        if not isinstance(record, TuningRecord):
            raise TypeError(f"a tuning log takes TuningRecord, not {type(record).__name__}")
        if self.path.suffix == ".gz":
            raise WoodpeckerError(f"{self.path} is a compressed log, read-only: gunzip it to "
                                  "append to it")
        stamp = record.target is None and self.target is not None
        record = replace(record, time=record.time or time.strftime("%Y-%m-%dT%H:%M:%S"),
                         target=self.target if stamp else record.target,
                         machine=host_machine() if stamp and not record.machine
                         else record.machine)
        line = self.line(record)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    line = "\n" + line
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())
        self._add(record)

    def _add(self, record: TuningRecord) -> None:
        if self.target is not None and record.target not in (None, self.target):
            self.foreign += 1
            return
        template = known_template(record.template)
        if template is None:      # a template this Woodpecker does not have: kept, never built
            self.unknown += 1
            template = record.template
        elif template != record.template:   # an older log's module path
            record = replace(record, template=template)
        if template in self.exclude:
            self.excluded += 1
            return
        self.records.append(record)
        best = self._best.get(record.task)
        if record.valid and (best is None or record.cost_s < best.cost_s):
            self._best[record.task] = record
        if record.valid:
            self._first.setdefault(record.task, record)

    def attach(self, database) -> None:
        """Take a shipped database (tune/database.py): its index (tune/db_index.py), or its
        records as an iterable. Its records are marked as its (`TuningRecord.from_database`):
        those of this log's target (by task) speak for a task the user's log holds no usable
        record of; all of them, any target, are transfer knowledge. Records of excluded or
        unknown templates are left out; a module-path template reads as its identity. The
        index is asked per task when a task is first asked about, never read whole."""
        from woodpecker.tune.db_index import MemoryIndex

        if not hasattr(database, "of_task"):
            database = MemoryIndex(database)
        if self.database is not None and len(self.database):   # a second one joins the first
            database = MemoryIndex(self.database.all() + database.all())
        self.database = database
        self._shipped.clear()
        self._elsewhere.clear()

    def marked(self, records: Iterable[TuningRecord]) -> list[TuningRecord]:
        """A database's records as this log takes them: known, not excluded, templates by
        their identity, marked as the database's."""
        out = []
        for r in records:
            template = known_template(r.template)
            if template is not None and template not in self.exclude:
                out.append(replace(r, template=template, provenance={SOURCE: DATABASE}))
        return out

    def _load(self, task_key: str) -> None:
        recs = self.marked(self.database.of_task(task_key)) if self.database else []
        mine = [self.target is not None and r.target == self.target for r in recs]
        self._shipped[task_key] = sorted((r for r, m in zip(recs, mine) if m and r.valid),
                                         key=lambda r: r.cost_s)
        self._elsewhere[task_key] = _by_rank([r for r, m in zip(recs, mine)
                                              if not m and r.valid])

    def shipped(self, task_key: str) -> list[TuningRecord]:
        """The database's valid records of a task on this log's target, fastest first."""
        if task_key not in self._shipped:
            self._load(task_key)
        return self._shipped[task_key]

    def elsewhere(self, task_key: str) -> list[TuningRecord]:
        """The database's valid records of a task on other targets (`_by_rank`)."""
        if task_key not in self._elsewhere:
            self._load(task_key)
        return self._elsewhere[task_key]

    @property
    def transfer(self) -> list[TuningRecord]:
        """Every database record, this target's first (reads the whole index: distributed
        tuning's workers and tests; a compile asks per task)."""
        if self.database is None:
            return []
        recs = self.marked(self.database.all())
        here = [r for r in recs if self.target is not None and r.target == self.target]
        return here + [r for r in recs if self.target is None or r.target != self.target]

    def user_has(self, task_key: str) -> bool:
        """Whether the user's log holds a valid record of the task."""
        return task_key in self._best

    def own_best(self, task_key: str) -> TuningRecord | None:
        """The user's fastest valid record of a task (the database's never)."""
        return self._best.get(task_key)

    def own_first(self, task_key: str) -> TuningRecord | None:
        """The user's first valid record of a task: timed alone (nothing of the user's to
        pair it with), its cost is its own time — the anchor of the task's scale."""
        return self._first.get(task_key)

    def task_records(self, task_key: str, usable=None) -> list[TuningRecord]:
        """The records that speak for a task: the user's, or — while the user's log holds no
        valid record of it that `usable` (when given) accepts — the shipped database's of
        this target."""
        mine = [r for r in self.records if r.task == task_key]
        if not self.shipped(task_key) or any(r.valid and (usable is None or usable(r))
                                             for r in mine):
            return mine
        return list(self.shipped(task_key))

    def shipped_configs(self, task_key: str, template: str, n: int) -> list[dict]:
        """The `n` fastest shipped configs of a task and template (tuning measures them first
        for a task the user's log had nothing of when its tuning began): the database's records
        of this target; where it holds none of the task and template, its records of other
        targets, best first within each target and the targets taken in turn (their costs are
        other machines': only their order within a target means anything here). The caller
        fits the latter to this target's constraints (`KnobSpace.nearest_valid`)."""
        own = [dict(r.config) for r in self.shipped(task_key) if r.template == template]
        if own:
            return own[:n]
        return [dict(r.config) for r in self.elsewhere(task_key) if r.template == template][:n]

    def seconds(self, record: TuningRecord) -> float:
        """A valid record's cost in seconds of this machine's time: a user's record's cost
        times its task's `seconds_per_cost`; a database record's cost as it is (the database
        writes its costs in seconds, `database_records`)."""
        if record.from_database:
            return record.cost_s
        return record.cost_s * seconds_per_cost(r for r in self.records if r.task == record.task)

    def knowledge(self, except_task: str | None = None) -> list[TuningRecord]:
        """Every record a searcher may learn from: the user's (but those of `except_task`),
        then the shipped database's of this target, then those of other targets (the whole
        database: `template_bests` and `transfer_sample` ask its index for what they need)."""
        return [r for r in self.records if r.task != except_task] + self.transfer

    def template_bests(self, task_key: str, templates: Collection[str],
                       ) -> dict[tuple[str | None, str], dict[str, float]]:
        """Per cost scale (`TuningRecord.scale`) of the tasks of `task_key`'s kind, the least
        cost of each of `templates` (the user's records but those of `task_key`, and the
        database's of every task of the kind): what `tuner.template_weights` counts votes
        from."""
        kind = task_key.split(":", 1)[0]
        best: dict[tuple[str | None, str], dict[str, float]] = {}

        def take(scale, template, c):
            if c and template in templates:
                t = best.setdefault(scale, {})
                t[template] = min(c, t.get(template, c))
        for r in self.records:
            if r.task != task_key and r.task.split(":", 1)[0] == kind:
                take(r.scale, r.template, r.cost_s)
        for target, task, template, c in (self.database.bests(kind) if self.database else ()):
            template = known_template(template)
            if template is not None and template not in self.exclude:
                take((target, task), template, c)
        return best

    def transfer_sample(self, task_key: str, template: str, limit: int,
                        seed: int) -> list[TuningRecord]:
        """What a model-based searcher starts from (tune/searchers/model_based.py): the
        database's records of this task (this target's first), then the same template's of
        other tasks, then the rest — the user's and the database's, a seeded sample of each
        where more than fit — at most `limit`."""
        out = (self.shipped(task_key) + self.elsewhere(task_key))[:limit] \
            if self.database else []
        rng = random.Random(seed)
        for same in (True, False):
            room = limit - len(out)
            if room <= 0:
                break
            pool = [r for r in self.records
                    if r.task != task_key and (r.template == template) == same]
            if self.database:
                pool += self.marked(self.database.sample(room, seed, template=template,
                                                         same=same, except_task=task_key))
            out += rng.sample(pool, room) if len(pool) > room else pool
        return out

    def measured(self, task_key: str, template: str) -> dict[str, TuningRecord]:
        """Records of one task and template, by configuration key (latest wins)."""
        return {r.key: r for r in self.records
                if r.task == task_key and r.template == template}

    def best(self, task_key: str, usable=None) -> TuningRecord | None:
        """The fastest valid record of a task among `task_records` (the user's; the shipped
        database's while the user has none); `usable(record)`, when given, also has to hold
        (e.g. the config fits its template's current knobs). Without `usable` the user's best
        is kept up to date as records come in: tuning asks for it per candidate."""
        if usable is None:
            found = self._best.get(task_key)
            if found is not None or self.database is None:
                return found
            shipped = self.shipped(task_key)
            return shipped[0] if shipped else None
        valid = [r for r in self.task_records(task_key, usable) if r.valid and usable(r)]
        return min(valid, key=lambda r: r.cost_s) if valid else None
