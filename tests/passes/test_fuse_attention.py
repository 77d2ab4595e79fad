"""Attention fusion (AGO's intensive fusion of MatMul→Softmax→MatMul, passes/fuse_attention.py)
on random multi-head attention graphs: packed or separate Q/K/V projections, heads split by
reshapes, transposes and gathers, masks of several broadcasts, the heads gathered back or not.
The fused graph computes what ONNX Runtime does (numpy reference, the ONNX Runtime engine, and
the generated kernel), the head split is folded into the node's views, nothing is left to
fuse."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand
from woodpecker.passes import AGO
from woodpecker.passes.fuse_attention import fuse_attention

MASKS = {"none": None, "full": lambda h, m: (1, h, m, m), "keys": lambda h, m: (1, 1, 1, m),
         "rows": lambda h, m: (m, m), "heads": lambda h, m: (1, h, 1, m)}


def attention_model(heads: int, m: int, dh: int, packed: bool = True, mask: str = "none",
                    gather_back: bool = True, seed: int = 0):
    """x (m, E = heads·dh) → Q, K, V (1, heads, m, dh) split from one packed projection
    (reshape to (m, 1, 3, heads·dh), transpose, gather) or three; softmax(Q·Kᵀ/√dh + mask)·V;
    gathered back to (m, E) by a transpose and reshape, or left (1, heads, m, dh)."""
    e = heads * dh
    rng = np.random.default_rng(seed)
    inits = {"scale": np.array(dh ** -0.5, np.float32)}
    nodes = []

    def const(name, a):
        inits[name] = np.asarray(a)
        return name

    def split_heads(src, name):
        """(m, e) → (1, heads, m, dh)."""
        nodes.append(helper.make_node("Reshape", [src, const(f"{name}_s", np.array(
            [m, heads, dh], np.int64))], [f"{name}_r"]))
        nodes.append(helper.make_node("Transpose", [f"{name}_r"], [f"{name}_t"],
                                      perm=[1, 0, 2]))
        nodes.append(helper.make_node("Unsqueeze", [f"{name}_t", const(f"{name}_ax", np.array(
            [0], np.int64))], [name]))

    if packed:
        inits["w"] = (rng.standard_normal((e, 3 * e)) / np.sqrt(e)).astype(np.float32)
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["qkv"]))
        nodes.append(helper.make_node("Reshape", ["qkv", const("s3", np.array(
            [m, 3, e], np.int64))], ["qkv3"]))
        nodes.append(helper.make_node("Transpose", ["qkv3"], ["qkv_t"], perm=[1, 0, 2]))
        for i, name in enumerate("qkv"):
            nodes.append(helper.make_node("Gather", ["qkv_t", const(f"i{i}", np.array(
                i, np.int64))], [f"{name}_flat"], axis=0))
            split_heads(f"{name}_flat", name)
    else:
        for name in "qkv":
            inits[f"w{name}"] = (rng.standard_normal((e, e)) / np.sqrt(e)).astype(np.float32)
            nodes.append(helper.make_node("MatMul", ["x", f"w{name}"], [f"{name}_flat"]))
            split_heads(f"{name}_flat", name)
    nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]))
    nodes.append(helper.make_node("MatMul", ["q", "kt"], ["s0"]))
    nodes.append(helper.make_node("Mul", ["s0", "scale"], ["s1"]))
    inputs = [("x", [m, e])]
    scores = "s1"
    if MASKS[mask] is not None:
        inputs.append(("mask", list(MASKS[mask](heads, m))))
        nodes.append(helper.make_node("Add", ["s1", "mask"], ["s2"]))
        scores = "s2"
    nodes.append(helper.make_node("Softmax", [scores], ["p"], axis=-1))
    nodes.append(helper.make_node("MatMul", ["p", "v"], ["ctx"]))
    if gather_back:
        nodes.append(helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[2, 0, 1, 3]))
        nodes.append(helper.make_node("Reshape", ["ctx_t", const("so", np.array(
            [m, e], np.int64))], ["y"]))
        out = ("y", [m, e])
    else:
        nodes.append(helper.make_node("Identity", ["ctx"], ["y"]))
        out = ("y", [1, heads, m, dh])
    return make_model(nodes, inputs, [out], inits)


def feeds(model, seed: int = 1) -> dict:
    out = {}
    for i, inp in enumerate(model.graph.input):
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        out[inp.name] = rand(*shape, seed=seed + i)
    return out


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3), st.integers(2, 9), st.sampled_from([4, 8]), st.booleans(),
       st.sampled_from(sorted(MASKS)), st.booleans())
@example(2, 8, 8, True, "none", True)
def test_fusion_keeps_outputs_and_folds_the_head_split(heads, m, dh, packed, mask,
                                                       gather_back):
    model = attention_model(heads, m, dh, packed, mask, gather_back)
    fused = woodpecker.compile(model, engines="numpy", threads=1, passes=AGO)
    (node,) = [n for n in fused.graph.nodes if n.op == "FusedAttention"]
    # the head split is gone: Q, K and V are read from the projections where they lie
    assert all(v.producer is not None and v.producer.op in ("MatMul", "FusedMatMul")
               for v in node.inputs[:3])
    assert not any(n.op in ("Transpose", "Gather", "Softmax") for n in fused.graph.nodes)
    # (one head: the transposes are reshapes, views already)
    assert (node.attrs["out_perm"] is not None) == (gather_back and heads > 1)
    x = feeds(model)
    got, (want,) = fused.run(x)["y"], ort_run(model, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert fuse_attention(fused.graph) == 0


def test_onnx_runtime_runs_the_fused_node_as_its_parts():
    model = attention_model(2, 6, 4, mask="heads")
    fused = woodpecker.compile(model, engines="onnxruntime,numpy", threads=1, passes=AGO)
    (node,) = [n for n in fused.graph.nodes if n.op == "FusedAttention"]
    assert fused.plan.choices[node.name].engine == "onnxruntime"
    x = feeds(model)
    np.testing.assert_allclose(fused.run(x)["y"], ort_run(model, x)[0], rtol=1e-4, atol=1e-5)


def test_attention_is_left_alone_without_the_ago_passes():
    fused = woodpecker.compile(attention_model(2, 6, 4), engines="numpy", threads=1)
    assert not any(n.op == "FusedAttention" for n in fused.graph.nodes)


@pytest.mark.parametrize("mask", ["none", "full", "keys"])
def test_attention_runs_as_one_generated_kernel_and_matches_onnx_runtime(tmp_path, mask):
    """The whole compile: the attention task is extracted, its seed schedule is in the log,
    the plan runs it on Halide, and the output matches ONNX Runtime."""
    pytest.importorskip("halide")
    from tests.helpers import seed_tuning_log
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import optimize

    model = attention_model(2, 11, 8, mask=mask)
    graph = import_onnx(model)
    optimize(graph, AGO)
    log = seed_tuning_log(graph, tmp_path / "log.jsonl")
    compiled = woodpecker.compile(model, engines="halide,numpy", threads=2, passes=AGO,
                                  tuning_log=str(log.path))
    (node,) = [n for n in compiled.graph.nodes if n.op == "FusedAttention"]
    assert compiled.plan.choices[node.name].engine == "halide"
    assert compiled.plan.choices[node.name].kernel.template.endswith("attention")
    x = feeds(model)
    np.testing.assert_allclose(compiled.run(x)["y"], ort_run(model, x)[0], rtol=1e-4,
                               atol=1e-5)


def _seeded(model, tmp_path, fused: bool, parts: bool):
    """A tuning log with the first seed of the fused attention task and/or of its parts."""
    import random

    from woodpecker.engines.halide.templates import template_module
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import optimize
    from woodpecker.tune.extract import extract_tasks
    from woodpecker.tune.records import TuningLog, TuningRecord

    graph = import_onnx(model)
    optimize(graph, AGO)
    log = TuningLog(tmp_path / "log.jsonl")
    for g in extract_tasks(graph, parts=True):
        if (g.task.kind == "attention" and not fused) or (g.task.kind != "attention" and
                                                          not parts):
            continue
        space = template_module(g.templates[0]).space(g.task)
        config = space.seeds[0] if space.seeds else space.sample(random.Random(0))
        log.append(TuningRecord(task=g.task.key, template=g.templates[0], config=config,
                                cost_s=1e-4, error=None))
    return log


@pytest.mark.parametrize("fused", [True, False])
def test_selection_weighs_the_fused_kernel_against_its_parts(tmp_path, fused, capsys):
    """With kernels for the parts too, the fused node is timed against them and kept or
    replaced by them; without one of its own it is replaced. Either way the plan matches
    ONNX Runtime and records the decision."""
    pytest.importorskip("halide")
    model = attention_model(2, 16, 8, mask="keys")
    log = _seeded(model, tmp_path, fused, True)
    compiled = woodpecker.compile(model, engines="halide,numpy", threads=2, passes=AGO,
                                  tuning_log=str(log.path))
    (record,) = compiled.plan.meta["fusion"]
    assert (record["fused_ms"] is not None) == fused
    nodes = {n.op for n in compiled.graph.nodes}
    if record["fused"]:
        assert "FusedAttention" in nodes and record["fused_ms"] <= record["parts_ms"]
    else:
        assert "FusedAttention" not in nodes and {"StridedView", "Softmax"} <= nodes
    x = feeds(model)
    want = ort_run(model, x)[0]
    np.testing.assert_allclose(compiled.run(x)["y"], want, rtol=1e-4, atol=1e-5)
    compiled.save(tmp_path / "plan")           # fused or apart, the plan loads and runs
    np.testing.assert_allclose(woodpecker.load(tmp_path / "plan").run(x)["y"], want,
                               rtol=1e-4, atol=1e-5)
    from woodpecker.cli import main

    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "plan"), "--runs", "1"]) == 0
    out = capsys.readouterr().out
    said = "kept fused" if record["fused"] else "run apart"
    assert f"fusion {record['node']} (FusedAttention)" in out and said in out


def test_an_unfused_node_is_its_parts():
    """passes/unfuse.py: the node's place taken by its parts, which compute its output."""
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.ops import run_reference
    from woodpecker.passes import optimize
    from woodpecker.passes.unfuse import unfuse

    model = attention_model(3, 5, 4, packed=False, mask="full")
    graph = import_onnx(model)
    optimize(graph, AGO)
    (node,) = [n for n in graph.nodes if n.op == "FusedAttention"]
    parts = unfuse(graph, node)
    assert [p.op for p in parts] == ["StridedView"] * 3 + ["FusedMatMul", "Softmax",
                                                            "MatMul", "Transpose"]
    assert all(p in graph.nodes for p in parts) and node not in graph.nodes
    x = feeds(model)
    env = dict(x)
    for n in graph.nodes:
        args = [None if v is None else v.data if v.data is not None else env[v.name]
                for v in n.inputs]
        for v, a in zip(n.outputs, run_reference(n, args)):
            env[v.name] = a
    np.testing.assert_allclose(env["y"], ort_run(model, x)[0], rtol=1e-4, atol=1e-5)
    # registered in the graph: a copy (what selection's plan variants are built on) has them
    copied = graph.copy()
    assert [n.op for n in copied.nodes] == [n.op for n in graph.nodes]
