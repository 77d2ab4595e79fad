"""AGO's partitioning (partition/ago.py, partition/weights.py): on random DAGs Algorithm 1's
partition covers every node once, its quotient graph has no cycle and no merged subgraph
reaches the threshold; the paper's own example (Fig. 9); Eq. (1) on real operators."""

from __future__ import annotations

import math
import random

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

import woodpecker
from tests.helpers import conv_bn_relu_residual
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.partition.ago import (
    cluster,
    graph_edges,
    is_acyclic_partition,
    partition_graph,
    partition_stats,
    singletons,
    topological_stages,
)
from woodpecker.partition.weights import complexity, loop_extents, op_weight
from woodpecker.passes import DEFAULT, optimize


@st.composite
def weighted_dags(draw, max_nodes=40):
    """(nodes in a shuffled order, edges, weights, threshold)."""
    n = draw(st.integers(1, max_nodes))
    p = draw(st.floats(0.0, 0.5))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    edges = [(f"n{i}", f"n{j}") for i in range(n) for j in range(i + 1, n) if rng.random() < p]
    weights = {f"n{i}": draw(st.floats(0.0, 60.0)) for i in range(n)}
    nodes = [f"n{i}" for i in range(n)]
    rng.shuffle(nodes)
    return nodes, edges, weights, draw(st.floats(0.0, 200.0))


@settings(max_examples=200, deadline=None)
@given(weighted_dags())
def test_every_partition_is_acyclic_covers_each_node_once_and_respects_the_threshold(d):
    nodes, edges, weights, threshold = d
    groups = cluster(nodes, edges, weights, threshold)
    assert sorted(n for g in groups for n in g) == sorted(nodes)
    assert is_acyclic_partition(nodes, edges, groups)
    for g in groups:
        if len(g) > 1:
            assert sum(weights[n] for n in g) < threshold
    assert cluster(nodes, edges, weights, threshold) == groups       # deterministic


@settings(max_examples=100, deadline=None)
@given(weighted_dags(max_nodes=12))
def test_the_acyclicity_check_agrees_with_reachability(d):
    """is_acyclic_partition against Def. 1 itself: no two groups with paths both ways."""
    nodes, edges, _, _ = d
    rng = random.Random(len(nodes) * 7 + len(edges))
    groups: dict[int, list[str]] = {}
    for n in nodes:
        groups.setdefault(rng.randrange(max(1, len(nodes) // 2)), []).append(n)
    reach = {n: {n} for n in nodes}
    for _ in nodes:                                 # transitive closure, small graphs
        for u, v in edges:
            reach[u] |= reach[v]
    gs = list(groups.values())
    def1 = not any(any(v in reach[u] for u in a for v in b) and
                   any(u in reach[v] for u in a for v in b)
                   for i, a in enumerate(gs) for b in gs[i + 1:])
    assert is_acyclic_partition(nodes, edges, gs) == def1


def test_the_papers_example_fig_9():
    """Conv1 → Conv2 → Conv3 and Conv1 → Conv3: grouping Conv1 with Conv3 alone would make a
    cycle; Conv3 is not in Conv1's affix set (stages 1 and 3), so it never happens."""
    nodes = ["conv1", "conv2", "conv3"]
    edges = [("conv1", "conv2"), ("conv2", "conv3"), ("conv1", "conv3")]
    succ = {"conv1": {"conv2", "conv3"}, "conv2": {"conv3"}}
    assert topological_stages(nodes, succ) == {"conv1": 1, "conv2": 2, "conv3": 3}
    assert not is_acyclic_partition(nodes, edges, [["conv1", "conv3"], ["conv2"]])
    w = {"conv1": 10.0, "conv2": 10.0, "conv3": 12.0}
    # the heaviest (conv3) takes its lightest affix node (conv2); conv1 cannot join (34 ≥ 30)
    assert cluster(nodes, edges, w, 30.0) == [["conv1"], ["conv2", "conv3"]]
    assert cluster(nodes, edges, w, 35.0) == [["conv1", "conv2", "conv3"]]
    assert cluster(nodes, edges, w, 5.0) == [["conv1"], ["conv2"], ["conv3"]]
    with pytest.raises(ValueError, match="cycle"):
        topological_stages(nodes, {"conv1": {"conv2"}, "conv2": {"conv1"}})


def test_weights_follow_eq_1_on_a_real_graph():
    g = import_onnx(conv_bn_relu_residual())
    optimize(g, DEFAULT)
    conv = next(n for n in g.nodes if n.op == "FusedConv")
    # 8 output channels × 6 × 6 outputs (batch 1 is no loop), 8 input channels × 3 × 3 window
    assert loop_extents(conv) == (8, 6, 6, 8, 3, 3)
    assert complexity(conv) == pytest.approx(math.log(8) ** 2 * math.log(6) ** 2 *
                                             math.log(3) ** 2)
    assert op_weight(conv, slope=2.0, bias=1.0) == pytest.approx(2 * complexity(conv) + 1)
    p = partition_graph(g)
    assert is_acyclic_partition([n.name for n in g.nodes], graph_edges(g),
                                [s.nodes for s in p.subgraphs])
    one = partition_stats(singletons(g))
    assert one.subgraphs == len(g.nodes) and 0 < one.jain <= 1
    stats = partition_stats(p)
    assert stats.subgraphs <= one.subgraphs
    assert stats.mean_weight * stats.subgraphs == pytest.approx(one.mean_weight * one.subgraphs)


def test_inspect_shows_the_partition(tmp_path, capsys):
    import json

    import onnx

    from tests.helpers import conv_dag_model
    from woodpecker.cli import main

    steps = [("pw", 0, 0), ("relu", 1, 0), ("dw", 2, 0), ("pw", 3, 0), ("add", 4, 0),
             ("conv", 5, 0), ("pw", 0, 0), ("add", 6, 7)]
    path = tmp_path / "m.onnx"
    onnx.save(conv_dag_model(steps, 8, 5), path)
    plan = tmp_path / "plan"
    assert main(["compile", str(path), "-o", str(plan), "--engines", "numpy"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(plan), "--partition", "--runs", "1", "--json",
                 str(tmp_path / "p.json"), "--plot", str(tmp_path / "p.png")]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "p.json").read_text())
    names = [n for s in doc["subgraphs"] for n in s["nodes"]]
    assert sorted(names) == sorted(n.name for n in woodpecker.load(plan).graph.nodes)
    assert f"{len(doc['subgraphs'])} subgraphs" in out and "numpy" in out
    assert (tmp_path / "p.png").stat().st_size > 0
