"""The fuzzer: mutated ONNX models and tampered plans, thousands per CI run (hypothesis,
derandomized under CI, so a failure replays and shrinks to its fewest mutations).

For every mutated model (tests/fuzz/mutate.py) Woodpecker must either give ONNX Runtime's
result on the same inputs (same output names, dtypes, shapes; values within 1e-4, NaN where ORT
has NaN) or refuse it with one line (a WoodpeckerError); where ONNX Runtime refuses the model
(to load it or to run it), Woodpecker must refuse it too. Never a traceback, a crash or a hang
(each case has CASE_TIMEOUT_S). Most cases compile on the numpy reference engine (milliseconds
a case); every LIBRARY_EVERY-th uses the default engines (ONNX Runtime regions, the arena).

For every tampered plan (a value in plan.json replaced, a key removed, a byte of any file
flipped or the file cut) loading and running gives one-line PlanError/WoodpeckerError or runs:
a consistent edit may change what the plan computes (the digest is what pins a plan, see the
docs/guide.md, "Security: a plan is code"), it must never crash the process.

For every escaping plan (a file name in plan.json — the weights, a step model, a kernel —
made absolute, climbing out with `..` or through a planted link, or a file of the plan
replaced by a link to a copy outside; a Halide plan loaded with trust=True, so the
signature is not what refuses it) loading is one PlanError line and nothing outside the
plan is read as the plan's; for every racing plan (a file of a loaded plan replaced, by a
rename, after its check and before its engines build it) the plan runs on the bytes that
were checked — the same outputs as the plan unchanged — or refuses in one line.

WOODPECKER_FUZZ_CASES / WOODPECKER_FUZZ_PLANS set the case counts (defaults below); the counts
of each outcome are printed at the end of the test session (tests/fuzz/conftest.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import signal
from collections import Counter
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import woodpecker
from tests.fuzz.mutate import BYTE_MUTATIONS, MUTATIONS, SEEDS, mutated
from woodpecker.errors import PlanError, WoodpeckerError

MODEL_CASES = int(os.environ.get("WOODPECKER_FUZZ_CASES", 5000))
PLAN_CASES = int(os.environ.get("WOODPECKER_FUZZ_PLANS", 1000))
CASE_TIMEOUT_S = 30
LIBRARY_EVERY = 25
ESCAPE_CASES = max(PLAN_CASES // 5, 20)
COUNTS: dict[str, Counter] = {"models": Counter(), "plans": Counter(), "escapes": Counter(),
                              "races": Counter()}

mutation = st.tuples(st.sampled_from(sorted(MUTATIONS) + list(BYTE_MUTATIONS)),
                     st.integers(0, 2**31))


@contextmanager
def deadline(seconds: int):
    """A TimeoutError in this thread after `seconds` (a hang is a failure, not a stuck CI)."""
    def expire(signum, frame):
        raise TimeoutError(f"case ran past {seconds} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _ort(data: bytes):
    """ONNX Runtime's outputs (name → array) and the feeds it ran on, or None where it refuses
    the model or a run of it."""
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        model = onnx.load_from_string(data)
    except Exception:
        return None, None
    rng = np.random.default_rng(0)
    feeds = {}
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[vi.name] = (rng.standard_normal(shape) * 3).astype(dtype)
    try:
        outs = sess.run(None, feeds)
    except Exception:
        return None, feeds
    return {o.name: a for o, a in zip(sess.get_outputs(), outs)}, feeds


def _same(ours: dict, theirs: dict) -> str | None:
    """Why two runs' outputs differ, or None."""
    if list(ours) != list(theirs):
        return f"outputs {list(ours)} against ONNX Runtime's {list(theirs)}"
    for name, want in theirs.items():
        got = np.asarray(ours[name])
        want = np.asarray(want)
        if got.dtype != want.dtype or got.shape != want.shape:
            return f"{name}: {got.dtype}{got.shape} against {want.dtype}{want.shape}"
        if want.dtype.kind == "f":
            if not np.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True):
                return f"{name}: values differ by {np.nanmax(np.abs(got - want)):.3g}"
        elif not np.array_equal(got, want):
            return f"{name}: values differ"
    return None


def _one_line(e: Exception) -> str:
    text = str(e)
    assert text and "\n" not in text, f"{type(e).__name__} of {len(text.splitlines())} lines"
    return text


@pytest.mark.slow
@settings(max_examples=MODEL_CASES, deadline=None, print_blob=True,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(SEEDS)), st.lists(mutation, min_size=1, max_size=3),
       st.integers(0, 2**31))
def test_mutated_models(seed, mutations, case):
    data = mutated(seed, mutations)
    engines = None if case % LIBRARY_EVERY == 0 else "numpy"
    with deadline(CASE_TIMEOUT_S):
        theirs, feeds = _ort(data)
        try:
            model = woodpecker.compile(data, engines=engines, threads=1)
            ours = model.run(feeds if feeds is not None else {})
        except WoodpeckerError as e:
            _one_line(e)
            COUNTS["models"]["refused by both" if theirs is None else
                             "refused here, run by ONNX Runtime"] += 1
            return
    assert theirs is not None, "ran a model ONNX Runtime refuses"
    why = _same(ours, theirs)
    assert why is None, why
    COUNTS["models"]["same result as ONNX Runtime"] += 1


@pytest.fixture(scope="module")
def saved_plan(tmp_path_factory):
    """A plan with an ONNX Runtime region, numpy steps and an arena, and its input."""
    from tests.helpers import conv_bn_relu_residual, rand

    d = tmp_path_factory.mktemp("plan") / "p.wpk"
    # node level (not library-first, whose plan may be one session): the steps named above
    woodpecker.compile(conv_bn_relu_residual(), threads=1, library_first=False).save(d)
    return d, {"x": rand(1, 8, 6, 6)}


def _leaves(doc, path=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, path + (i,))
    yield path


REPLACEMENTS = [None, 0, -1, 1, 2**31, 2**62, -(2**62), 1.5, "", "x", "../../etc/passwd",
                "/etc/passwd", [], {}, [1, 2], True, "NHWC", "halide", "float64"]


def _tamper(d, kind: str, n: int) -> None:
    plan = d / "plan.json"
    try:
        doc = json.loads(plan.read_text())
    except (ValueError, OSError):   # an earlier edit broke it: edit its bytes instead
        kind = "flip" if kind in ("replace", "remove") else kind
    if kind in ("replace", "remove"):
        paths = [p for p in _leaves(doc) if p]
        path = paths[n % len(paths)]
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if kind == "replace":
            parent[path[-1]] = REPLACEMENTS[(n // 7) % len(REPLACEMENTS)]
        elif isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent.pop(path[-1])
        plan.write_text(json.dumps(doc))
    else:
        files = sorted(p for p in d.rglob("*") if p.is_file())
        f = files[n % len(files)]
        data = bytearray(f.read_bytes())
        if data:
            if kind == "flip":
                data[(n // 7) % len(data)] ^= 1 << (n // 11) % 8
            else:
                del data[(n // 7) % len(data):]
        f.write_bytes(bytes(data))


@pytest.mark.slow
@settings(max_examples=PLAN_CASES, deadline=None, print_blob=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from(["replace", "remove", "flip", "cut"]),
                          st.integers(0, 2**31)), min_size=1, max_size=2))
def test_tampered_plans(saved_plan, tmp_path_factory, edits):
    source, feeds = saved_plan
    d = tmp_path_factory.mktemp("t", numbered=True) / "p.wpk"
    shutil.copytree(source, d)
    try:
        for kind, n in edits:
            _tamper(d, kind, n)
        with deadline(CASE_TIMEOUT_S):
            try:
                woodpecker.load(d).run(feeds)
            except WoodpeckerError as e:
                _one_line(e)
                COUNTS["plans"]["refused"] += 1
                return
        COUNTS["plans"]["loaded and ran"] += 1
    finally:
        shutil.rmtree(d.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def both_plans(saved_plan, tmp_path_factory):
    """The saved plan above (ONNX Runtime region, numpy steps) and one with a Halide kernel,
    each with its outputs."""
    from tests.helpers import conv_bn_relu_residual, seed_tuning_log

    d, feeds = saved_plan
    plans = [(d, woodpecker.load(d).run(feeds))]
    if importlib.util.find_spec("halide") is not None:
        root = tmp_path_factory.mktemp("hplan")
        log = seed_tuning_log(conv_bn_relu_residual(), root / "tuning.jsonl")
        h = root / "h.wpk"
        woodpecker.compile(conv_bn_relu_residual(), engines="halide,numpy", threads=1,
                           tuning_log=log.path).save(h)
        plans.append((h, woodpecker.load(h).run(feeds)))
    return plans, feeds


def _file_fields(doc) -> list[tuple]:
    """Paths in plan.json to every file name a plan reads: the weights, each step model, each
    Halide kernel (a key of the kernels table, with the choices naming it)."""
    out = [("weights", "file")]
    for engine, section in doc["engines"].items():
        for first in section.get("models", {}):
            out.append(("engines", engine, "models", first, "file"))
        for kernel in section.get("kernels", {}):
            out.append(("kernel", kernel))
    return out


def _escape(d, outside, field: tuple, how: str) -> None:
    """Point `field` of d's plan.json out of the folder (`how`), at a copy of what it named."""
    doc = json.loads((d / "plan.json").read_text())
    if field[0] == "kernel":
        old = field[1]
        target = d / "kernels" / old
    else:
        parent = doc
        for k in field[:-1]:
            parent = parent[k]
        old = parent[field[-1]]
        target = d / old
    copy = outside / f"copy-{target.name}"
    shutil.copy(target, copy)
    if how == "absolute":
        new = str(copy)
    elif how == "dotdot":
        new = os.path.relpath(copy, target.parent if field[0] == "kernel" else d)
    else:   # a link inside the folder, leading out
        link = (d / "kernels" if field[0] == "kernel" else d) / f"link-{target.name}"
        link.symlink_to(copy)
        new = link.name if field[0] == "kernel" else os.path.relpath(link, d)
    if field[0] == "kernel":
        kernels = doc["engines"]["halide"]["kernels"]
        kernels[new] = kernels.pop(old)
        for choice in doc["choices"].values():
            if choice.get("kernel") and choice["kernel"]["file"] == old:
                choice["kernel"]["file"] = new
    else:
        parent[field[-1]] = new
    (d / "plan.json").write_text(json.dumps(doc))


@pytest.mark.slow
@settings(max_examples=ESCAPE_CASES, deadline=None, print_blob=True,
          suppress_health_check=list(HealthCheck))
@given(st.integers(0, 1), st.integers(0, 2**31),
       st.sampled_from(["absolute", "dotdot", "link", "replace-by-link"]))
def test_escaping_plans(both_plans, tmp_path_factory, which, n, how):
    plans, feeds = both_plans
    source, _ = plans[which % len(plans)]
    root = tmp_path_factory.mktemp("e", numbered=True)
    d, outside = root / "p.wpk", root / "outside"
    shutil.copytree(source, d)
    outside.mkdir()
    try:
        if how == "replace-by-link":
            files = sorted(p for p in d.rglob("*") if p.is_file())
            f = files[n % len(files)]
            copy = outside / f.name
            shutil.copy(f, copy)
            f.unlink()
            f.symlink_to(copy)
            expect = "leaves the plan folder|not a Woodpecker plan"
        else:
            fields = _file_fields(json.loads((d / "plan.json").read_text()))
            _escape(d, outside, fields[n % len(fields)], how)
            expect = "not a file inside the plan folder|is not a file name|" \
                     "leaves the plan folder"
        with deadline(CASE_TIMEOUT_S):
            with pytest.raises(PlanError, match=expect) as e:
                woodpecker.load(d, trust=True).run(feeds)
        _one_line(e.value)
        COUNTS["escapes"]["refused"] += 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
@settings(max_examples=ESCAPE_CASES, deadline=None, print_blob=True,
          suppress_health_check=list(HealthCheck))
@given(st.integers(0, 1), st.integers(0, 2**31))
def test_racing_plans(both_plans, tmp_path_factory, which, n):
    """A file replaced (renamed over, as a writer racing the loader would) between the load's
    checks and the engines' building of the plan."""
    from woodpecker.runtime.compiled import CompiledModel
    from woodpecker.runtime.plan import load_plan, plan_digest

    plans, feeds = both_plans
    source, want = plans[which % len(plans)]
    root = tmp_path_factory.mktemp("r", numbered=True)
    d = root / "p.wpk"
    shutil.copytree(source, d)
    try:
        with deadline(CASE_TIMEOUT_S):
            checked = load_plan(d, plan_digest(d))
            files = sorted(p for p in d.rglob("*") if p.is_file() and p.name != "plan.json")
            f = files[n % len(files)]
            data = bytearray(f.read_bytes())
            data[(n // 7) % len(data)] ^= 1 << (n // 11) % 8
            tmp = f.with_name(f.name + ".new")
            tmp.write_bytes(bytes(data))
            os.replace(tmp, f)
            try:
                got = CompiledModel(checked).run(feeds)
            except PlanError as e:
                _one_line(e)
                COUNTS["races"]["refused"] += 1
                return
        assert _same(got, want) is None, f"{f.name} swapped: {_same(got, want)}"
        COUNTS["races"]["ran the checked bytes"] += 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_mutations_are_deterministic():
    """A mutation list gives the same bytes every time (a failure replays)."""
    rng = random.Random(0)
    for _ in range(20):
        seed = rng.choice(sorted(SEEDS))
        muts = [(rng.choice(sorted(MUTATIONS) + list(BYTE_MUTATIONS)), rng.randrange(2**31))
                for _ in range(3)]
        assert mutated(seed, muts) == mutated(seed, muts)
