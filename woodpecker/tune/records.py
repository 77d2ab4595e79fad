"""The tuning log: append-only JSON lines, one record per measured candidate, reused across
models and runs (Woodpecker-DL's caching of search results).

Each record is written with one `write` of a whole line, flushed and fsynced, so a kill at any
moment loses at most the line being written. A torn last line is skipped when reading, and the
next append starts on a fresh line so it never glues onto the fragment.

Records are keyed by target: a log opened for a target (`Target.record_key`: architecture,
vector extensions, thread count) stamps every record it appends with it and leaves out the
records measured for another (a shared log moved between machines, or tuned at another thread
count): they are never taken as this machine's best, and their configs are measured again.
Records without a target (logs written before records carried one) are taken as they are.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection
from pathlib import Path

from woodpecker.engines.halide.templates import known_template
from woodpecker.tasks.space import KnobSpace


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
        self.records: list[dict] = []
        self._best: dict[str, dict] = {}   # task key -> its fastest valid record (first on ties)
        self.skipped_lines = 0
        # What searchers compute from these records and share within a compile (the records'
        # feature rows), by their owner's key; it goes with the log.
        self.derived: dict = {}
        if self.path.exists():
            self._read()

    def _read(self) -> None:
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    self.skipped_lines += 1
                    continue
                if isinstance(rec, dict) and {"task", "template", "config"} <= rec.keys():
                    self._add(rec)
                else:
                    self.skipped_lines += 1

    @staticmethod
    def line(record: dict) -> str:
        """A record as the log's line (JSON, keys sorted)."""
        return json.dumps(record, sort_keys=True) + "\n"

    def append(self, record: dict) -> None:
        record = dict(record, time=record.get("time") or time.strftime("%Y-%m-%dT%H:%M:%S"))
        if self.target is not None:
            record.setdefault("target", self.target)
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

    def _add(self, record: dict) -> None:
        if self.target is not None and record.get("target", self.target) != self.target:
            self.foreign += 1
            return
        template = known_template(str(record["template"]))
        if template is None:      # a template this Woodpecker does not have: kept, never built
            self.unknown += 1
            template = record["template"]
        elif template != record["template"]:   # an older log's module path
            record = {**record, "template": template}
        if template in self.exclude:
            self.excluded += 1
            return
        self.records.append(record)
        best = self._best.get(record["task"])
        if record.get("cost_s") and (best is None or record["cost_s"] < best["cost_s"]):
            self._best[record["task"]] = record

    def measured(self, task_key: str, template: str) -> dict[str, dict]:
        """Records of one task and template, by configuration key (latest wins)."""
        return {KnobSpace.key(r["config"]): r for r in self.records
                if r["task"] == task_key and r["template"] == template}

    def best(self, task_key: str, usable=None) -> dict | None:
        """The fastest valid record of a task over every template; `usable(record)`, when
        given, also has to hold (e.g. the config fits its template's current knobs). Without
        `usable` it is kept up to date as records come in: tuning asks for it per candidate."""
        if usable is None:
            return self._best.get(task_key)
        valid = [r for r in self.records if r["task"] == task_key and r.get("cost_s")
                 and usable(r)]
        return min(valid, key=lambda r: r["cost_s"]) if valid else None
