"""IR maintenance on random DAGs: toposort keeps every edge forward; DCE keeps exactly the nodes
that reach an output."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.ir.graph import Graph


@st.composite
def random_dag(draw):
    n = draw(st.integers(1, 25))
    edges = {i: sorted(draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else [])
             for i in range(n)}
    outputs = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3))
    seed = draw(st.integers(0, 2**16))
    return n, edges, sorted(outputs), seed


def _build(n, edges, outputs, seed) -> Graph:
    g = Graph()
    x = g.value("x", (1,), "float32")
    g.inputs.append(x)
    vals = [g.value(f"v{i}", (1,), "float32") for i in range(n)]
    order = list(range(n))
    random.Random(seed).shuffle(order)  # insert in a scrambled order
    for i in order:
        ins = [vals[j] for j in edges[i]] or [x]
        g.add_node("Add" if len(ins) == 2 else "Relu", ins, [vals[i]], name=f"n{i}")
    g.outputs = [vals[i] for i in outputs]
    return g


@settings(max_examples=200, deadline=None)
@given(random_dag())
def test_toposort_orders_every_edge(dag):
    g = _build(*dag)
    g.toposort()
    pos = {id(n): k for k, n in enumerate(g.nodes)}
    for n in g.nodes:
        for v in n.inputs:
            if v.producer is not None:
                assert pos[id(v.producer)] < pos[id(n)]
    assert len(g.nodes) == dag[0]


@settings(max_examples=200, deadline=None)
@given(random_dag())
def test_dce_keeps_exactly_the_ancestors_of_outputs(dag):
    n, edges, outputs, seed = dag
    g = _build(*dag)
    live, stack = set(), list(outputs)
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack.extend(edges[i])
    removed = g.dce()
    assert removed == n - len(live)
    assert {int(node.name[1:]) for node in g.nodes} == live


def test_replace_uses_rewires_consumers_and_outputs():
    g = Graph()
    a, b, c = (g.value(k, (1,), "float32") for k in "abc")
    g.inputs.append(a)
    g.add_node("Relu", [a], [b])
    n2 = g.add_node("Relu", [b], [c])
    g.outputs = [b, c]
    g.replace_uses(b, a)
    assert n2.inputs[0] is a and g.outputs[0] is a and not b.consumers
