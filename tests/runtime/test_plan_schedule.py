"""The plan's schedule is typed (runtime/plan_schedule.PlanSchedule) and stored in plan.json
(schema 5); plans of schema 4, which kept it in their metadata, load with it migrated, and a
corrupt schedule is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

import woodpecker
from tests.helpers import rand
from tests.schedule.test_rewrite_arena import concat_model
from woodpecker.errors import PlanError
from woodpecker.options import ScheduleKind
from woodpecker.runtime.plan_schedule import PlanSchedule


def _to_schema_4(plan_dir, schedule: PlanSchedule) -> None:
    """plan.json as schema 4 wrote it: no `schedule`, the same facts in the metadata."""
    path = plan_dir / "plan.json"
    doc = json.loads(path.read_text())
    del doc["schedule"]
    doc["schema_version"] = 4
    meta = doc["model"]
    meta["library_regions"] = schedule.library_regions
    meta["schedule"] = {**meta.get("schedule", {}), "kind": schedule.kind.value}
    if schedule.every:
        meta["arena_regions"] = {"starts": list(schedule.region_starts)}
    if schedule.stages:
        meta["parallel"] = {"kept": True, "stages": [{"nodes": list(s)}
                                                     for s in schedule.stages]}
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_a_schema_4_plan_loads_with_its_schedule_migrated(tmp_path, kind):
    m = woodpecker.compile(concat_model(False, True), threads=1, engines="onnxruntime,numpy",
                           schedule=kind)
    assert m.plan.schedule.kind is ScheduleKind(kind) and m.plan.schedule.library_regions
    assert m.plan.schedule.every == (kind == "memory")
    m.save(tmp_path / "p")
    _to_schema_4(tmp_path / "p", m.plan.schedule)
    loaded = woodpecker.load(tmp_path / "p")
    assert loaded.plan.schedule == m.plan.schedule and loaded.steps == m.steps
    x = rand(1, 8, 12, 12, seed=3)
    np.testing.assert_array_equal(loaded(x), m(x))
    loaded.save(tmp_path / "again")      # saved again: schema 5, the same schedule
    doc = json.loads((tmp_path / "again" / "plan.json").read_text())
    assert doc["schema_version"] == 5
    assert PlanSchedule.from_json(doc["schedule"]) == m.plan.schedule


def test_schema_4_metadata_of_a_parallel_plan_gives_its_stages():
    meta = {"schedule": {"kind": "parallel"}, "library_regions": True,
            "parallel": {"kept": True, "stages": [{"nodes": ["a", "b"]}, {"nodes": ["c", "d"]}]}}
    s = PlanSchedule.from_meta(meta)
    assert s == PlanSchedule(ScheduleKind.PARALLEL, True, stages=(("a", "b"), ("c", "d")))
    meta["parallel"]["kept"] = False     # measured, not kept: a sequential plan
    assert PlanSchedule.from_meta(meta).stages == ()
    assert PlanSchedule.from_meta({}) == PlanSchedule()


@pytest.mark.parametrize("edit, match", [
    (lambda s: s.update(kind="fastest"), "ValueError"),
    (lambda s: s.update(every="yes"), "flag"),
    (lambda s: s.update(stages=[["a", 3]]), "node name"),
    (lambda s: s.update(region_bytes=-1), "region_bytes"),
    (lambda s: s.pop("region_starts"), "KeyError"),
])
def test_a_corrupt_schedule_is_refused_in_one_line(tmp_path, edit, match):
    m = woodpecker.compile(concat_model(False, True), threads=1, engines="onnxruntime,numpy")
    m.save(tmp_path / "p")
    path = tmp_path / "p" / "plan.json"
    doc = json.loads(path.read_text())
    edit(doc["schedule"])
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match=f"schedule is corrupt.*{match}") as e:
        woodpecker.load(tmp_path / "p")
    assert "\n" not in str(e.value)
