"""Prints the fuzzer's counts at the end of the test session."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    from tests.fuzz.test_fuzz import COUNTS

    for what, counts in COUNTS.items():
        if counts:
            total = sum(counts.values())
            parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            terminalreporter.write_line(f"fuzz {what}: {total} clean cases: {parts}")
