"""Plans round-trip; the executor validates inputs; corrupt or edited plans are refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

import woodpecker
from tests.helpers import conv_bn_relu_residual, ort_run, rand
from woodpecker.errors import InputError, OptionsError, PlanError
from woodpecker.runtime.plan import PLAN_FILE, WEIGHTS_FILE


@pytest.fixture
def compiled():
    return woodpecker.compile(conv_bn_relu_residual(), threads=1, library_first=False)


@pytest.fixture
def plan_dir(compiled, tmp_path):
    d = tmp_path / "m.wpk"
    compiled.save(d)
    return d


def test_roundtrip(compiled, plan_dir):
    x = rand(1, 8, 6, 6)
    loaded = woodpecker.load(plan_dir)
    np.testing.assert_array_equal(loaded(x), compiled(x))
    np.testing.assert_allclose(loaded(x), ort_run(conv_bn_relu_residual(), {"x": x})[0],
                               rtol=1e-4, atol=1e-5)
    assert loaded.plan.engines == compiled.plan.engines
    doc = json.loads((plan_dir / PLAN_FILE).read_text())
    assert doc["schema_version"] == 5 and doc["order"] == [n["name"] for n in doc["nodes"]]


def test_weights_are_raw_and_mapped(plan_dir):
    """weights.bin holds each weight's bytes at its aligned offset (no pickle, no archive);
    a loaded plan's weights are read-only views of the mapped file."""
    doc = json.loads((plan_dir / PLAN_FILE).read_text())
    raw = (plan_dir / WEIGHTS_FILE).read_bytes()
    loaded = woodpecker.load(plan_dir)
    for t in doc["weights"]["tensors"]:
        a = loaded.graph.values[t["name"]].data
        assert t["offset"] % 64 == 0 and not a.flags.writeable
        assert raw[t["offset"]:t["offset"] + a.nbytes] == a.tobytes()


@pytest.mark.parametrize("feeds, match", [
    ({"x": rand(1, 8, 5, 6)}, "has shape 1x8x5x6, expected 1x8x6x6"),
    ({"x": rand(1, 8, 6, 6).astype(np.float64)}, "dtype float64, expected float32"),
    ({}, "missing input 'x'"),
    ({"x": rand(1, 8, 6, 6), "z": rand(1)}, "unknown input 'z'"),
])
def test_input_validation(compiled, feeds, match):
    with pytest.raises(InputError, match=match):
        compiled.run(feeds)


# Each was a raw exception (numpy's ValueError, ZeroDivisionError, TypeError,
# NotADirectoryError), or silently accepted (trust="no" trusted the plan, runs=-1)
@pytest.mark.parametrize("call, error, words", [
    (lambda m, d: m.run({"x": [[1.0, 2.0], [3.0]]}), InputError,
     "input 'x' is not an array of 1x8x6x6 float32"),
    (lambda m, d: m(), InputError, "the model takes 1 input(s), x[1x8x6x6 float32]; got 0"),
    (lambda m, d: m.profile({"x": rand(1, 8, 6, 6)}, runs=0), OptionsError, "runs must be"),
    (lambda m, d: m.profile({"x": rand(1, 8, 6, 6)}, runs=-1), OptionsError, "runs must be"),
    (lambda m, d: m.profile({"x": rand(1, 8, 6, 6)}, runs="x"), OptionsError, "runs must be"),
    (lambda m, d: m.save(None), PlanError, "the plan folder must be a path"),
    (lambda m, d: m.save(d / "afile" / "sub"), PlanError, "afile is a file, not a folder"),
    (lambda m, d: m.save(d / "p", force="yes"), OptionsError, "force must be True or False"),
    (lambda m, d: woodpecker.load(None), PlanError, "the plan folder must be a path"),
    (lambda m, d: woodpecker.load(42), PlanError, "the plan folder must be a path"),
    (lambda m, d: woodpecker.load(d / "afile"), PlanError, "a file, not a plan's folder"),
    (lambda m, d: woodpecker.load(d / "p", trust="no"), OptionsError,
     "trust must be True or False"),
])
def test_a_bad_argument_is_one_line(compiled, tmp_path, call, error, words):
    (tmp_path / "afile").write_text("x")
    compiled.save(tmp_path / "p")
    with pytest.raises(error) as e:
        call(compiled, tmp_path)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_intermediates_are_released(compiled):
    """Every intermediate slot is freed after its last reader; only outputs survive."""
    ex = compiled._executor
    freed = [s for step in ex._steps for s in step.free]
    assert len(freed) == len(set(freed))
    out_slots = {s for _, s, _ in ex._outputs}
    produced = {s for step in ex._steps for s in step.outs}
    inputs = {s for _, s in ex._input_slots}
    assert set(freed) == (produced | inputs) - out_slots


def _edit(plan_dir, fn):
    p = plan_dir / PLAN_FILE
    doc = json.loads(p.read_text())
    fn(doc)
    p.write_text(json.dumps(doc))


@pytest.mark.parametrize("damage, match", [
    (lambda d: (d / PLAN_FILE).write_text((d / PLAN_FILE).read_text()[:200]), "not valid JSON"),
    (lambda d: _edit(d, lambda doc: doc.update(schema_version=99)), "schema version 99"),
    (lambda d: _edit(d, lambda doc: doc["weights"]["tensors"][0].update(shape=[3])),
     "is not what is stored"),
    (lambda d: _edit(d, lambda doc: doc["nodes"][0].update(op="Bogus")), "unknown op 'Bogus'"),
    (lambda d: _edit(d, lambda doc: doc["nodes"].reverse()), "disagree"),
    (lambda d: _edit(d, lambda doc: doc["nodes"][0]["inputs"].__setitem__(0, "ghost")),
     "reads 'ghost'"),
    (lambda d: _edit(d, lambda doc: doc.pop("nodes")), "corrupt"),
    (lambda d: (d / WEIGHTS_FILE).write_bytes(b"PK\x03\x04broken"), "sha256 differs"),
    (lambda d: (d / PLAN_FILE).unlink(), "not a Woodpecker plan"),
    (lambda d: (d / PLAN_FILE).write_text((d / PLAN_FILE).read_text().replace(
        '"model": {', '"model": {"deep": ' + "[" * 100000 + "]" * 100000 + ",", 1)),
     "nested too deeply"),
    (lambda d: _edit(d, lambda doc: doc["outputs"][0].update(shape=[1, 5])),
     "declared float32.1, 5. but its value is float32.1, 288."),
    (lambda d: _edit(d, lambda doc: doc["arena"].update(size=2**50)),
     "exceeds the .* bytes of all values"),
    # the fuzz test's find: an alignment of 2^62 asked the executor for exbibytes
    (lambda d: _edit(d, lambda doc: doc["arena"].update(alignment=2**62)),
     "alignment 4611686018427387904 is not a power of two up to 4096"),
    (lambda d: _edit(d, lambda doc: doc["arena"].update(alignment=48)), "alignment 48"),
    # a bool is an int to Python: an edited dimension must not reach the executor
    (lambda d: _edit(d, lambda doc: next(iter(doc["values"].values())).update(
        shape=[True, 288])), "has shape .True, 288."),
])
def test_damaged_plan_refused(plan_dir, damage, match):
    damage(plan_dir)
    with pytest.raises(PlanError, match=match):
        woodpecker.load(plan_dir)


def test_failed_save_keeps_previous_plan(compiled, plan_dir, monkeypatch):
    before = (plan_dir / PLAN_FILE).read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr("woodpecker.runtime.plan.json.dumps", boom)
    with pytest.raises(OSError):
        compiled.save(plan_dir)
    assert (plan_dir / PLAN_FILE).read_bytes() == before
    woodpecker.load(plan_dir)


def test_save_refuses_a_folder_that_holds_no_plan(compiled, tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "plan.json").write_text("my own notes")
    (user / WEIGHTS_FILE).write_bytes(b"my data")
    with pytest.raises(PlanError, match="holds no Woodpecker plan"):
        compiled.save(user)
    assert (user / "plan.json").read_text() == "my own notes"
    assert (user / WEIGHTS_FILE).read_bytes() == b"my data"
    compiled.save(tmp_path / "new")                      # a new folder
    compiled.save(tmp_path / "new")                      # a plan is replaced
    compiled.save(user, force=True)
    woodpecker.load(user)


def test_digest_pins_the_plan(compiled, tmp_path):
    d = tmp_path / "p"
    digest = compiled.save(d)
    assert digest.startswith("sha256:") and len(digest) == 7 + 64
    woodpecker.load(d, digest=digest)
    woodpecker.load(d, digest=digest[7:].upper())
    p = d / PLAN_FILE
    p.write_text(p.read_text() + "\n")                    # any edit, even a harmless one
    with pytest.raises(PlanError, match="not the plan you trusted"):
        woodpecker.load(d, digest=digest)


@pytest.mark.parametrize("threads", [0, -1, 2000, 2.5, "2", True])
def test_plan_thread_count_is_validated(plan_dir, threads):
    _edit(plan_dir, lambda doc: doc["target"].update(threads=threads))
    with pytest.raises(PlanError, match="target threads"):
        woodpecker.load(plan_dir)


def test_plan_for_more_cores_runs_on_those_here(plan_dir):
    from woodpecker.target import default_threads

    _edit(plan_dir, lambda doc: doc["target"].update(threads=64))
    m = woodpecker.load(plan_dir)
    assert m.plan.target.run_threads == min(64, default_threads())
    x = rand(1, 8, 6, 6)
    np.testing.assert_allclose(m(x), ort_run(conv_bn_relu_residual(), {"x": x})[0],
                               rtol=1e-4, atol=1e-5)


def test_thread_counts_are_bounded():
    from woodpecker.errors import WoodpeckerError
    from woodpecker.target import MAX_THREADS, default_threads

    for bad, match in [(100000, "more than the 256"), (0, "at least 1"),
                       (default_threads() + 1, "cores this process may use")]:
        with pytest.raises(WoodpeckerError, match=match):
            woodpecker.compile(conv_bn_relu_residual(), engines="numpy", threads=bad)
    m = woodpecker.compile(conv_bn_relu_residual(), engines="numpy",
                           threads=default_threads() + 1, force_threads=True)
    assert m.plan.target.threads == default_threads() + 1 <= MAX_THREADS
