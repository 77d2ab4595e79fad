"""The whole-plan fusion check (selection/fusion.confirm_fusions): a plan running an inverted
residual block as one generated kernel is timed against the same plan with the block taken
apart, each part on its tuned kernel; the fused node stays exactly when the paired ratio is
under 1, and the plan either way computes what ONNX Runtime does."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tests.helpers import REGIONS, ort_run, rand, seed_tuning_log
from tests.passes.test_fuse_chain import BLOCK, SHAPE, _model

pytest.importorskip("halide")


def _fused_plan(tmp_path):
    """The block's AGO graph, its seeded tuning log, the fused node on its Halide kernel."""
    from woodpecker.assembly import AssemblyOptions
    from woodpecker.engines.base import BuildContext
    from woodpecker.engines.choice import Choice
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import AGO, optimize
    from woodpecker.selection.per_node import best_tuned_spec
    from woodpecker.target import Target
    from woodpecker.tasks import task_from_node

    model = _model(BLOCK)
    graph = import_onnx(model)
    optimize(graph, AGO)
    log = seed_tuning_log(graph, tmp_path / "log.jsonl", parts=True)
    (node,) = graph.nodes
    spec = best_tuned_spec(task_from_node(node), log, 2, io.StringIO())
    assert spec is not None and spec.template.endswith("conv_chain")
    choices = {node.name: Choice("halide", spec, "test")}
    ctx = BuildContext(2, graph.opset)
    assembly = AssemblyOptions(("halide", "numpy"), ctx, Target.parse("cpu", 2),
                               {}, schedule=REGIONS)
    return model, graph, log, choices, assembly


def _matches_onnx_runtime(model, graph, choices, assembly):
    from woodpecker.assembly import assemble
    from woodpecker.runtime.compiled import CompiledModel

    x = rand(*SHAPE, seed=5)
    got = CompiledModel(assemble(graph.copy(), choices, assembly))(x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("apart_faster", [False, True])
def test_the_fused_plan_stays_only_when_the_whole_plan_is_faster(tmp_path, monkeypatch,
                                                                   apart_faster):
    """Timed for real; the second case makes the apart plan's runs count as faster (the
    ratio the check compares, not its timing, is replaced) to reach the unfusing branch."""
    from woodpecker.selection import compare, fusion

    model, graph, log, choices, assembly = _fused_plan(tmp_path)
    (fused,) = graph.nodes
    if apart_faster:
        monkeypatch.setattr(compare, "paired_ratio", lambda times, base, other: 1.2)
    record = fusion.confirm_fusions(graph, choices, log, assembly, runs=4, out=io.StringIO())
    assert record["nodes"] == [fused.name]
    assert record["candidate_ms"] > 0 and record["against_ms"] > 0
    assert record["kept"] == (record["paired_ratio"] < 1.0)
    if record["kept"]:
        assert [n.name for n in graph.nodes] == [fused.name]
    else:   # the default pipeline's 1×1 and separable conv, each on its tuned kernel
        assert [n.op for n in graph.nodes] == ["FusedConv", "FusedSeparableConv"]
        assert set(choices) == {n.name for n in graph.nodes}
        assert all(choices[n.name].engine == "halide" and choices[n.name].kernel is not None
                   for n in graph.nodes)
    _matches_onnx_runtime(model, graph, choices, assembly)


def test_no_fusion_on_a_generated_kernel_means_no_check(tmp_path):
    from woodpecker.engines.choice import Choice
    from woodpecker.selection.fusion import confirm_fusions

    model, graph, log, choices, assembly = _fused_plan(tmp_path)
    (node,) = graph.nodes
    choices[node.name] = Choice("numpy", why="test")
    assert confirm_fusions(graph, choices, log, assembly, runs=4, out=io.StringIO()) is None
    assert graph.nodes == [node]


def test_a_chain_left_on_a_library_is_the_default_pipelines_nodes(tmp_path):
    """A chain selection put on a library is taken apart (its parts on their library
    preference), so the library runs the default pipeline's graph; one on a generated kernel
    stays."""
    from woodpecker.engines.choice import Choice
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import DEFAULT, optimize
    from woodpecker.selection.fusion import unfuse_on_libraries

    model, graph, log, choices, assembly = _fused_plan(tmp_path)
    allowed, ctx = ["halide", "onnxruntime", "numpy"], assembly.context
    assert unfuse_on_libraries(graph, choices, allowed, ctx) == []
    (node,) = graph.nodes
    choices[node.name] = Choice("onnxruntime", why="test")
    assert unfuse_on_libraries(graph, choices, allowed, ctx) == [node.name]
    default = import_onnx(model)
    optimize(default, DEFAULT)
    assert [n.op for n in graph.nodes] == [n.op for n in default.nodes]
    assert set(choices) == {n.name for n in graph.nodes}
    assert all(choices[n.name].engine == "onnxruntime" for n in graph.nodes)
    _matches_onnx_runtime(model, graph, choices, assembly)


@pytest.mark.parametrize("ratio", [0.5, 1.5])
def test_an_ago_compile_keeps_the_faster_of_its_plan_and_the_unfused_one(tmp_path,
                                                                          monkeypatch, ratio):
    """compile with AGO's passes and a tuning log, a fusion left in its plan: the plan is
    timed (for real) against the plan the same compile makes without AGO's fusions from the
    same log, and the faster comes back, saying so and keeping the options asked for; the
    ratio the comparison decides on is set (`ratio`: the fused plan's time over the unfused
    one's) to reach both branches, the whole-plan fusion check's kept at fused. The block's
    parts have no tuned kernel, so per-fusion weighing keeps it fused. A compile without AGO's
    passes makes no such comparison."""
    import woodpecker
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import AGO, DEFAULT, optimize
    from woodpecker.selection import compare, fusion

    monkeypatch.setattr(compare, "paired_ratio",
                        lambda times, base, other: ratio if base == fusion.WITHOUT_AGO else 0.5)
    model = _model(BLOCK)
    graph = import_onnx(model)
    optimize(graph, AGO)
    log = seed_tuning_log(graph, tmp_path / "log.jsonl")
    compiled = woodpecker.compile(model, engines="halide,numpy", threads=2, passes=AGO,
                                  tuning_log=str(log.path), progress=io.StringIO())
    record = compiled.plan.meta["against_unfused"]
    assert record["candidate_ms"] > 0 and record["against_ms"] > 0
    assert record["paired_ratio"] == ratio and record["kept"] == (ratio < 1)
    assert compiled.plan.meta["options"]["passes"] == list(AGO)   # what was asked for
    assert set(compiled.plan.meta["passes"]) == set(AGO if ratio < 1 else DEFAULT)
    assert any(n.op == "FusedConvChain" for n in compiled.graph.nodes) == (ratio < 1)
    x = rand(*SHAPE, seed=3)
    np.testing.assert_allclose(compiled(x), ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    plain = woodpecker.compile(model, engines="halide,numpy", threads=2, passes=DEFAULT,
                               tuning_log=str(log.path), progress=io.StringIO())
    assert "against_unfused" not in plain.plan.meta
