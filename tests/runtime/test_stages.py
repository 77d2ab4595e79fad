"""Stages of a parallel schedule (DOS; runtime/stages.py, selection/parallel.py): independent
Halide steps run at the same time give the sequential plan's outputs — bit for bit, run after
run — with no arena space shared between a stage's operators; a tampered stage is refused on
load; the scheduler records its decision and never changes the model's results."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import numpy as np
import pytest

import woodpecker
from tests.helpers import conv_dag_model, ort_run, rand, seed_tuning_log

pytest.importorskip("halide")

# relu(x) feeds four independent convs (two 1x1, a depthwise, a 3x3); two of them are added,
# and the sum feeds a depthwise and a 1x1 conv; every value nothing reads is an output
STEPS = [("relu", 0, 0), ("pw", 1, 0), ("dw", 1, 0), ("conv", 1, 0), ("pw", 1, 0),
         ("add", 2, 3), ("dw", 6, 0), ("pw", 6, 0)]
RUNS = 200


@pytest.fixture(scope="module")
def onnx_model():
    return conv_dag_model(STEPS, 16, 10)


@pytest.fixture(scope="module")
def sequential(onnx_model, tmp_path_factory):
    log = seed_tuning_log(onnx_model, tmp_path_factory.mktemp("log") / "t.jsonl").path
    return woodpecker.compile(onnx_model, engines="halide,numpy", tuning_log=log, threads=2)


def _staged(model):
    """The plan with every independent pair of bound Halide steps the DP finds (a cost table
    that makes any such pair cheaper together) run as a stage."""
    from woodpecker.assembly import reordered
    from woodpecker.config import DOS_BLOCK
    from woodpecker.runtime.compiled import CompiledModel
    from woodpecker.schedule.dos_steps import dos_schedule, step_edges
    from woodpecker.selection.parallel import StageTimer

    model.profile({"x": rand(1, 16, 10, 10)}, runs=1)
    bounds = model.bound_steps()
    timer = StageTimer(bounds, [1.0] * len(bounds), threads=2)
    timer.ratio = lambda stage: 0.6          # a given cost table, no measuring
    schedule = dos_schedule(len(bounds), step_edges(model.graph, model.steps), timer,
                            DOS_BLOCK)
    names = [[model.graph.nodes[i].name for i in s] for s in model.steps]
    stages = [{"nodes": [x for s in sorted(st.nodes) for x in names[s]],
               "strategy": st.strategy, "ms": 0.6 * len(st.nodes), "apart_ms": len(st.nodes)}
              for st in schedule.stages if len(st.nodes) > 1]
    order = [i for st in schedule.stages for s in sorted(st.nodes) for i in model.steps[s]]
    schedule = replace(model.plan.schedule, stages=tuple(tuple(s["nodes"]) for s in stages))
    return CompiledModel(reordered(model.plan, order, schedule, meta={"parallel": {
        "kept": True, "threads": 2, "stages": stages}})), stages


@pytest.fixture(scope="module")
def parallel(sequential):
    model, stages = _staged(sequential)
    assert len(stages) >= 2, stages
    return model


def test_stages_are_single_steps_of_independent_halide_nodes(parallel):
    plan = parallel.plan
    stages = plan.stages()
    assert stages and all(len(s) >= 2 for s in stages)
    assert all(s in plan.steps() for s in stages)
    for stage in stages:
        made = {v.name for i in stage for v in plan.graph.nodes[i].outputs}
        assert all(v is None or v.name not in made
                   for i in stage for v in plan.graph.nodes[i].inputs)
        assert all(plan.engines[i] == "halide" for i in stage)
    # each stage runs inside the foreign call chaining the Halide steps around it
    chains = parallel._executor._chains
    at = [k for k, step in enumerate(parallel.steps) if step in stages]
    assert at and all(any(start <= k < end for start, (_, end) in chains.items()) for k in at)


def test_stage_members_share_no_arena_space(parallel):
    """Within a stage, no member's output overlaps another member's input or output."""
    from woodpecker.schedule.problem import value_bytes

    plan, arena = parallel.plan, parallel.plan.arena
    g = plan.graph

    def span(v):
        if v.name in arena.aliases:
            v = g.values[arena.aliases[v.name][0]]
            return span(v)
        if v.name not in arena.offsets:
            return None
        start = arena.offsets[v.name]
        return start, start + value_bytes(v)

    for stage in plan.stages():
        for i in stage:
            outs = [span(v) for v in g.nodes[i].outputs]
            for j in stage:
                if j == i:
                    continue
                other = [span(v) for v in g.nodes[j].inputs + g.nodes[j].outputs
                         if v is not None and not v.is_const]
                for a in filter(None, outs):
                    for b in filter(None, other):
                        assert a[1] <= b[0] or b[1] <= a[0], (g.nodes[i].name, g.nodes[j].name)


def test_parallel_plan_matches_ort_and_repeats_exactly(onnx_model, sequential, parallel):
    x = rand(1, 16, 10, 10, seed=3)
    names = [v.name for v in parallel.graph.outputs]
    want = ort_run(onnx_model, {"x": x})
    first = parallel.run({"x": x})
    base = sequential.run({"x": x})
    for name, w in zip(names, want):
        np.testing.assert_allclose(first[name], w, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(first[name], base[name])
    differing = 0
    for _ in range(RUNS):
        got = parallel.run({"x": x})
        differing += any(not np.array_equal(got[n], first[n]) for n in names)
    assert differing == 0


def test_stage_call_runs_kernels_together_on_one_thread_each():
    """aot.BoundCall.stage: two kernels bound to their arrays, run as one foreign call, give
    what each gives alone; their own parallel loops stayed serial (one thread each)."""
    from woodpecker.engines.halide import rows
    from woodpecker.engines.halide.aot import BoundCall, pool_used, set_threads
    from woodpecker.tasks.rows import RowTask

    set_threads(2)
    kernels, bound, wants = [], [], []
    for k, (n, op) in enumerate([(257, "softmax"), (64, "softmax")]):
        task = RowTask(n, 64, op, 0.0, False)
        config = dict(rows.space(task).sample(random.Random(k)), grain=1)
        kernel = rows.build(task, config, 2)
        x = np.random.default_rng(k).standard_normal(task.out_shape).astype(np.float32)
        out = np.empty(task.out_shape, np.float32)
        kernels.append(kernel)
        bound.append(kernel.bind(x, out=out))
        wants.append((out, task.reference([x])))
    call = BoundCall.stage(bound)
    assert call is not None
    pool_used(reset=True)
    call()
    assert pool_used() <= 2
    for out, want in wants:
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    alone = BoundCall.stage(bound[:1])          # one kernel alone: on the calling thread only
    wants[0][0][...] = 0
    pool_used(reset=True)
    alone()
    assert pool_used() == 0
    np.testing.assert_allclose(wants[0][0], wants[0][1], rtol=1e-5, atol=1e-6)


def test_saved_parallel_plan_keeps_its_stages(parallel, tmp_path):
    parallel.save(tmp_path / "p")
    loaded = woodpecker.load(tmp_path / "p")
    assert loaded.plan.stages() == parallel.plan.stages()
    x = rand(1, 16, 10, 10, seed=5)
    a, b = parallel.run({"x": x}), loaded.run({"x": x})
    assert all(np.array_equal(a[n], b[n]) for n in a)


@pytest.mark.parametrize("tamper", ["dependent", "apart"])
def test_tampered_stage_is_refused(parallel, tmp_path, tamper):
    from woodpecker.errors import PlanError

    parallel.save(tmp_path / "p")
    path = tmp_path / "p" / "plan.json"
    doc = json.loads(path.read_text())
    order = doc["order"]
    stage = doc["schedule"]["stages"][0]   # what runs (the metadata's copy decides nothing)
    if tamper == "dependent":   # a node and the node reading its output
        node = next(n for n in doc["nodes"] if n["name"] == stage[0])
        reader = next(n["name"] for n in doc["nodes"] if node["outputs"][0] in n["inputs"])
        a, b = sorted([order.index(node["name"]), order.index(reader)])
        stage[:] = order[a:b + 1]
    else:                       # two nodes with another between them
        stage[:] = [order[0], order[2]]
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="stage"):
        woodpecker.load(tmp_path / "p")


def test_schedule_parallel_records_its_decision(sequential, onnx_model):
    """The scheduler on the real machine: whatever it decides (timing), the plan it returns
    gives ORT's outputs and records the stages it measured and the whole-plan check."""
    from woodpecker.selection.parallel import schedule_parallel

    model = schedule_parallel(sequential)
    record = model.plan.meta["parallel"]
    assert record["threads"] == 2 and record["critical_path_ms"] > 0
    assert set(record["critical_path"]) <= {n.name for n in model.graph.nodes}
    if record.get("kept"):
        assert model.plan.stages() and record["ratio"] < 1
    x = rand(1, 16, 10, 10, seed=7)
    got = model.run({"x": x})
    for v, w in zip(model.graph.outputs, ort_run(onnx_model, {"x": x})):
        np.testing.assert_allclose(got[v.name], w, rtol=1e-4, atol=1e-4)


def test_inspect_shows_the_stages(parallel, tmp_path, capsys):
    from woodpecker.cli import main

    parallel.plan.meta["parallel"].update(
        ratio=0.95, sequential_sum_ms=1.0, dos_sum_ms=0.9, critical_path_ms=0.5,
        critical_path=[parallel.graph.nodes[0].name], floor_ms=0.5, best_possible=2.0)
    parallel.save(tmp_path / "p")
    assert main(["inspect", str(tmp_path / "p"), "--runs", "2",
                 "--json", str(tmp_path / "i.json")]) == 0
    shown = capsys.readouterr().out
    assert "nodes at the same time" in shown and "parallel schedule on 2 threads" in shown
    doc = json.loads((tmp_path / "i.json").read_text())
    assert len(doc["parallel"]["stages"]) == len(parallel.plan.stages())
