"""The library of each library region is chosen on the whole plan: ONNX Runtime's regions of a
plan with generated kernels move to OpenVINO where the plan runs faster there, checked
against the plan's outputs first (selection/libraries.py)."""

from __future__ import annotations

import io

import numpy as np
import pytest

import woodpecker
from tests.helpers import REGIONS, ort_run, rand
from tests.runtime.test_mixed_engines import tuned
from woodpecker.assembly import AssemblyOptions
from woodpecker.engines import names
from woodpecker.engines.base import BuildContext
from woodpecker.engines.choice import Choice
from woodpecker.engines.registry import choose
from woodpecker.target import Target

ENGINES = (names.HALIDE, names.ONNXRUNTIME, names.OPENVINO, names.NUMPY)


def test_regions_are_runs_of_library_nodes_split_by_other_engines():
    from woodpecker.ir.graph import Graph
    from woodpecker.selection.libraries import library_regions

    g = Graph("g")
    engines = ["onnxruntime", "numpy", "onnxruntime", "halide", "numpy", "openvino", "halide",
               "numpy"]
    for k in range(len(engines)):
        g.add_node("Relu", [], [], {}, f"n{k}")
    choices = {f"n{k}": Choice(e) for k, e in enumerate(engines)}
    assert library_regions(g, choices) == [["n0", "n2"], ["n5"]]


@pytest.mark.parametrize("ratio", [0.5, 1.5])
def test_a_region_moves_to_openvino_only_where_the_plan_runs_faster(tmp_path, monkeypatch,
                                                                    ratio):
    """Timed for real; `ratio` replaces the paired ratio the decision reads, to reach both
    branches. Either way the plan matches ONNX Runtime."""
    from woodpecker.assembly import assemble
    from woodpecker.runtime.compiled import CompiledModel
    from woodpecker.selection import compare
    from woodpecker.selection.libraries import REWRITE, choose_libraries

    model, graph, log = tuned(tmp_path)
    ctx = BuildContext(1, graph.opset)
    generated = woodpecker.compile(model, engines="halide,numpy", tuning_log=log.path,
                                   threads=1).plan.choices
    first = graph.nodes[0].name
    choices = {n.name: generated[n.name] if n.name == first else
               Choice(choose(n, list(ENGINES), ctx)) for n in graph.nodes}
    assert names.ONNXRUNTIME in {c.engine for c in choices.values()}
    monkeypatch.setattr(compare, "paired_ratio", lambda times, base, other: ratio)
    assembly = AssemblyOptions(ENGINES, ctx, Target.parse("cpu", 1), {}, schedule=REGIONS)
    records = choose_libraries(graph, choices, assembly, runs=4, out=io.StringIO())
    assert records[0]["candidate"] == "every library region on openvino"
    assert records[0]["paired_ratio"] == ratio and records[0]["kept"] == (ratio < 1)
    # last: the regions of Woodpecker's nodes against those of the file's, by the margin
    assert records[-1]["candidate"] == REWRITE and records[-1]["kept"] == (ratio < 1)
    assert (graph.source is None) == (ratio < 1)
    engines = {c.engine for c in choices.values()}
    assert (names.OPENVINO in engines) == (ratio < 1)
    assert (names.ONNXRUNTIME in engines) == (ratio > 1)
    assert choices[first].engine == names.HALIDE
    plan = CompiledModel(assemble(graph, choices, assembly))
    x = rand(1, 8, 12, 12, seed=4)
    np.testing.assert_allclose(plan(x), ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_no_trial_starts_that_would_end_past_the_deadline(tmp_path, monkeypatch):
    """The stage keeps its first plan's build time for the plan built after it and starts a
    trial only where the longest so far (at first: a build and the timing) still fits: with
    a second left and a first plan that took two to build, it tries nothing."""
    import time

    from woodpecker.deadline import Deadline
    from woodpecker.selection import libraries

    model, graph, log = tuned(tmp_path)
    ctx = BuildContext(1, graph.opset)
    choices = {n.name: Choice(choose(n, list(ENGINES), ctx)) for n in graph.nodes}
    before = dict(choices)
    assembly = AssemblyOptions(ENGINES, ctx, Target.parse("cpu", 1), {}, schedule=REGIONS)
    built = libraries._Plan.__init__

    def slow_build(self, *args, **kwargs):
        built(self, *args, **kwargs)
        time.sleep(2.0)

    monkeypatch.setattr(libraries._Plan, "__init__", slow_build)
    start = time.monotonic()
    records = libraries.choose_libraries(graph, choices, assembly, runs=4, out=io.StringIO(),
                                         deadline=Deadline.after(3.0))
    assert records == [] and choices == before
    assert time.monotonic() - start < 3.0


def test_a_compile_with_both_libraries_records_the_choice(tmp_path, monkeypatch):
    """Every decision made to keep its candidate: the plan check keeps the tuned kernels, the
    regions move to OpenVINO; the plan matches ONNX Runtime, saved and loaded."""
    from woodpecker.selection import compare

    model, graph, log = tuned(tmp_path)
    monkeypatch.setattr(compare, "paired_ratio", lambda times, base, other: 0.5)
    compiled = woodpecker.compile(model, engines=",".join(ENGINES), tuning_log=log.path,
                                  threads=1, progress=io.StringIO())
    record = compiled.plan.meta["library_choice"]
    assert record and record[0]["kept"] and record[0]["engine"] == names.OPENVINO
    assert {names.HALIDE, names.OPENVINO} <= set(compiled.plan.engines)
    assert names.ONNXRUNTIME not in compiled.plan.engines
    x = rand(1, 8, 12, 12, seed=4)
    want = ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(compiled(x), want, rtol=1e-4, atol=1e-5)
    compiled.save(tmp_path / "p")
    np.testing.assert_allclose(woodpecker.load(tmp_path / "p")(x), want, rtol=1e-4, atol=1e-5)


def test_a_kernel_that_fails_in_the_plan_goes_back_to_its_library(tmp_path, monkeypatch):
    """A tuned kernel that passed alone but fails when the plan runs it (issue 50's tuned run
    on PP-OCR's recognizer: weights handed over in another rank) is reported and its nodes
    run on their library; the compile goes on and the plan matches ONNX Runtime. Here the
    first conv's kernel is made to fail once the stages that run whole plans begin."""
    from woodpecker.engines.halide import aot
    from woodpecker.errors import KernelFailure
    from woodpecker.selection import pipeline

    model, graph, log = tuned(tmp_path)
    first = graph.nodes[0].name
    failing: dict = {}
    real_check, real_stage = aot.AotKernel._check, pipeline._in_the_plan

    def check(self, rc):
        if self.path.name == failing.get("file"):
            raise KernelFailure(f"Halide kernel {self.path.name} failed (-43): made to fail",
                                self.path.name)
        return real_check(self, rc)

    def stage(graph, choices, *args, **kwargs):
        if "file" not in failing:
            failing["file"] = choices[first].kernel.file
        return real_stage(graph, choices, *args, **kwargs)

    monkeypatch.setattr(aot.AotKernel, "_check", check)
    monkeypatch.setattr(aot, "CHAIN_MAX_BUFFERS", 0)    # every call through `_check`
    monkeypatch.setattr(pipeline, "_in_the_plan", stage)
    compiled = woodpecker.compile(model, engines="halide,onnxruntime,numpy",
                                  tuning_log=log.path, threads=1, library_first=False,
                                  progress=io.StringIO())
    (record,) = compiled.plan.meta["kernels_failed"]
    assert record["file"] == failing["file"] and first in record["nodes"]
    assert compiled.plan.choices[first].engine != names.HALIDE
    x = rand(1, 8, 12, 12, seed=4)
    np.testing.assert_allclose(compiled(x), ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
