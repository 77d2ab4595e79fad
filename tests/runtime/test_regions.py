"""Library regions: consecutive ONNX Runtime nodes run as one session and give the outputs of
one session per node, with and without the arena, and survive a plan round trip."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand
from tests.schedule.test_rewrite_arena import chains, concat_model
from woodpecker.assembly.regions import absorb_movement
from woodpecker.engines.choice import Choice
from woodpecker.ir.steps import step_io
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.runtime.plan import Plan
from woodpecker.runtime.plan_schedule import PlanSchedule
from woodpecker.runtime.steps import plan_steps
from woodpecker.schedule.arena import check_arena, plan_arena


def test_steps_group_consecutive_onnxruntime_nodes():
    engines = ["onnxruntime", "onnxruntime", "halide", "onnxruntime", "numpy", "onnxruntime",
               "onnxruntime", "onnxruntime"]
    assert plan_steps(engines, True) == [[0, 1], [2], [3], [4], [5, 6, 7]]
    assert plan_steps(engines, False) == [[i] for i in range(len(engines))]


ENGINES = ("onnxruntime", "openvino", "numpy", "halide", "torch")
REGIONS = ("onnxruntime", "openvino")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(ENGINES),
                          st.sets(st.sampled_from(REGIONS)).map(frozenset)), max_size=20))
def test_absorb_moves_only_movable_numpy_runs_next_to_their_region(nodes):
    engines, movable = [e for e, _ in nodes], [m for _, m in nodes]
    out = absorb_movement(engines, lambda i, r: r in movable[i], REGIONS, "numpy")
    for i, (before, after) in enumerate(zip(engines, out)):
        assert after == before or (before == "numpy" and after in movable[i])
        if after == "numpy":   # a kept numpy view touches no region that could take it
            near = {out[i - 1] if i else None, out[i + 1] if i + 1 < len(out) else None}
            assert not near & movable[i]
    assert absorb_movement(out, lambda i, r: r in movable[i], REGIONS, "numpy") == out


def test_concat_between_library_convs_joins_their_region():
    """The fixed preference gives Concat to numpy; with regions it joins the ORT session."""
    split = woodpecker.compile(concat_model(False, True), threads=1, library_regions=False)
    joined = woodpecker.compile(concat_model(False, True), threads=1, library_first=False)
    cat = [i for i, n in enumerate(joined.graph.nodes) if n.op == "Concat"]
    assert [split.plan.engines[i] for i in cat] == ["numpy"]
    assert [joined.plan.engines[i] for i in cat] == ["onnxruntime"]
    assert len(joined.steps) == 1
    x = rand(1, 8, 12, 12, seed=2)
    np.testing.assert_allclose(joined(x), split(x), rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(chains(), st.lists(st.booleans(), min_size=12, max_size=12), st.booleans())
def test_regions_match_one_session_per_node(model, on_ort, arena):
    """Random DAGs, each node on ONNX Runtime or numpy at random: region steps read exactly
    what their nodes read from outside and give the per-node plan's outputs, on a second input
    too (bindings kept for the arena's views must see the new values)."""
    base = woodpecker.compile(model, threads=1, engines="onnxruntime,numpy",
                              library_regions=False, arena=arena)
    g = base.graph
    engines = ["onnxruntime" if on_ort[i % len(on_ort)] else "numpy"
               for i in range(len(g.nodes))]
    runs = {}
    for regions in (False, True):
        steps = plan_steps(engines, regions)
        choices = {n.name: Choice(e) for n, e in zip(g.nodes, engines)}
        plan = Plan(g, choices, base.plan.target, {},
                    plan_arena(g, steps) if arena else None,
                    schedule=PlanSchedule(library_regions=regions))
        if arena:   # region outputs never overwrite a region input still being read
            assert check_arena(g, plan.arena, steps) is None
        m = CompiledModel(plan)
        assert len(m.steps) == len(plan_steps(engines, regions))
        runs[regions] = [m.run({"x": rand(1, 4, 5, 5, seed=seed)}) for seed in (3, 4)]
    for k, seed in enumerate((3, 4)):
        expected = dict(zip([o.name for o in model.graph.output],
                            ort_run(model, {"x": rand(1, 4, 5, 5, seed=seed)})))
        for name, want in expected.items():
            np.testing.assert_allclose(runs[True][k][name], runs[False][k][name], rtol=1e-5,
                                       atol=1e-5)
            np.testing.assert_allclose(runs[True][k][name], want, rtol=1e-4, atol=1e-4)
    for step in plan_steps(engines, True):
        nodes = [g.nodes[i] for i in step]
        ins, outs = step_io(nodes, g)
        produced = {v.name for n in nodes for v in n.outputs}
        assert not {v.name for v in ins} & produced
        later = {v.name for n in g.nodes[step[-1] + 1:] for v in n.inputs if v is not None}
        assert {v.name for v in outs} == produced & (later | {v.name for v in g.outputs})


def test_default_plan_is_one_session_and_round_trips(tmp_path):
    model = woodpecker.compile(concat_model(False, True), threads=1, engines="onnxruntime")
    assert model.plan.schedule.library_regions and len(model.steps) == 1
    model.save(tmp_path / "p")
    loaded = woodpecker.load(tmp_path / "p")
    assert loaded.steps == model.steps
    x = rand(1, 8, 12, 12, seed=1)
    np.testing.assert_array_equal(loaded(x), model(x))
    memory = woodpecker.compile(concat_model(False, True), threads=1, engines="onnxruntime",
                                schedule="memory")
    assert memory.plan.schedule.library_regions and memory.plan.every
    np.testing.assert_allclose(memory(x), model(x), rtol=1e-5, atol=1e-5)
    memory.save(tmp_path / "m")
    loaded = woodpecker.load(tmp_path / "m")
    assert loaded.steps == memory.steps and loaded.plan.every
    np.testing.assert_array_equal(loaded(x), memory(x))


def test_memory_plan_regions_write_every_value_and_keep_the_peak():
    """A chain of four equal activations on ORT: the order never holds more than two, so the
    region is cut where a third would be held (runtime/steps.py), and every value the
    regions produce has arena space of its own."""
    convs = [helper.make_node("Conv", [f"v{i}", f"w{i}"], [f"v{i + 1}"]) for i in range(4)]
    weights = {f"w{i}": rand(8, 8, 1, 1, seed=i) for i in range(4)}
    onnx_model = make_model(convs, [("v0", [1, 8, 6, 6])], [("v4", [1, 8, 6, 6])], weights)
    m = woodpecker.compile(onnx_model, threads=1, engines="onnxruntime", schedule="memory")
    assert m.steps == [[0, 1], [2], [3]]
    size = 8 * 36 * 4
    assert m.plan.arena.lower_bound == 2 * size
    assert set(m.plan.arena.offsets) == {f"v{i}" for i in range(1, 5)}
    x = rand(1, 8, 6, 6, seed=2)
    np.testing.assert_allclose(m(x), ort_run(onnx_model, {"v0": x})[0], rtol=1e-5, atol=1e-5)
    # a budget above the peak buys larger regions, still within the budget
    b = woodpecker.compile(onnx_model, threads=1, engines="onnxruntime", schedule="memory",
                           memory_budget=3 * size)
    assert b.steps == [[0, 1, 2], [3]] and b.plan.arena.size <= 3 * size
    np.testing.assert_allclose(b(x), m(x), rtol=1e-6)
    free = woodpecker.compile(onnx_model, threads=1, engines="onnxruntime")
    assert free.steps == [[0, 1, 2, 3]] and not free.plan.every


def test_memory_plan_regions_on_a_real_network():
    """randwire_cifar's memory plan on the library engines, its regions allowed twice the
    order's peak (a memory budget): every region builds (ORT's layout pass loses a graph output
    of one of them, which is then built without layout passes) and the outputs are ORT's."""
    from woodpecker import zoo

    path = zoo.export("randwire_cifar")
    m = woodpecker.compile(str(path), threads=2, engines="onnxruntime,numpy",
                           schedule="memory")
    peak = m.plan.meta["schedule"]["peak_bytes"]
    b = woodpecker.compile(str(path), threads=2, engines="onnxruntime,numpy",
                           schedule="memory", memory_budget=2 * peak)
    assert len(b.steps) < len(m.steps) and b.plan.arena.size <= 2 * peak
    x = zoo.model_input("randwire_cifar")
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = s.run(None, {s.get_inputs()[0].name: x})[0]
    for model in (m, b):
        np.testing.assert_allclose(model(x), ref, rtol=1e-4, atol=1e-4)
