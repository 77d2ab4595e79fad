"""Regenerate the shipped tuning database (woodpecker/tune/tuning_db.jsonl.gz) from tuning logs.

    python benchmarks/tuning_database.py LOG.jsonl[@MACHINE] [LOG.jsonl ...] [--keep-existing]
        [--drop-target KEY] [--drop-machine NAME] [-o woodpecker/tune/tuning_db.jsonl.gz]

Each log is read whole (every target); a record joins the database when it is valid, carries
its target (logs written before records did are left out: their machine is unknown), its
template is one this Woodpecker has, its task key parses and its config is in the template's
current knob space for that target's vector registers. Per target and task the records of the
one log with the most valid records of it are kept (tune/database.database_records: one cost
scale per task). `--keep-existing` adds the current database as one more source, so records
of machines this session cannot reach are kept; `woodpecker tune --export-db` files from users
are sources like logs; `--drop-target KEY` leaves a target's records out (a database for a
machine it knows nothing of). Records carry the microarchitecture that measured them (a Zen 4
and a Zen 5 share one target key); `LOG@MACHINE` names it for a source's records written
before they did ("logs/t.jsonl@Zen 5"), and `--drop-machine NAME` leaves that machine's
records out — the held-out database for a machine whose key the database also holds (give
it the sources, not a database built from them: there a task's other records already gave way
to that machine's, and dropping them leaves the task empty). Prints
what it kept per target and machine, and the file's size.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from woodpecker.engines.halide.host import host_vector_registers  # noqa: E402
from woodpecker.engines.halide.templates import template_module  # noqa: E402
from woodpecker.tasks import task_from_key  # noqa: E402
from woodpecker.tune.database import (  # noqa: E402
    PACKAGED,
    database_records,
    load_database,
    write_database,
)
from woodpecker.tune.records import TuningLog, TuningRecord  # noqa: E402

LIMIT_BYTES = 20 * 2**20    # the bound on what ships


def _buildable(records: list[TuningRecord]) -> tuple[list[TuningRecord], Counter]:
    """The records whose task parses and whose config its template builds today."""
    spaces: dict[tuple[str, str, int], object] = {}
    dropped: Counter = Counter()
    out = []
    for r in records:
        regs = host_vector_registers(tuple(r.target.split(":")[1].split(",")))
        key = (r.task, r.template, regs)
        if key not in spaces:
            try:
                spaces[key] = template_module(r.template).space(task_from_key(r.task), regs)
            except Exception:  # noqa: BLE001 - an older task format or a template's refusal
                spaces[key] = None
        space = spaces[key]
        if space is None:
            dropped["task or template no longer built"] += 1
        elif not space.in_domain(r.config):
            dropped["config outside the template's knobs"] += 1
        else:
            out.append(r)
    return out, dropped


def _source(arg: str) -> list[TuningRecord]:
    """The records of one source argument, `PATH` or `PATH@MACHINE` (the machine of its
    records that do not name theirs)."""
    path, at, machine = arg.rpartition("@")
    if not at or Path(arg).exists():
        path, machine = arg, ""
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"     # a database (or an --export-db file)
    records = list(load_database(path).records) if gzipped else TuningLog(path).records
    if machine:
        records = [r if r.machine else replace(r, machine=machine) for r in records]
    return records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("logs", nargs="*", help="tuning logs (JSON lines) or database files, each "
                   "PATH or PATH@MACHINE (the machine of its records that do not name theirs)")
    p.add_argument("-o", "--output", default=str(PACKAGED))
    p.add_argument("--keep-existing", action="store_true",
                   help="the current database at --output is one more source")
    p.add_argument("--drop-target", action="append", default=[], metavar="KEY",
                   help="leave out the records of this target (Target.record_key): a database "
                        "for showing what it does on a machine whose records it lacks")
    p.add_argument("--drop-machine", action="append", default=[], metavar="NAME",
                   help="leave out the records this microarchitecture measured ('Zen 5')")
    args = p.parse_args(argv)
    sources: list[list[TuningRecord]] = []
    if args.keep_existing and Path(args.output).exists():
        sources.append(list(load_database(args.output).records))
    sources += [_source(arg) for arg in args.logs]
    # left out before each task's source log is chosen: the database as if those machines'
    # logs had never been given
    sources = [[r for r in log if r.target not in args.drop_target
                and r.machine not in args.drop_machine] for log in sources]
    kept, dropped = _buildable(database_records(sources))
    header = write_database(kept, args.output)
    size = Path(args.output).stat().st_size
    records = Counter((r.target, r.machine or "machine unknown") for r in kept)
    tasks = Counter((r.target, r.machine or "machine unknown")
                    for r in {(r.target, r.machine, r.task): r for r in kept}.values())
    print(f"wrote {args.output}: {header['records']} records, {size / 2**20:.2f} MiB "
          f"from {len(sources)} source(s)")
    for (target, machine), n in sorted(records.items()):
        print(f"  {target} ({machine}): {n} records of {tasks[(target, machine)]} tasks")
    for why, n in dropped.items():
        print(f"  left out: {n} ({why})")
    if size > LIMIT_BYTES:
        print(f"error: {size / 2**20:.1f} MiB is over the {LIMIT_BYTES // 2**20} MiB that "
              "may ship", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
