"""A plan stores each weight once and a save over an older plan leaves none of its files
(issue 76: resnet18's library-first plan was 90 MB for a 45 MB model — its weights in
weights.bin and again in the session's model — and a plan saved over another kept the old
one's step models)."""

from __future__ import annotations

import numpy as np
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand
from woodpecker.runtime.plan import WEIGHTS_FILE


def _big_weights_model():
    """A 64→256→64 MLP: 32,768 weights in two constants, above the stored minimum."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    return make_model(nodes, [("x", [2, 64])], [("y", [2, 64])],
                      {"w1": rand(64, 256, seed=1), "w2": rand(256, 64, seed=2)})


def _size(d) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def test_a_library_plan_stores_its_weights_once(tmp_path):
    model = _big_weights_model()
    m = woodpecker.compile(model, threads=1)
    d = tmp_path / "p.wpk"
    m.save(d)
    weights = 2 * 64 * 256 * 4
    assert (d / WEIGHTS_FILE).stat().st_size < 4096 * 4 + 1024
    assert _size(d) < 1.3 * weights + 64 * 1024
    x = rand(2, 64, seed=3)
    want = ort_run(model, {"x": x})[0]
    loaded = woodpecker.load(d)
    np.testing.assert_allclose(loaded.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    again = tmp_path / "again.wpk"
    loaded.save(again)                                  # a loaded plan saved again
    np.testing.assert_allclose(woodpecker.load(again).run({"x": x})["y"], want, rtol=1e-4,
                               atol=1e-4)


def test_a_weight_a_numpy_step_reads_is_still_stored(tmp_path):
    model = _big_weights_model()
    m = woodpecker.compile(model, threads=1, engines="numpy")
    m.save(tmp_path / "p.wpk")
    assert (tmp_path / "p.wpk" / WEIGHTS_FILE).stat().st_size >= 2 * 64 * 256 * 4
    x = rand(2, 64, seed=3)
    np.testing.assert_allclose(woodpecker.load(tmp_path / "p.wpk").run({"x": x})["y"],
                               ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def _named(d) -> set[str]:
    """The files plan.json's engine sections name (and plan.json, weights.bin)."""
    import json

    from woodpecker.engines.registry import get_engine

    doc = json.loads((d / "plan.json").read_text())
    return {"plan.json", WEIGHTS_FILE} | {
        f for engine, section in doc["engines"].items()
        for f in get_engine(engine).artifact_files(section)}


def test_a_save_over_another_plan_leaves_none_of_its_files(tmp_path):
    model = _big_weights_model()
    d = tmp_path / "p.wpk"
    woodpecker.compile(model, threads=1, library_first=False,
                       engines="onnxruntime,numpy").save(d)
    first = {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()}
    assert first == _named(d) and len(first) > 2
    (d / "onnxruntime" / "step7.onnx").write_bytes(b"an older plan's step")
    woodpecker.compile(model, threads=1, engines="numpy").save(d)   # no library step
    assert {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()} == _named(d)
    assert not (d / "onnxruntime").exists()
    x = rand(2, 64, seed=3)
    np.testing.assert_allclose(woodpecker.load(d).run({"x": x})["y"],
                               ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
