"""Plans confined to their folder, native code loaded from the bytes that were checked, edits
refused, saves that never write through a link or trip over another save (issue 76).

Each case below ran before the fix: a payload library ran (absolute kernel path; a kernel
swapped between the check and the load), the process aborted on an edited input shape, a
user's file outside the plan was overwritten through a planted link, two saves raised
FileNotFoundError."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess

import numpy as np
import pytest

import woodpecker
from tests.helpers import conv_bn_relu_residual, ort_run, rand, seed_tuning_log
from woodpecker.errors import PlanError
from woodpecker.runtime.plan import PLAN_FILE, WEIGHTS_FILE, load_plan

X = rand(1, 8, 6, 6, seed=4)


@pytest.fixture(scope="module")
def halide_plan(tmp_path_factory):
    """A saved plan with one Halide kernel (and numpy steps), the digest, ORT's output."""
    pytest.importorskip("halide")
    model = conv_bn_relu_residual()
    root = tmp_path_factory.mktemp("trust")
    log = seed_tuning_log(model, root / "tuning.jsonl")
    compiled = woodpecker.compile(model, engines="halide,numpy", tuning_log=log.path,
                                  threads=1)
    assert "halide" in compiled.plan.engines
    d = root / "p.wpk"
    digest = compiled.save(d)
    return d, digest, ort_run(model, {"x": X})[0]


@pytest.fixture
def plan(halide_plan, tmp_path):
    src, digest, want = halide_plan
    d = tmp_path / "p.wpk"
    shutil.copytree(src, d)
    return d, digest, want


@pytest.fixture(scope="module")
def payload(tmp_path_factory):
    """A shared library whose constructor writes a marker file: proof that it was loaded."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    root = tmp_path_factory.mktemp("payload")
    marker = root / "RAN"
    src = root / "payload.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void ran(void) '
                   f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    lib = root / "payload.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib, marker


def _doc(d):
    return json.loads((d / PLAN_FILE).read_text())


def _write(d, doc):
    (d / PLAN_FILE).write_text(json.dumps(doc))


def _kernel(doc) -> str:
    return next(iter(doc["engines"]["halide"]["kernels"]))


def _rename_kernel(doc, old: str, new: str) -> None:
    kernels = doc["engines"]["halide"]["kernels"]
    kernels[new] = kernels.pop(old)
    for choice in doc["choices"].values():
        if choice.get("kernel") and choice["kernel"]["file"] == old:
            choice["kernel"]["file"] = new


def test_an_absolute_kernel_path_is_refused_even_trusted(plan, payload, tmp_path):
    """plan.json named the payload by its absolute path, with a decoy of the real kernel at
    kernels/<that path> to satisfy the sha256 check: the check read the decoy, dlopen the
    payload."""
    d, _, _ = plan
    lib, marker = payload
    doc = _doc(d)
    old = _kernel(doc)
    decoy = d / "kernels" / str(lib).lstrip("/")
    decoy.parent.mkdir(parents=True)
    shutil.copy(d / "kernels" / old, decoy)
    _rename_kernel(doc, old, str(lib))
    _write(d, doc)
    for trust in (False, True):
        with pytest.raises(PlanError, match="is not a file name"):
            woodpecker.load(d, trust=trust).run({"x": X})
    assert not marker.exists()


def test_a_kernel_swapped_after_the_check_is_not_what_runs(plan, payload):
    """The digest is checked, then the kernel file is replaced before the kernels are
    loaded (a racing writer): the checked bytes run, not the payload."""
    d, digest, want = plan
    lib, marker = payload
    checked = load_plan(d, digest)
    kernel = d / "kernels" / _kernel(_doc(d))
    os.replace(shutil.copy(lib, d / "swap.so"), kernel)
    from woodpecker.runtime.compiled import CompiledModel

    got = CompiledModel(checked).run({"x": X})["y"]
    assert not marker.exists()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_symlink_leading_out_of_the_plan_is_refused(plan, tmp_path):
    d, _, _ = plan
    outside = tmp_path / "outside.bin"
    shutil.copy(d / WEIGHTS_FILE, outside)
    (d / WEIGHTS_FILE).unlink()
    (d / WEIGHTS_FILE).symlink_to(outside)
    with pytest.raises(PlanError, match="leaves the plan folder"):
        woodpecker.load(d, trust=True)


def test_an_edited_input_shape_is_refused_not_run(plan):
    """Before: the edited plan loaded and the layout conversion wrote 12x12 images into an
    arena slot for 6x6 ones (the process aborted: free(): invalid next size)."""
    d, _, _ = plan
    doc = _doc(d)
    doc["inputs"][0]["shape"] = [1, 8, 12, 12]
    _write(d, doc)
    with pytest.raises(PlanError, match="makes float32.1, 12, 12, 8. from its inputs"):
        woodpecker.load(d, trust=True)


def test_a_consistent_edit_needs_trust_and_a_foreign_plan_a_digest(plan, tmp_path,
                                                                   monkeypatch):
    """A kernel replaced together with its sha256 in plan.json passes every sum: only the
    signature (or a digest kept apart) tells. A plan another key signed is refused unless
    pinned or trusted."""
    d, digest, want = plan
    doc = _doc(d)
    kernel = d / "kernels" / _kernel(doc)
    data = kernel.read_bytes() + b"\0" * 8            # still a loadable library
    kernel.write_bytes(data)
    import hashlib

    doc["engines"]["halide"]["kernels"][kernel.name] = hashlib.sha256(data).hexdigest()
    _write(d, doc)
    with pytest.raises(PlanError, match="changed after it was signed"):
        woodpecker.load(d)
    np.testing.assert_allclose(woodpecker.load(d, trust=True).run({"x": X})["y"], want,
                               rtol=1e-4, atol=1e-5)

    # the original plan, on a machine with another key
    src = tmp_path / "orig.wpk"
    shutil.copytree(d, src, dirs_exist_ok=True)
    woodpecker.load(d, trust=True).save(src)          # signed here
    woodpecker.load(src)
    fresh_digest = woodpecker.runtime.plan.plan_digest(src)
    monkeypatch.setenv("WOODPECKER_PLAN_KEY", str(tmp_path / "other.key"))
    with pytest.raises(PlanError, match="signed by another key"):
        woodpecker.load(src)
    woodpecker.load(src, digest=fresh_digest)
    woodpecker.load(src, trust=True)


@pytest.mark.parametrize("digest", [12345, "", "sha256:xyz", None])
def test_a_bad_digest_is_one_line(plan, digest):
    d, _, _ = plan
    if digest is None:
        woodpecker.load(d)
        return
    with pytest.raises(PlanError, match="is not a plan digest"):
        woodpecker.load(d, digest=digest)


@pytest.mark.parametrize("planted", ["weights.bin.tmp", "plan.json.tmp",
                                     "onnxruntime/step0.onnx.tmp"])
def test_a_save_never_writes_through_a_planted_link(tmp_path, planted):
    """A save over an existing plan folder holding a link at one of the temporary names it
    used to write to overwrote the user's file the link pointed at."""
    m = woodpecker.compile(conv_bn_relu_residual(), threads=1, library_first=False)
    d = tmp_path / "p.wpk"
    m.save(d)
    victim = tmp_path / "precious.txt"
    victim.write_text("mine")
    link = d / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim)
    m.save(d)
    assert victim.read_text() == "mine"
    woodpecker.load(d).run({"x": X})


def test_a_save_refuses_a_subfolder_that_leads_out(tmp_path):
    m = woodpecker.compile(conv_bn_relu_residual(), threads=1, library_first=False)
    d = tmp_path / "p.wpk"
    m.save(d)
    if not (d / "onnxruntime").is_dir():
        pytest.skip("no ONNX Runtime step in this plan")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(d / "onnxruntime")
    (d / "onnxruntime").symlink_to(elsewhere)
    with pytest.raises(PlanError, match="leaves the plan folder"):
        m.save(d)
    assert not any(elsewhere.iterdir())


def _save_many(path: str, n: int) -> str:
    m = woodpecker.compile(conv_bn_relu_residual(), threads=1, library_first=False)
    for _ in range(n):
        m.save(path)
    return "ok"


def test_two_processes_saving_one_plan_both_succeed(tmp_path):
    """Both used the same temporary names: one's rename found the other's file gone
    (FileNotFoundError up to 9 times in 40)."""
    d = str(tmp_path / "p.wpk")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(_save_many, [(d, 60), (d, 60)])
    assert results == ["ok", "ok"]
    assert not [p for p in (tmp_path / "p.wpk").rglob("*.tmp")]
    woodpecker.load(d).run({"x": X})


def test_a_step_models_external_data_out_of_the_folder_is_one_line(tmp_path):
    """A step model edited to read an initializer from a file outside the plan (its sha256
    updated in plan.json): ONNX Runtime's own Fail reached the user before."""
    import hashlib

    import onnx
    from onnx import external_data_helper

    d = tmp_path / "p.wpk"
    woodpecker.compile(conv_bn_relu_residual(), threads=1, engines="onnxruntime").save(d)
    doc = _doc(d)
    models = doc["engines"]["onnxruntime"]["models"]
    entry = next(iter(models.values()))
    f = d / entry["file"]
    m = onnx.load(f)
    init = max(m.graph.initializer, key=lambda t: t.ByteSize())
    outside = tmp_path / "outside.bin"
    outside.write_bytes(onnx.numpy_helper.to_array(init).tobytes())
    external_data_helper.set_external_data(init, location=os.path.relpath(outside, f.parent))
    init.ClearField("raw_data")
    init.ClearField("float_data")
    init.data_location = onnx.TensorProto.EXTERNAL
    f.write_bytes(m.SerializeToString())
    entry["sha256"] = hashlib.sha256(f.read_bytes()).hexdigest()
    _write(d, doc)
    with pytest.raises(PlanError, match="does not build") as e:
        woodpecker.load(d).run({"x": X})
    assert "\n" not in str(e.value)


def test_a_kernel_task_edited_apart_from_its_values_is_refused(plan):
    """The kernel's recorded task says 16 output channels where the node's output holds 8: a
    kernel of that task would write twice the bytes of its output."""
    d, _, _ = plan
    doc = _doc(d)
    choice = next(c for c in doc["choices"].values() if c.get("kernel"))
    choice["kernel"]["task"]["k"] = 16
    _write(d, doc)
    with pytest.raises(PlanError, match="kernel writes float32.1, 6, 6, 16."):
        woodpecker.load(d, trust=True)


def test_a_kernel_task_edited_keeping_its_output_is_refused(plan):
    """The task's fused steps edited (its Relu dropped), its output unchanged: the kernel's
    signature — the task its node makes — no longer matches, so it is refused at load."""
    d, _, _ = plan
    doc = _doc(d)
    choice = next(c for c in doc["choices"].values() if c.get("kernel"))
    choice["kernel"]["task"]["epilogue"] = [["Add"]]
    _write(d, doc)
    with pytest.raises(PlanError, match="kernel was built for conv 3x3/1 8->8 @ 6x6 [+]Add,"
                                        " but the node now is .*[+]Add[+]Relu") as e:
        woodpecker.load(d, trust=True)
    assert "\n" not in str(e.value)


def test_a_layout_edited_consistently_is_refused(plan):
    """The conv's input laid out W before H (its Transpose and the value's layout edited
    together, every shape still fitting as H == W): the kernel built to read NHWC would read
    the image transposed and give other outputs, silently. Refused: the value's layout is
    not the one the kernel reads."""
    d, _, _ = plan
    doc = _doc(d)
    name = next(n for n, v in doc["values"].items() if v.get("layout") == "NHWC" and
                any(node["op"] == "Transpose" and node["outputs"] == [n]
                    for node in doc["nodes"]))
    doc["values"][name]["layout"] = "perm0321"
    for node in doc["nodes"]:
        if node["outputs"] == [name]:
            node["attrs"]["perm"] = [0, 3, 2, 1]
    _write(d, doc)
    with pytest.raises(PlanError, match="reads input .* in layout NHWC, but plan.json lays "
                                        "it out perm0321") as e:
        woodpecker.load(d, trust=True)
    assert "\n" not in str(e.value)
