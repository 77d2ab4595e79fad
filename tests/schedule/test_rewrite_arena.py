"""Identity rewriting keeps outputs and lowers the scheduled peak; the arena holds every
activation without overlap; the executor gives identical outputs inside the arena; plans keep
the arena and reject a corrupt one; the CLI's memory report and budget errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand
from woodpecker.cli import main
from woodpecker.engines.choice import Choice
from woodpecker.errors import PlanError
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.ir.graph import Graph
from woodpecker.passes import MEMORY, optimize
from woodpecker.passes.split_concat import candidates, split_concat
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.runtime.plan import PLAN_FILE, Plan
from woodpecker.schedule.arena import check_arena, lifetimes, live_peak
from woodpecker.schedule.memory import MemoryBudgetError, schedule_memory
from woodpecker.schedule.problem import graph_problem
from woodpecker.target import Target

C, HW = 8, 12


def concat_model(depthwise: bool, relu: bool) -> "object":
    """Three branches (conv each) concatenated, then (ReLU and) a 1x1 conv, or a depthwise conv
    with a ReLU epilogue and a 1x1 conv — SERENITY's rewriting patterns."""
    inits = {f"w{i}": rand(C, C, 3, 3, seed=i) * 0.2 for i in range(3)}
    nodes = [helper.make_node("Conv", ["x", f"w{i}"], [f"b{i}"], pads=[1, 1, 1, 1])
             for i in range(3)]
    nodes.append(helper.make_node("Concat", ["b0", "b1", "b2"], ["cat"], axis=1))
    src = "cat"
    if relu:
        nodes.append(helper.make_node("Relu", ["cat"], ["rcat"]))
        src = "rcat"
    if depthwise:
        inits.update(wd=rand(3 * C, 1, 3, 3, seed=7), bd=rand(3 * C, seed=8),
                     wq=rand(C, 3 * C, 1, 1, seed=11))
        nodes += [helper.make_node("Conv", [src, "wd", "bd"], ["d"], pads=[1, 1, 1, 1],
                                   group=3 * C),
                  helper.make_node("Relu", ["d"], ["r"]),
                  helper.make_node("Conv", ["r", "wq"], ["y"])]
        out = ("y", [1, C, HW, HW])
    else:
        inits.update(wp=rand(C, 3 * C, 1, 1, seed=9), bp=rand(C, seed=10))
        nodes += [helper.make_node("Conv", [src, "wp", "bp"], ["p"]),
                  helper.make_node("Add", ["p", "x"], ["s"]),
                  helper.make_node("Relu", ["s"], ["y"])]
        out = ("y", [1, C, HW, HW])
    return make_model(nodes, [("x", [1, C, HW, HW])], [out], inits)


def optimized(model) -> Graph:
    g = import_onnx(model)
    optimize(g, MEMORY)
    return g


@pytest.mark.parametrize("depthwise, relu", [(False, False), (False, True), (True, False),
                                             (True, True)])
def test_split_concat_keeps_outputs_and_lowers_peak(depthwise, relu):
    model = concat_model(depthwise, relu)
    x = rand(1, C, HW, HW, seed=5)
    ref = ort_run(model, {"x": x})[0]
    g = optimized(model)
    assert [n.op for n in candidates(g)] == ["Concat"]
    before = schedule_memory(g.copy(), rewrite=False).peak
    result = schedule_memory(g, rewrite=True)
    # depthwise: the per-part depthwise convs end in a new Concat, which the 1x1 conv splits
    assert result.rewrites == 1 + depthwise and result.peak < before
    assert not any(n.op == "Concat" for n in g.nodes)
    compiled = woodpecker.compile(model, threads=1, schedule="memory")
    assert compiled.plan.meta["schedule"]["rewrites"] == 1 + depthwise
    np.testing.assert_allclose(compiled(x), ref, rtol=1e-4, atol=1e-4)
    # each part's depthwise conv and its partial 1x1 conv are then one separable conv, and
    # the peak stays where it was
    fused = schedule_memory(optimized(model), rewrite=True, fuse=True)
    assert fused.fused == (3 if depthwise else 0) and fused.peak <= result.peak
    assert compiled.plan.meta["schedule"]["fused_separable"] == fused.fused
    assert sum(n.op == "FusedSeparableConv" for n in compiled.graph.nodes) == fused.fused


def test_spatial_slice_moves_onto_the_parts():
    """DARTS' factorized reduce: relu(concat) feeds a strided 1x1 conv and, through
    x[:, :, 1:, 1:], another; both readers split, outputs unchanged."""
    inits = {f"w{i}": rand(C, C, 3, 3, seed=i) * 0.2 for i in range(2)}
    inits.update(wa=rand(C, 2 * C, 1, 1, seed=3), wb=rand(C, 2 * C, 1, 1, seed=4),
                 st=np.array([1, 1], np.int64), en=np.array([HW, HW], np.int64),
                 ax=np.array([2, 3], np.int64))
    nodes = [helper.make_node("Conv", ["x", f"w{i}"], [f"b{i}"], pads=[1, 1, 1, 1])
             for i in range(2)]
    nodes += [helper.make_node("Concat", ["b0", "b1"], ["cat"], axis=1),
              helper.make_node("Relu", ["cat"], ["r"]),
              helper.make_node("Conv", ["r", "wa"], ["a"], strides=[2, 2]),
              helper.make_node("Slice", ["r", "st", "en", "ax"], ["s"]),
              helper.make_node("Conv", ["s", "wb"], ["b"], strides=[2, 2]),
              helper.make_node("Concat", ["a", "b"], ["y"], axis=1)]
    half = HW // 2     # 12 -> 6 directly, 11 (sliced) -> 6
    model = make_model(nodes, [("x", [1, C, HW, HW])], [("y", [1, 2 * C, half, half])], inits)
    g = optimized(model)
    assert [n.name for n in candidates(g)] == [g.nodes[2].name]
    trial = g.copy()
    split_concat(trial, trial.nodes[2])
    assert not any(n.op == "Concat" and n.outputs[0].shape[1] == 2 * C and
                   n.outputs[0].shape[2] == HW for n in trial.nodes)
    x = rand(1, C, HW, HW, seed=5)
    compiled = woodpecker.compile(model, threads=1, schedule="memory")
    np.testing.assert_allclose(compiled(x), ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    split = CompiledModel(Plan(trial, {n.name: Choice("numpy") for n in trial.nodes},
                               Target.parse("cpu", 1), {}))
    np.testing.assert_allclose(split(x), ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_concat_read_elsewhere_is_not_rewritten():
    model = concat_model(False, False)
    model.graph.node.append(helper.make_node("Sigmoid", ["cat"], ["z"]))
    model.graph.output.append(helper.make_tensor_value_info("z", 1, [1, 3 * C, HW, HW]))
    assert candidates(optimized(model)) == []


def test_rewrite_that_does_not_help_is_not_kept():
    g = optimized(concat_model(False, False))
    trial = g.copy()
    split_concat(trial, next(n for n in trial.nodes if n.op == "Concat"))
    # the rewrite itself is exact; the scheduler only keeps it when the peak drops
    assert graph_problem(trial).n > graph_problem(g).n


@st.composite
def chains(draw):
    """Random residual networks of element-wise ops and convs (random DAGs with fan-out)."""
    n = draw(st.integers(2, 9))
    nodes, inits, vals = [], {}, ["x"]
    for i in range(n):
        a = draw(st.sampled_from(vals))
        kind = draw(st.sampled_from(["Relu", "Add", "Conv", "Concat"]))
        if kind == "Add":
            nodes.append(helper.make_node("Add", [a, draw(st.sampled_from(vals))], [f"v{i}"]))
        elif kind == "Conv":
            inits[f"w{i}"] = rand(4, 4, 1, 1, seed=i)
            nodes.append(helper.make_node("Conv", [a, f"w{i}"], [f"v{i}"]))
        elif kind == "Concat":
            b = draw(st.sampled_from(vals))
            inits[f"w{i}"] = rand(4, 8, 1, 1, seed=i)
            nodes += [helper.make_node("Concat", [a, b], [f"c{i}"], axis=1),
                      helper.make_node("Conv", [f"c{i}", f"w{i}"], [f"v{i}"])]
        else:
            nodes.append(helper.make_node(kind, [a], [f"v{i}"]))
        vals.append(f"v{i}")
    outs = [v for v in vals[1:] if draw(st.booleans())] or [vals[-1]]
    return make_model(nodes, [("x", [1, 4, 5, 5])], [(v, [1, 4, 5, 5]) for v in outs], inits)


@settings(max_examples=40, deadline=None)
@given(chains())
def test_arena_on_random_graphs(model):
    x = rand(1, 4, 5, 5, seed=3)
    # node-level like the plans below (library-first would make it the faster library's
    # session, and OpenVINO's float32 rounds otherwise than ONNX Runtime's: which one is
    # faster is the machine's call, so exact equality would hang on a timing)
    plain = woodpecker.compile(model, threads=1, arena=False, library_first=False)
    for schedule in ("file", "memory"):
        compiled = woodpecker.compile(model, threads=1, schedule=schedule,
                                      library_first=False)
        arena = compiled.plan.arena
        steps = compiled.steps      # ONNX Runtime regions; a memory plan's write every value
        every = compiled.plan.every
        assert every == (schedule == "memory")
        assert check_arena(compiled.graph, arena, steps, every) is None
        assert arena.size >= arena.lower_bound == live_peak(
            lifetimes(compiled.graph, steps, arena.aliases, every))
        if schedule == "memory":    # its regions never lift the memory order's peak
            assert arena.lower_bound <= live_peak(lifetimes(compiled.graph))
        a, b = plain.run({"x": x}), compiled.run({"x": x})
        for k in a:
            if schedule == "file":
                np.testing.assert_array_equal(a[k], b[k])
            else:   # rewritten concats sum in another order: fp32 error scales with the output
                scale = max(1.0, float(np.max(np.abs(a[k]))))
                np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6 * scale)
        # outputs are copies: a second run does not change the first run's results
        again = {k: v.copy() for k, v in b.items()}
        compiled.run({"x": rand(1, 4, 5, 5, seed=4)})
        for k in b:
            np.testing.assert_array_equal(b[k], again[k])


def test_arena_round_trip_and_corruption(tmp_path):
    model = woodpecker.compile(concat_model(False, True), threads=1, schedule="memory")
    model.save(tmp_path / "p")
    x = rand(1, C, HW, HW, seed=1)
    loaded = woodpecker.load(tmp_path / "p")
    assert loaded.plan.arena.offsets == model.plan.arena.offsets
    np.testing.assert_array_equal(loaded(x), model(x))
    doc = json.loads((tmp_path / "p" / PLAN_FILE).read_text())
    offsets = doc["arena"]["offsets"]
    life = lifetimes(loaded.graph)
    a, b = next((p[0], q[0]) for i, p in enumerate(life) for q in life[i + 1:]
                if q[2] <= p[3] and p[2] <= q[3])
    offsets[b] = offsets[a]     # two values alive together at one offset
    (tmp_path / "p" / PLAN_FILE).write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="arena is corrupt"):
        woodpecker.load(tmp_path / "p")


def _traced_run(m, x) -> int:
    """Bytes numpy allocated at most during one run (after a warm-up), outputs not counted."""
    import tracemalloc

    m.run(x)
    tracemalloc.start()
    m.run(x)
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return traced - sum(int(np.prod(s)) * np.dtype(d).itemsize for _, s, d in m.outputs)


def test_memory_budget(tmp_path):
    """A feasible budget is met by the whole arena and recorded; one below the least peak
    fails with one line giving it; running the plan — generated kernels and numpy — allocates
    no activation outside the arena (numpy's allocations are traced: without the arena the
    same plan allocates them)."""
    pytest.importorskip("halide")
    from tests.helpers import seed_tuning_log
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import MEMORY, optimize

    model = concat_model(False, True)
    graph = import_onnx(model)
    optimize(graph, MEMORY)
    schedule_memory(graph)           # its rewritten convs get kernels too
    log = seed_tuning_log(graph, tmp_path / "t.jsonl").path
    kw = dict(threads=1, schedule="memory", engines="halide,numpy", tuning_log=log)
    # the generated kernels' layout conversions are scheduled too, after assembly
    plan = woodpecker.compile(model, **kw).plan
    peak = plan.meta["schedule"]["peak_bytes"]
    assert plan.meta["schedule"]["after_assembly"] and plan.arena.size == peak
    m = woodpecker.compile(model, memory_budget=peak, **kw)
    assert "halide" in m.plan.engines
    assert m.plan.arena.size <= peak and m.plan.meta["schedule"]["budget_bytes"] == peak
    x = {name: np.ones(shape, dtype) for name, shape, dtype in m.inputs}
    smallest = min(int(np.prod(v.shape)) * v.dtype.itemsize
                   for n in m.graph.nodes for v in n.outputs)
    assert _traced_run(m, x) < smallest
    assert _traced_run(woodpecker.compile(model, arena=False, **kw), x) >= smallest
    with pytest.raises(MemoryBudgetError, match="no execution order fits the memory budget"):
        woodpecker.compile(model, memory_budget=peak - 1, **kw)
    with pytest.raises(woodpecker.WoodpeckerError, match="needs the memory schedule"):
        woodpecker.compile(model, threads=1, memory_budget=peak)


def test_cli_inspect_memory_and_budget(tmp_path, capsys):
    import onnx

    path = tmp_path / "m.onnx"
    onnx.save(concat_model(False, True), path)
    out = tmp_path / "mem.json"
    assert main(["inspect", str(path), "--memory", "--json", str(out),
                 "--plot", str(tmp_path / "m.png")]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["orders"]) == {"onnx", "kahn", "dp", "dp_rewrite"}
    assert doc["orders"]["dp_rewrite"]["peak_bytes"] < doc["orders"]["onnx"]["peak_bytes"]
    assert doc["arena_bytes"] >= doc["lower_bound_bytes"] > 0 and doc["schedule_seconds"] >= 0
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    rc = main(["compile", str(path), "-o", str(tmp_path / "p"), "--schedule", "memory",
               "--memory-budget", "1KiB"])
    err = capsys.readouterr().err
    assert rc != 0 and "no execution order fits the memory budget of 1.0 KiB" in err
    assert not (tmp_path / "p").exists()


def test_memory_plan_goes_without_weight_expanding_kernels(tmp_path):
    """A memory plan keeps the process small too: Winograd's kernels (transformed filters, 2.8-5×
    the weights) are neither tuned nor chosen for it, while the speed plan may choose them."""
    pytest.importorskip("halide")
    from woodpecker.engines.halide.templates import template_module, weight_expanding
    from woodpecker.tune.extract import extract_tasks
    from woodpecker.tune.records import TuningLog, TuningRecord

    winograd = "conv_winograd"
    assert weight_expanding() == {winograd}
    w = rand(16, 16, 3, 3, seed=1) * 0.1
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                       [("x", [1, 16, 8, 8])], [("y", [1, 16, 8, 8])], {"w": w})
    (group,) = extract_tasks(optimized(model))
    assert winograd in group.templates
    log = TuningLog(tmp_path / "t.jsonl")
    log.append(TuningRecord(task=group.task.key, template=winograd, cost_s=1e-6, error=None,
                            config=template_module(winograd).space(group.task).seeds[0]))
    kw = dict(threads=1, engines="halide,numpy", tuning_log=log.path)
    speed = woodpecker.compile(model, **kw)
    (timed,) = speed.plan.meta["selection"]
    assert "conv_winograd/co" in timed["halide_finalists_ms"]
    memory = woodpecker.compile(model, schedule="memory", **kw)
    assert memory.plan.meta["templates_excluded"] == [winograd]
    assert memory.plan.meta["selection"] == []
    assert all(c.kernel is None for c in memory.plan.choices.values())
    assert len(TuningLog(log.path, exclude=[winograd]).records) == 0
    x = rand(1, 16, 8, 8, seed=2)
    np.testing.assert_allclose(memory(x), speed(x), rtol=1e-4, atol=1e-4)
