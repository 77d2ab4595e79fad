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


def test_a_budget_bar_labels_the_time_elapsed_and_the_time_left():
    """Issue 76: the bar printed the elapsed time followed by "left". In seconds it says
    "elapsed," after the time elapsed and the total less what is done before "left"; its
    percentage is what is done."""
    import re

    out = Terminal()
    with Progress("tuning", 30, out, unit="s") as bar:
        bar.update(12, "task 3/18 done")
        bar._bar.refresh()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert re.search(r"40% \d:\d\d:\d\d elapsed, 0:00:18 left task 3/18 done", text)
    assert "0:00:00 left" not in text
