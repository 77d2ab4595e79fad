"""Progress output: plain lines at most every interval (and one at the end) where the output is
not a terminal, never carriage-return fragments; a rich bar on a terminal, notes kept."""

from __future__ import annotations

import io

from woodpecker.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    with Progress("tuning", 100, out, unit="s", interval_s=3600) as bar:
        for t in range(1, 60):
            bar.update(t, f"task {t}")
        bar.note("task 1/2 conv: best 40.0 GFLOP/s")
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    # the first update, the note, the last state at the end: nothing in between
    assert lines == ["tuning: 1s/100s, task 1", "task 1/2 conv: best 40.0 GFLOP/s",
                     "tuning: 59s/100s, task 59"]
    every = io.StringIO()
    with Progress("bench", 4, every, interval_s=0) as bar:
        for r in range(1, 5):
            bar.update(r)
    assert every.getvalue().splitlines()[:4] == [f"bench: {r}/4" for r in range(1, 5)]


def test_bar_on_a_terminal_keeps_notes():
    out = Terminal()
    with Progress("tuning", 10, out, unit="s") as bar:
        bar.update(5, "task 1/1")
        bar.note("task 1/1 conv: best 12.5 GFLOP/s")
    text = out.getvalue()
    assert "task 1/1 conv: best 12.5 GFLOP/s" in text
    assert "tuning: 5s/10s" not in text          # the bar, not plain lines
