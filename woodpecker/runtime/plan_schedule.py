"""What decides how a plan runs besides its nodes and their choices: the schedule kind, whether
consecutive library nodes run as one region, where a memory plan's regions must begin (their
values all in the arena), and the parallel schedule's stages (DOS, runtime/stages.py).

Contract: `PlanSchedule` is frozen and typed; assembly writes it (assembly/), runtime reads it
(runtime/plan.Plan.steps, stages, every) and plan.json stores it under `schedule` (schema 5).
`plan.meta` is provenance — what the compile measured and why — and decides nothing.
Plans of schema 3 and 4 kept these in their metadata; `from_meta` reads them from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from woodpecker.errors import PlanError
from woodpecker.options import ScheduleKind


@dataclass(frozen=True)
class PlanSchedule:
    """`kind`; `library_regions`: consecutive library nodes run as one region
    (runtime/steps.py); `every`: the regions write every value they produce into the arena
    (a memory plan's), beginning at the nodes `region_starts` names, each holding at most
    `region_bytes` where that is set (a memory budget); `stages`: node names of each stage of
    the parallel schedule that runs at the same time."""

    kind: ScheduleKind = ScheduleKind.FILE
    library_regions: bool = False
    every: bool = False
    region_starts: tuple[str, ...] = ()
    region_bytes: int | None = None
    stages: tuple[tuple[str, ...], ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "library_regions": self.library_regions,
                "every": self.every, "region_starts": list(self.region_starts),
                "region_bytes": self.region_bytes,
                "stages": [list(stage) for stage in self.stages]}

    @classmethod
    def from_json(cls, d: Any) -> "PlanSchedule":
        """plan.json's `schedule`; a one-line PlanError where it is not one."""
        try:
            if not isinstance(d, dict):
                raise TypeError("not an object")
            kind = ScheduleKind(d["kind"])
            flags = [d["library_regions"], d["every"]]
            if not all(isinstance(f, bool) for f in flags):
                raise TypeError("a flag is not true or false")
            starts = _names(d["region_starts"])
            stages = tuple(_names(stage) for stage in _list(d["stages"]))
            limit = d["region_bytes"]
            if limit is not None and (type(limit) is not int or limit <= 0):
                raise TypeError(f"region_bytes {limit!r}")
        except (KeyError, TypeError, ValueError) as e:
            raise PlanError(f"plan.json: the schedule is corrupt ({type(e).__name__}: {e})") \
                from None
        return cls(kind, flags[0], flags[1], starts, limit, stages)

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> "PlanSchedule":
        """The schedule of a plan saved before schema 5, from its metadata: `schedule.kind`
        (and `region_bytes`), `library_regions`, `arena_regions.starts` and the kept stages of
        `parallel`."""
        sched = meta.get("schedule") or {}
        parallel = meta.get("parallel") or {}
        regions = meta.get("arena_regions")
        return cls.from_json({
            "kind": sched.get("kind", ScheduleKind.FILE.value),
            "library_regions": bool(meta.get("library_regions", False)),
            "every": regions is not None,
            "region_starts": (regions or {}).get("starts", []),
            "region_bytes": sched.get("region_bytes"),
            "stages": [stage["nodes"] for stage in parallel.get("stages", [])]
            if parallel.get("kept") else []})


def _list(x: Any) -> list:
    if not isinstance(x, list):
        raise TypeError(f"{type(x).__name__} where a list belongs")
    return x


def _names(x: Any) -> tuple[str, ...]:
    if not all(isinstance(n, str) for n in _list(x)):
        raise TypeError("a node name is not a string")
    return tuple(x)
