"""A compile's time limit, handed from stage to stage (`--budget` bounds the whole compile).

Contract: a `Deadline` is a point on `time.monotonic()`, or none (`Deadline.NONE`: no limit).
`left()` is the seconds to it (infinite without one), `passed()` says whether it has come, and
`share(f)` is the deadline a fraction `f` of the time left from now, which a stage takes for
itself so the stages after it keep the rest; `less(s)` ends `s` seconds sooner (time kept for a
last stage of known length). A stage given a deadline stops starting new work
once it has passed and keeps what it has measured so far (tune/driver.py,
bench/timing.time_interleaved, selection/); it never abandons work midway, so a compile can
overrun by at most the one step under way when its deadline came.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class Deadline:
    end: float | None = None   # time.monotonic() seconds; None: no limit

    NONE: ClassVar["Deadline"]

    @classmethod
    def after(cls, seconds: float | None) -> "Deadline":
        return cls(None if seconds is None else time.monotonic() + seconds)

    @property
    def bounded(self) -> bool:
        return self.end is not None

    def left(self) -> float:
        return math.inf if self.end is None else max(0.0, self.end - time.monotonic())

    def passed(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end

    def less(self, seconds: float) -> "Deadline":
        """The deadline `seconds` earlier: what a stage may use that must leave a later one
        `seconds` (no limit stays no limit)."""
        return self if self.end is None else Deadline(self.end - seconds)

    def share(self, fraction: float) -> "Deadline":
        """The deadline `fraction` (0-1) of the time left from now."""
        if self.end is None:
            return self
        now = time.monotonic()
        return Deadline(now + max(0.0, self.end - now) * fraction)


Deadline.NONE = Deadline()
