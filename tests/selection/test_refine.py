"""Plan-level confirmation of selected Halide kernels: chains are the connected components of
the candidate nodes, and a chain stays on Halide exactly when the whole plan got faster by the
margin (the paired ratio of interleaved runs)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import REGIONS
from tests.ir.test_graph import _build, random_dag
from woodpecker.config import REFINE_MARGIN as MARGIN
from woodpecker.deadline import Deadline
from woodpecker.selection.refine import EVERY, halide_chains


@settings(max_examples=150, deadline=None)
@given(random_dag(), st.data())
def test_chains_are_connected_components_of_the_candidates(dag, data):
    g = _build(*dag)
    g.toposort()
    n = len(g.nodes)
    candidates = data.draw(st.sets(st.integers(0, n - 1)))
    chains = halide_chains(g, candidates)
    index = {id(node): i for i, node in enumerate(g.nodes)}
    ref = nx.Graph()
    ref.add_nodes_from(candidates)
    ref.add_edges_from((index[id(v.producer)], i) for i in candidates
                       for v in g.nodes[i].inputs
                       if v.producer is not None and index[id(v.producer)] in candidates)
    assert sorted(map(sorted, nx.connected_components(ref))) == sorted(chains)
    assert all(c == sorted(c) for c in chains)
    assert [c[0] for c in chains] == sorted(c[0] for c in chains)


@pytest.mark.parametrize("first_loses,late", [(False, False), (True, False), (True, True)])
def test_plan_check_keeps_a_candidate_only_when_the_plan_gets_faster(tuned, first_loses, late):
    """Every conv node of the test net given a tuned kernel and claimed a large per-node gain:
    the one chain (conv → conv → depthwise) is timed on the whole plan, and it stays on Halide
    exactly when that plan was faster by the margin (the plan with every timed node: faster at
    all); the result still matches ONNX Runtime.
    When the first node lost its per-node comparison, the chain is the other two: the plan
    with every timed node on Halide is tried first, and the chain only when that was dropped.
    With the deadline already passed nothing is tried: the plan keeps its libraries."""
    from tests.helpers import ort_run, rand
    from woodpecker.assembly import AssemblyOptions, assemble
    from woodpecker.engines.base import BuildContext
    from woodpecker.engines.choice import Choice, KernelSpec
    from woodpecker.engines.halide.templates import template_module
    from woodpecker.engines.registry import choose
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import optimize
    from woodpecker.runtime.compiled import CompiledModel
    from woodpecker.selection.refine import refine_selection
    from woodpecker.target import Target
    from woodpecker.tune.extract import extract_tasks
    from woodpecker.tune.records import TuningLog

    model, log_path = tuned
    graph = import_onnx(model)
    optimize(graph)
    ctx, allowed = BuildContext(2, graph.opset), ["halide", "onnxruntime", "numpy"]
    before = [choose(n, allowed, ctx) for n in graph.nodes]
    log, records = TuningLog(log_path), []
    choices = {n.name: Choice(e) for n, e in zip(graph.nodes, before)}
    for g in extract_tasks(graph):
        rec = log.best(g.task.key)
        kernel = template_module(rec.template).build(g.task, rec.config, 2)
        for name in g.nodes:
            loses = first_loses and not records
            choices[name] = Choice("onnxruntime" if loses else "halide",
                                   KernelSpec(rec.template, g.task.kind, dict(rec.config),
                                              g.task.to_json(), kernel.path.name))
            records.append({"node": name, "library": "onnxruntime",
                            "total_ms": {"halide": 2.0 if loses else 0.0, "onnxruntime": 1.0}})
    engines, report = refine_selection(
        graph, before, choices, records,
        AssemblyOptions(tuple(allowed), ctx, Target.parse("cpu", 2), {},
                        schedule=REGIONS),
        runs=6, deadline=Deadline(0.0) if late else Deadline.NONE)
    every = sorted(r["node"] for r in records)
    rest = sorted(set(every) - {records[0]["node"]})
    confirmation = [c for c in report if c["candidate"] == "confirmation"]
    report = [c for c in report if c["candidate"] != "confirmation"]
    chain = first_loses and not late and not report[0]["kept"]
    assert [sorted(c["nodes"]) for c in report] == \
        ([] if late else [every] + ([rest] if chain else []))
    # two keeps are confirmed against the plan without chains, one is not
    assert len(confirmation) == (sum(c["kept"] for c in report) > 1)
    kept = set()
    for check in report + confirmation:
        bar = 1.0 if check["candidate"] == EVERY else 1 - MARGIN
        assert check["bar"] == bar and check["kept"] == (check["paired_ratio"] < bar)
        kept |= set(check["nodes"]) if check["kept"] else set()
    if confirmation and not confirmation[0]["kept"]:
        kept = set()
    on_halide = {n.name for n, e in zip(graph.nodes, engines) if e == "halide"}
    assert on_halide == kept
    final = {n.name: Choice(e, choices[n.name].kernel if e == "halide" else None)
             for n, e in zip(graph.nodes, engines)}
    plan = assemble(graph, final,
                    AssemblyOptions(tuple(allowed), ctx, Target.parse("cpu", 2), {},
                                    schedule=REGIONS))
    x = rand(1, 8, 10, 10, seed=9)
    want = ort_run(model, {"x": x})[0]
    got = CompiledModel(plan)(x)
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    from tests.selection.test_per_node import _tuned_log

    return _tuned_log(tmp_path_factory, "first")
