"""Conv-chain fusion (AGO's intensive fusion, passes/fuse_chain.py) on random DAGs of 1×1,
depthwise and 3×3 convs, ReLUs and Adds: the fused graph computes what ONNX Runtime does, no
chain is left to fuse, and an inverted residual block becomes one node."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import woodpecker
from tests.helpers import conv_dag_model, ort_run, rand
from woodpecker.passes import AGO
from woodpecker.passes.fuse_chain import fuse_chains

C, HW = 8, 5
SHAPE = [1, C, HW, HW]
OPS = ("dw", "pw", "conv", "relu", "add")


def _model(steps: list[tuple[str, int, int]]):
    return conv_dag_model(steps, C, HW)


BLOCK = [("pw", 0, 0), ("relu", 1, 0), ("dw", 2, 0), ("relu", 3, 0), ("pw", 4, 0),
         ("add", 5, 0)]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 50), st.integers(0, 50)),
                min_size=1, max_size=8))
@example(BLOCK)
@example([("conv", 0, 0), ("relu", 1, 0), ("pw", 2, 0), ("pw", 0, 0), ("dw", 4, 0)])
def test_fusion_keeps_outputs_and_leaves_no_chain(steps):
    model = _model(steps)
    fused = woodpecker.compile(model, engines="numpy", threads=1, passes=AGO)
    x = rand(*SHAPE, seed=7)
    got, ref = fused.run({"x": x}), ort_run(model, {"x": x})
    for name, r in zip([o.name for o in model.graph.output], ref):
        np.testing.assert_allclose(got[name], r, rtol=1e-4, atol=1e-4)
    assert fuse_chains(fused.graph) == 0


def test_an_inverted_residual_block_becomes_one_node():
    model = _model(BLOCK)
    fused = woodpecker.compile(model, engines="numpy", threads=1, passes=AGO)
    (node,) = [n for n in fused.graph.nodes if n.op == "FusedConvChain"]
    assert len(node.attrs["convs"]) == 3 and len(fused.graph.nodes) == 1
    assert [s["op"] for s in node.attrs["convs"][-1]["epilogue"]] == ["Add"]


def test_a_fused_block_runs_as_one_generated_kernel_and_matches_onnx_runtime(tmp_path):
    """The whole compile: the chain task is extracted, its seed schedule is in the log, the
    plan runs it on Halide (no library allowed), and the output matches ONNX Runtime."""
    import pytest

    pytest.importorskip("halide")
    from tests.helpers import seed_tuning_log
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import optimize

    model = _model(BLOCK)
    graph = import_onnx(model)
    optimize(graph, AGO)
    log = seed_tuning_log(graph, tmp_path / "log.jsonl")
    compiled = woodpecker.compile(model, engines="halide,numpy", threads=2, passes=AGO,
                                  tuning_log=str(log.path))
    (node,) = [n for n in compiled.graph.nodes if n.op != "Transpose"]   # layout conversions
    assert node.op == "FusedConvChain"
    assert compiled.plan.choices[node.name].engine == "halide"
    assert compiled.plan.choices[node.name].kernel.template.endswith("conv_chain")
    x = rand(*SHAPE, seed=3)
    want = ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(compiled(x), want, rtol=1e-4, atol=1e-4)
    # the chain's parts keep their shapes in the NHWC plan: FLOPs, shares, inspect
    assert compiled.generated_flops_share() > 0.99
    assert sum(r["flops"] for r in compiled.node_table()) > 0


def test_compile_fusion_ago_on_the_command_line(tmp_path, capsys):
    import json

    import onnx

    from woodpecker.cli import main

    path = tmp_path / "block.onnx"
    onnx.save(_model(BLOCK), path)
    plan = tmp_path / "plan"
    assert main(["compile", str(path), "-o", str(plan), "--engines", "numpy",
                 "--fusion", "ago"]) == 0
    meta = json.loads((plan / "plan.json").read_text())
    assert meta["model"]["passes"]["fuse_chains"] == 1
    assert main(["compile", str(path), "-o", str(tmp_path / "p2"), "--engines", "numpy"]) == 0
    assert "fuse_chains" not in json.loads((tmp_path / "p2" / "plan.json").read_text())[
        "model"]["passes"]


def test_an_unfused_block_is_the_default_pipelines_nodes():
    """passes/unfuse.py: an inverted residual block taken apart is the 1×1 expansion and a
    separable conv, as the default pipeline leaves it, and computes the same."""
    from collections import Counter

    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import DEFAULT, optimize
    from woodpecker.passes.unfuse import unfuse

    model = _model(BLOCK)
    graph = import_onnx(model)
    optimize(graph, AGO)
    (node,) = graph.nodes
    parts = unfuse(graph, node)
    assert [p.op for p in parts] == ["FusedConv", "FusedSeparableConv"]
    default = import_onnx(model)
    optimize(default, DEFAULT)
    assert Counter(n.op for n in graph.nodes) == Counter(n.op for n in default.nodes)
    assert len(graph.copy().nodes) == 2


@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 50), st.integers(0, 50)),
                min_size=1, max_size=8))
@settings(max_examples=80, deadline=None)
def test_every_chain_taken_apart_gives_the_default_graph(steps):
    from collections import Counter

    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import DEFAULT, optimize
    from woodpecker.passes.unfuse import unfuse

    def kinds(g):   # a Conv and a FusedConv without epilogue are one task
        return Counter("FusedConv" if n.op == "Conv" else n.op for n in g.nodes)

    model = _model(steps)
    graph, default = import_onnx(model), import_onnx(model)
    optimize(graph, AGO)
    optimize(default, DEFAULT)
    for node in [n for n in graph.nodes if n.op == "FusedConvChain"]:
        unfuse(graph, node)
    assert kinds(graph) == kinds(default)
    # every value's readers and producer are nodes of the graph (the arena walks them)
    for v in graph.values.values():
        assert all(c in graph.nodes for c in v.consumers)
        assert v.producer is None or v.producer in graph.nodes
