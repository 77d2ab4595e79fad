"""OpenVINO's compile of a large model is bounded in time (engines/openvino_probe.py): a child
compiles first and is killed past the limit; the in-process compile then loads the child's
cache entry; two overruns decline the model, which the other libraries then run. The
thresholds are lowered here so that small models take the large-model path (a 3,000-Relu
chain took OpenVINO 66 s before: the whole compile waited for it)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run
from woodpecker.errors import EngineError

pytest.importorskip("openvino")
probe = importlib.import_module("woodpecker.engines.openvino_probe")


def _chain(n: int = 60):
    nodes = [helper.make_node("Relu" if i % 2 else "Neg", [f"v{i}"], [f"v{i + 1}"])
             for i in range(n)]
    return make_model(nodes, [("v0", [1, 16])], [(f"v{n}", [1, 16])])


def _read(model):
    import openvino as ov

    core = ov.Core()
    data = model.SerializeToString()
    read = core.read_model(data)
    return core, read, data, len(read.get_ops())


def test_a_large_model_compiles_in_a_child_then_from_the_cache(tmp_path, monkeypatch):
    calls = []
    child = probe._child_compiles

    def counted(path, config, limit_s):
        calls.append(dict(config))
        return child(path, config, limit_s)

    monkeypatch.setattr(probe, "_child_compiles", counted)
    monkeypatch.setattr(probe, "_LEARNED", {})
    model = _chain()
    core, read, data, ops = _read(model)
    config = {"INFERENCE_NUM_THREADS": 1, "CACHE_DIR": str(tmp_path / "ov")}
    compiled = probe.bounded_compile(core, read, data, config, ops, 120.0, probe_ops=10)
    assert len(calls) == 1 and "SNIPPETS_MODE" not in calls[0]
    assert any((tmp_path / "ov").iterdir())            # the child's cache entry
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
    got = compiled.create_infer_request().infer({0: x})
    np.testing.assert_allclose(next(iter(got.values())), ort_run(model, {"v0": x})[0])
    # a small model compiles in-process, no child
    probe.bounded_compile(core, read, data, config, ops, 120.0, probe_ops=ops + 1)
    assert len(calls) == 1


def test_two_overruns_decline_and_the_same_model_is_declined_at_once(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(probe, "_child_compiles",
                        lambda path, config, limit_s: calls.append(config) or False)
    monkeypatch.setattr(probe, "_LEARNED", {})
    core, read, data, ops = _read(_chain())
    config = {"INFERENCE_NUM_THREADS": 1, "CACHE_DIR": str(tmp_path / "ov")}
    with pytest.raises(EngineError, match=f"did not compile this {ops}-op model"):
        probe.bounded_compile(core, read, data, config, ops, 1.0, probe_ops=10)
    assert [c.get("SNIPPETS_MODE") for c in calls] == [None, "DISABLE"]
    with pytest.raises(EngineError):
        probe.bounded_compile(core, read, data, config, ops, 1.0, probe_ops=10)
    assert len(calls) == 2                              # learned: no child this time


def test_a_child_killed_at_its_limit_leaves_the_model_to_onnx_runtime(monkeypatch):
    """End to end: OpenVINO given no time at all for this 'large' model is declined, and the
    compile's library-first plan runs on ONNX Runtime with ONNX Runtime's outputs."""
    ov_engine = importlib.import_module("woodpecker.engines.openvino_engine")
    monkeypatch.setattr(ov_engine, "OPENVINO_PROBE_OPS", 10)
    monkeypatch.setattr(ov_engine, "OPENVINO_COMPILE_LIMIT_S", 0.01)
    monkeypatch.setattr(probe, "_LEARNED", {})
    model = _chain(40)
    m = woodpecker.compile(model, threads=1)
    assert "openvino" not in m.plan.engines
    x = np.linspace(-2, 2, 16, dtype=np.float32).reshape(1, 16)
    np.testing.assert_allclose(m.run({"v0": x})["v40"], ort_run(model, {"v0": x})[0])
