"""Templates are named by a short identity in tuning logs and plans (engines/halide/
templates.py): a template module moved or renamed changes only its entry in `MODULES`, and the
logs and plans written before — those naming templates by module path, as older Woodpeckers
did, too — still load and run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import woodpecker
from tests.helpers import rand
from tests.runtime.test_mixed_engines import tuned
from woodpecker.engines.halide.templates import (
    LEGACY_PREFIX,
    TEMPLATES,
    known_template,
    template_module,
    template_name,
)
from woodpecker.errors import PlanError
from woodpecker.tune.records import TuningLog


def test_identities_are_short_names_and_module_paths_map_to_them():
    assert all("." not in t for t in TEMPLATES)
    assert template_name(LEGACY_PREFIX + "conv_direct") == "conv_direct"
    assert template_module("conv_direct") is template_module(LEGACY_PREFIX + "conv_direct")
    assert known_template("os") is None and known_template("woodpecker.cli") is None
    with pytest.raises(PlanError, match="unknown kernel template 'os'"):
        template_module("os")   # a name read from a file never reaches importlib


def _legacy(path: Path) -> None:
    """Rewrite a log's or plan's template names as module paths, as written before."""
    text = path.read_text()
    for t in TEMPLATES:
        text = text.replace(f'"template": "{t}"', f'"template": "{LEGACY_PREFIX}{t}"')
    path.write_text(text)


SCRIPT = """
import json, sys, numpy as np, woodpecker
from woodpecker.engines.halide.templates import MODULES, template_module
from woodpecker.tune.records import TuningLog
assert woodpecker.__file__.startswith(sys.argv[1]), woodpecker.__file__
moved = sys.argv[2]
assert template_module(moved).__name__.endswith("_moved")
for log in sys.argv[3:5]:
    records = TuningLog(log).records
    assert records and {r.template for r in records} <= set(MODULES), log
model = woodpecker.load(sys.argv[5], trust=True)   # the old plan: edited as old
x = np.load(sys.argv[6])
np.testing.assert_array_equal(model(x), np.load(sys.argv[7]))
print("ok", sorted({c.kernel.template for c in model.plan.choices.values() if c.kernel}))
"""


def test_logs_and_plans_written_before_load_after_a_template_module_is_renamed(tmp_path):
    model, _, log = tuned(tmp_path)
    m = woodpecker.compile(model, engines="halide,numpy", tuning_log=log.path, threads=1)
    used = sorted({c.kernel.template for c in m.plan.choices.values() if c.kernel})
    assert used and all(t in TEMPLATES for t in used)
    assert {r.template for r in TuningLog(log.path).records} <= set(TEMPLATES)
    plan = tmp_path / "m.wpk"
    m.save(plan)
    x = rand(1, 8, 12, 12, seed=2)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", m(x))
    # the same log as an older Woodpecker wrote it; the plan's kernels named the old way too
    old_log = tmp_path / "old.jsonl"
    shutil.copy(log.path, old_log)
    _legacy(old_log)
    old_plan = tmp_path / "old.wpk"
    shutil.copytree(plan, old_plan)
    _legacy(old_plan / "plan.json")
    assert LEGACY_PREFIX in (old_plan / "plan.json").read_text()
    # edited to look as an older Woodpecker wrote it, so no longer signed: trusted by its user
    np.testing.assert_array_equal(woodpecker.load(old_plan, trust=True)(x),
                                  np.load(tmp_path / "y.npy"))

    # a scratch copy of the package whose template module of the plan's kernel moved
    scratch = tmp_path / "scratch"
    package = Path(woodpecker.__file__).parent
    shutil.copytree(package, scratch / "woodpecker",
                    ignore=shutil.ignore_patterns("__pycache__"))
    moved = used[0]
    halide = scratch / "woodpecker" / "engines" / "halide"
    (halide / f"{moved}.py").rename(halide / f"{moved}_moved.py")
    table = halide / "templates.py"
    table.write_text(table.read_text() + f'\nMODULES["{moved}"] = '
                     f'"woodpecker.engines.halide.{moved}_moved"\n')
    # run from elsewhere (not the checkout), the scratch copy first on the path: the
    # woodpecker imported is the copy (the script checks)
    env = {**os.environ, "PYTHONPATH": str(scratch)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(scratch), moved, log.path, str(old_log),
         str(old_plan), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok")
    # and the plan saved now (short names) loads there as well
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(scratch), moved, log.path, str(old_log),
         str(plan), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_plan_naming_an_unknown_template_is_refused_in_one_line(tmp_path):
    model, _, log = tuned(tmp_path)
    m = woodpecker.compile(model, engines="halide,numpy", tuning_log=log.path, threads=1)
    plan = tmp_path / "m.wpk"
    m.save(plan)
    doc = json.loads((plan / "plan.json").read_text())
    text = json.dumps(doc).replace('"template": "', '"template": "gone_')
    (plan / "plan.json").write_text(text)
    with pytest.raises(PlanError, match=r"unknown kernel template 'gone_\w+'") as e:
        woodpecker.load(plan)
    assert "\n" not in str(e.value)


def test_a_log_record_of_an_unknown_template_is_counted_and_never_built(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"task": "t", "template": "gone", "config": {}}) + "\n" +
                    json.dumps({"task": "t", "template": LEGACY_PREFIX + "dense", "config": {},
                                "cost_s": 1e-3}) + "\n")
    log = TuningLog(path)
    assert log.unknown == 1 and [r.template for r in log.records] == ["gone", "dense"]
    assert log.best("t").template == "dense"
    with pytest.raises(PlanError, match="unknown kernel template 'gone'"):
        template_module("gone")


def test_a_template_of_ones_own_is_named_in_the_environment(monkeypatch):
    monkeypatch.setenv("WOODPECKER_TEMPLATES", "mine=woodpecker.engines.halide.dense")
    assert template_module("mine") is template_module("dense")
    monkeypatch.setenv("WOODPECKER_TEMPLATES", "")
    assert known_template("mine") is None
