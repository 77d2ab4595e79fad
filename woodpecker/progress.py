"""Progress of long work (tuning, benchmarks): a rich progress bar where the output is a
terminal, plain lines elsewhere (a log file, CI) — one at most every
`config.PROGRESS_LINE_S` seconds and one at the end, never carriage-return fragments. The bar
says the time elapsed ("0:00:12 elapsed,") and, for a total in seconds (a budget), the seconds
of it left ("0:00:18 left": the total less what is done); its fraction is what `update` says
is done — tuning updates it at each measurement and each task's end (tune/driver.py).

    with Progress("tuning", total=180.0, out=sys.stderr, unit="s") as bar:
        bar.update(elapsed, "task 3/43, best 41.3 GFLOP/s")
        bar.note("task 3/43 conv 3x3 …: best 41.3 GFLOP/s")   # a line of its own, kept
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from woodpecker.config import PROGRESS_LINE_S


class Progress:
    """A bar from 0 to `total` (in `unit`) with a status text; `note` prints a line above it."""

    def __init__(self, description: str, total: float, out: TextIO | None = None,
                 unit: str = "", interval_s: float = PROGRESS_LINE_S) -> None:
        self.description, self.total, self.unit = description, max(float(total), 1e-9), unit
        self.out = out or sys.stderr
        self.interval_s = interval_s
        self.completed, self.status = 0.0, ""
        self._last_line = -float("inf")
        self._bar = None
        if _is_terminal(self.out):
            from rich.console import Console
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(*bar_columns(unit), console=Console(file=self.out),
                                     transient=True)
            self._task = self._bar.add_task(description, total=self.total, status="",
                                            left=_clock(self.total))
            self._bar.start()

    def update(self, completed: float, status: str = "") -> None:
        self.completed, self.status = min(float(completed), self.total), status
        if self._bar is not None:
            self._bar.update(self._task, completed=self.completed, status=status,
                             left=_clock(self.total - self.completed))
        elif time.monotonic() - self._last_line >= self.interval_s:
            self._line()

    def note(self, line: str) -> None:
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.out, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self.completed > 0:
            self._line()

    def _line(self) -> None:
        self._last_line = time.monotonic()
        u = self.unit
        done = f"{self.completed:.0f}{u}/{self.total:.0f}{u}"
        print(f"{self.description}: {done}" + (f", {self.status}" if self.status else ""),
              file=self.out, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def bar_columns(unit: str) -> list:
    """The bar's columns: description, bar, percentage, the time elapsed labelled "elapsed",
    and — for a bar in seconds (a budget) — the seconds of it left, labelled "left" (the
    total less what is done, not rich's estimate from the rate), then the status."""
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    left = TextColumn("{task.fields[left]} left") if unit == "s" else TimeRemainingColumn()
    return [TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(), TextColumn("elapsed,"),
            left, TextColumn("{task.fields[status]}")]


def _clock(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
