"""Concatenation and reshapes in place: which parts are written straight into the Concat's
output and which reshapes are views of their input, outputs unchanged (numpy, ONNX Runtime
through I/O binding, and strided NHWC slices from Halide are covered in
tests/passes/test_layout_follow.py), plans keep the aliases and refuse corrupt ones."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand
from woodpecker.errors import PlanError
from woodpecker.passes import DEFAULT
from woodpecker.runtime.plan import PLAN_FILE
from woodpecker.schedule.aliases import VIEW, slice_code
from woodpecker.schedule.arena import lifetimes

C, HW = 4, 6


def _fire(batch: int, reread: bool = False):
    """x → (conv a, conv b) → concat on channels → conv; `reread`: b is also added to the
    output of the last conv, so it has a second reader."""
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"]),
             helper.make_node("Conv", ["x", "wb"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "wc"], ["y0" if reread else "y"])]
    if reread:
        nodes.append(helper.make_node("Add", ["y0", "b"], ["y"]))
    inits = {"wa": rand(C, C, 1, 1, seed=1), "wb": rand(C, C, 3, 3, seed=2) * 0.3,
             "wc": rand(C, 2 * C, 1, 1, seed=3)}
    return make_model(nodes, [("x", [batch, C, HW, HW])], [("y", [batch, C, HW, HW])], inits)


@pytest.mark.parametrize("engines", ["numpy", "onnxruntime,numpy"])
def test_parts_are_written_in_place(engines, tmp_path):
    model = _fire(1)
    compiled = woodpecker.compile(model, engines=engines, threads=1, library_regions=False)
    assert compiled.plan.arena.aliases == {"a": ("cat", 1, 0), "b": ("cat", 1, C)}
    x = rand(1, C, HW, HW, seed=5)
    want = ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(compiled(x), want, rtol=1e-4, atol=1e-4)
    plain = woodpecker.compile(model, engines=engines, threads=1, library_regions=False,
                               arena=False)
    np.testing.assert_array_equal(compiled(x), plain(x))
    compiled.save(tmp_path / "p")
    loaded = woodpecker.load(tmp_path / "p")
    assert loaded.plan.arena.aliases == compiled.plan.arena.aliases
    np.testing.assert_array_equal(loaded(x), compiled(x))


@pytest.mark.parametrize("engines", ["numpy", "onnxruntime,numpy"])
def test_a_part_read_again_later_keeps_its_whole_alive(engines):
    """b is also read after the concat's reader: it lives in its slice of `cat`, and `cat`
    stays allocated until that last read (nothing else may take its bytes before)."""
    model = _fire(1, reread=True)
    compiled = woodpecker.compile(model, engines=engines, threads=1, library_regions=False)
    arena = compiled.plan.arena
    assert arena.aliases == {"a": ("cat", 1, 0), "b": ("cat", 1, C)}
    life = {name: (first, last) for name, _, first, last in
            lifetimes(compiled.graph, None, arena.aliases)}
    add = next(i for i, n in enumerate(compiled.graph.nodes) if n.outputs[0].name == "y")
    assert life["cat"][1] >= add
    x = rand(1, C, HW, HW, seed=6)
    np.testing.assert_allclose(compiled(x), ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_parts_that_cannot_be_written_in_place():
    # batch 2: a channel slice of NCHW is strided, and the concat axis is not the innermost
    assert woodpecker.compile(_fire(2), engines="numpy", threads=1).plan.arena.aliases == {}
    # inside an ONNX Runtime region the concat is no step of its own
    assert woodpecker.compile(_fire(1), threads=1, library_first=False).plan.arena.aliases == {}


def _reshaped():
    """x → conv → reshape (a view of the conv's output) → relu, and a second reshape of that
    view (no view of a view: it copies, unless simplify_reshapes makes it read the conv's
    output)."""
    nodes = [helper.make_node("Conv", ["x", "wa"], ["c"]),
             helper.make_node("Reshape", ["c", "s"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"]),
             helper.make_node("Reshape", ["r", "s2"], ["z"])]
    return make_model(nodes, [("x", [1, C, HW, HW])], [("y", [1, C, HW * HW]),
                                                        ("z", [C, HW * HW])],
                      {"wa": rand(C, C, 1, 1, seed=1), "s": np.array([1, C, -1], np.int64),
                       "s2": np.array([C, -1], np.int64)})


def test_reshape_is_a_view_of_its_input(tmp_path):
    model = _reshaped()
    unchained = tuple(p for p in DEFAULT if p != "simplify_reshapes")
    plain = woodpecker.compile(model, engines="numpy", threads=1, passes=unchained)
    assert plain.plan.arena.aliases == {"r": ("c", VIEW, 0)}
    compiled = woodpecker.compile(model, engines="numpy", threads=1)
    assert compiled.plan.arena.aliases == {"r": ("c", VIEW, 0), "z": ("c", VIEW, 0)}
    x = rand(1, C, HW, HW, seed=6)
    for got, want in zip(compiled(x), ort_run(model, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    compiled.save(tmp_path / "p")
    doc = json.loads((tmp_path / "p" / PLAN_FILE).read_text())
    doc["arena"]["aliases"]["r"] = ["x", VIEW, 0]    # a graph input has no place in the arena
    (tmp_path / "p" / PLAN_FILE).write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="arena is corrupt"):
        woodpecker.load(tmp_path / "p")


@pytest.mark.parametrize("edit, match", [
    (lambda a: a.update(b=["cat", 1, C + 1]), "does not fit"),
    (lambda a: a.update(b=["cat", 1, C - 1]), "overlap"),
    (lambda a: a.update(b=["nowhere", 1, C]), "unknown"),
    (lambda a: a.update(b=["cat", slice_code(1), C + 1]), "does not fit"),
    (lambda a: a.update(a=["b", VIEW, 0], b=["a", slice_code(1), 0]), "unknown or unplaced"),
])
def test_corrupt_alias_is_refused(edit, match, tmp_path):
    woodpecker.compile(_fire(1), engines="numpy", threads=1).save(tmp_path / "p")
    doc = json.loads((tmp_path / "p" / PLAN_FILE).read_text())
    edit(doc["arena"]["aliases"])
    (tmp_path / "p" / PLAN_FILE).write_text(json.dumps(doc))
    with pytest.raises(PlanError, match=f"arena is corrupt: .*{match}"):
        woodpecker.load(tmp_path / "p")


def _dense_block():
    """x → conv f0; then three dense layers, each a conv of the Concat of every feature map
    before it (DenseNet's block), the last Concat read by a final conv: every layer's Concat
    begins the next one's inputs."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["f0"])]
    inits = {"w0": rand(C, C, 1, 1, seed=1)}
    feats = ["f0"]
    for i in range(1, 4):
        nodes.append(helper.make_node("Concat", list(feats), [f"cat{i}"], axis=1))
        nodes.append(helper.make_node("Conv", [f"cat{i}", f"w{i}"], [f"f{i}"], pads=[1, 1, 1, 1]))
        inits[f"w{i}"] = rand(2, C + 2 * (i - 1), 3, 3, seed=i + 1) * 0.3
        feats.append(f"f{i}")
    nodes.append(helper.make_node("Concat", list(feats), ["cat4"], axis=1))
    nodes.append(helper.make_node("Conv", ["cat4", "wy"], ["y"]))
    inits["wy"] = rand(C, C + 6, 1, 1, seed=9)
    return make_model(nodes, [("x", [1, C, HW, HW])], [("y", [1, C, HW, HW])], inits)


def test_dense_block_concats_are_views_of_the_last(tmp_path):
    """Every feature map is written once, in place, into the block's last Concat; each
    earlier Concat is a view of its first channels — no copies (NCHW at batch 1: each view is
    contiguous, so any reader may read it)."""
    model = _dense_block()
    compiled = woodpecker.compile(model, engines="numpy", threads=1)
    aliases = compiled.plan.arena.aliases
    offsets = {"f0": 0, "f1": C, "f2": C + 2, "f3": C + 4}
    assert {k: v for k, v in aliases.items() if k.startswith("f")} == \
        {f: ("cat4", 1, o) for f, o in offsets.items()}
    assert {k: v for k, v in aliases.items() if k.startswith("cat")} == \
        {f"cat{i}": ("cat4", slice_code(1), 0) for i in (1, 2, 3)}
    x = rand(1, C, HW, HW, seed=4)
    np.testing.assert_allclose(compiled(x), ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    plain = woodpecker.compile(model, engines="numpy", threads=1, arena=False)
    np.testing.assert_array_equal(compiled(x), plain(x))
    compiled.save(tmp_path / "p")
    loaded = woodpecker.load(tmp_path / "p")
    assert loaded.plan.arena.aliases == aliases
    np.testing.assert_array_equal(loaded(x), compiled(x))
