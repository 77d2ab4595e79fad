"""A light runtime: loading and running a saved Halide + ONNX Runtime plan, in a fresh process,
imports neither the compiler, the tuner, selection, onnx, scipy, Halide's compiler module, nor
any engine the plan does not use (torch)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REGIONS, ort_run, rand
from tests.selection.test_per_node import _convnet, _tuned_log

pytest.importorskip("halide")

SCRIPT = """
import json, sys
import numpy as np
import woodpecker
model = woodpecker.load(sys.argv[1])
np.save(sys.argv[3], model(np.load(sys.argv[2])))
print(json.dumps(sorted(sys.modules)))
"""

# halide: Halide's compiler module (~100 MiB resident); the plan's kernels and runtime are
# shared objects of their own
FORBIDDEN = ("torch", "onnx", "scipy", "matplotlib", "halide", "woodpecker.compiler",
             "woodpecker.tune", "woodpecker.selection", "woodpecker.assembly",
             "woodpecker.frontend", "woodpecker.passes", "woodpecker.bench", "woodpecker.zoo",
             "woodpecker.engines.torch_engine", "woodpecker.frontend.onnx_export")


def _mixed_plan(tmp_path_factory):
    """The convnet's first two tasks on tuned Halide kernels, the rest on ONNX Runtime."""
    from woodpecker.assembly import AssemblyOptions, assemble
    from woodpecker.engines.base import BuildContext
    from woodpecker.engines.choice import Choice, KernelSpec
    from woodpecker.engines.halide.templates import template_module
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import optimize
    from woodpecker.runtime.compiled import CompiledModel
    from woodpecker.target import Target
    from woodpecker.tune.extract import extract_tasks
    from woodpecker.tune.records import TuningLog

    model, log_path = _tuned_log(tmp_path_factory, "first")
    graph = import_onnx(model)
    optimize(graph)
    choices = {n.name: Choice("onnxruntime") for n in graph.nodes}
    log = TuningLog(log_path)
    for g in extract_tasks(graph)[:2]:
        rec = log.best(g.task.key)
        kernel = template_module(rec.template).build(g.task, rec.config, 2)
        for name in g.nodes:
            choices[name] = Choice("halide", KernelSpec(rec.template, g.task.kind,
                                                        dict(rec.config), g.task.to_json(),
                                                        kernel.path.name))
    ctx, target = BuildContext(2, graph.opset), Target.parse("cpu", 2)
    plan = assemble(graph, choices, AssemblyOptions(("halide", "onnxruntime", "numpy"), ctx,
                                                    target, {}, schedule=REGIONS))
    return model, CompiledModel(plan)


def test_loading_and_running_a_plan_imports_only_what_it_uses(tmp_path_factory, tmp_path):
    model, compiled = _mixed_plan(tmp_path_factory)
    assert {"halide", "onnxruntime"} <= set(compiled.plan.engines)
    compiled.save(tmp_path / "plan")
    x = rand(1, 8, 10, 10, seed=9)
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "plan"),
                           str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    modules = json.loads(proc.stdout.strip().splitlines()[-1])
    loaded = [m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert loaded == []
    assert "woodpecker.engines.halide.engine" in modules
    assert "woodpecker.engines.ort_engine" in modules
    got = np.load(tmp_path / "y.npy")
    want = ort_run(_convnet(), {"x": x})[0]
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))
    np.testing.assert_array_equal(got, compiled(x))


def test_a_saved_plan_holds_each_engines_artifacts_and_checks_them(tmp_path_factory, tmp_path):
    """The ONNX Runtime steps' models and the Halide kernels are saved by their engines and
    checked on load: an edited model file is refused with one PlanError line."""
    from woodpecker.errors import PlanError
    from woodpecker.runtime.compiled import load

    _, compiled = _mixed_plan(tmp_path_factory)
    compiled.save(tmp_path / "plan")
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    models = doc["engines"]["onnxruntime"]["models"]
    assert models and all((tmp_path / "plan" / m["file"]).is_file() for m in models.values())
    assert doc["engines"]["halide"]["kernels"]
    assert all(c["engine"] in ("halide", "onnxruntime", "numpy") for c in doc["choices"].values())
    first = next(iter(models.values()))["file"]
    path = tmp_path / "plan" / first
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(PlanError, match="sha256 differs"):
        load(tmp_path / "plan")


def test_a_loaded_plan_saves_again_without_the_kernel_cache(tmp_path_factory, tmp_path,
                                                            monkeypatch):
    """Saving a loaded plan copies its engines' artifacts from the folder it was loaded from:
    with an empty kernel cache, the new copy still loads and gives the same outputs."""
    import shutil

    from woodpecker.runtime.compiled import load

    _, compiled = _mixed_plan(tmp_path_factory)
    compiled.save(tmp_path / "a")
    x = rand(1, 8, 10, 10, seed=9)
    want = load(tmp_path / "a")(x)
    monkeypatch.setenv("WOODPECKER_CACHE", str(tmp_path / "empty-cache"))
    load(tmp_path / "a").save(tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    np.testing.assert_array_equal(load(tmp_path / "b")(x), want)
    assert not (tmp_path / "empty-cache").exists()
