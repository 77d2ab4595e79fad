"""Every zoo model compiles, runs, round-trips through a plan, and matches ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

import woodpecker
from woodpecker import zoo

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_matches_onnxruntime(name, tmp_path):
    import onnxruntime as ort

    path = zoo.export(name)
    x = zoo.model_input(name, seed=1)
    model = woodpecker.compile(str(path), threads=2)
    y = model(x)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    ref = ort.InferenceSession(str(path), so).run(None, {"input": x})[0]
    rel = float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))
    assert rel <= 1e-4, f"{name}: max_rel_diff {rel:.2e}"
    model.save(tmp_path / "plan")
    np.testing.assert_array_equal(woodpecker.load(tmp_path / "plan")(x), y)


# The families added beside the first zoo (ResNet-50 … ViT): each one's generated kernels, one
# hand-picked schedule per task (no tuning), must compute it, checked against ONNX Runtime.
WIDER = ("resnet50", "mobilenet_v3_small", "efficientnet_b0", "regnet_x_400mf", "densenet121",
         "googlenet", "convnext_tiny", "vit_tiny")


@pytest.mark.parametrize("name", WIDER)
def test_zoo_model_through_generated_kernels(name, tmp_path):
    pytest.importorskip("halide")
    from tests.helpers import ort_run, seed_tuning_log
    from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
    from woodpecker.passes import optimize

    path = zoo.export(name)
    proto = load_model_proto(str(path))
    graph = import_onnx(proto)
    optimize(graph)
    log = seed_tuning_log(graph, tmp_path / "tuning.jsonl")
    model = woodpecker.compile(proto, engines="halide,numpy", tuning_log=log.path, threads=2)
    assert model.generated_flops_share() >= 0.9, name   # ViT-Tiny: 93 %
    if name == "densenet121":
        # each dense layer's Concat is a strided (NHWC) view of its block's last one
        from woodpecker.schedule.aliases import slice_code
        prefix_views = [a for a in model.plan.arena.aliases.values() if a[1] == slice_code(3)]
        assert len(prefix_views) == 58
    x = zoo.model_input(name, seed=1)
    got, want = model(x), ort_run(proto, {"input": x})[0]
    rel = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    assert rel <= 1e-4, f"{name}: max_rel_diff {rel:.2e}"


def test_zoo_export_is_deterministic(tmp_path):
    a = zoo.export("squeezenet1_1", tmp_path / "a.onnx")
    assert a.read_bytes() == zoo.export("squeezenet1_1").read_bytes()
    np.testing.assert_array_equal(zoo.model_input("resnet18"), zoo.model_input("resnet18"))


def test_unknown_zoo_model():
    with pytest.raises(woodpecker.WoodpeckerError, match="unknown zoo model 'vgg99'"):
        zoo.export("vgg99")


@pytest.mark.parametrize("name", ["randwire_cifar", "darts_cifar", "swiftnet_vww"])
def test_memory_schedule_on_irregular_networks(name):
    """SERENITY's order and rewrites keep the outputs (vs ONNX Runtime) and never raise the
    peak above the file's order; the arena holds the plan."""
    import onnxruntime as ort

    from woodpecker.schedule.arena import check_arena
    from woodpecker.schedule.problem import graph_problem

    path = zoo.export(name)
    x = zoo.model_input(name, seed=2)
    plain = woodpecker.compile(str(path), threads=2, arena=False, library_first=False)
    model = woodpecker.compile(str(path), threads=2, schedule="memory")
    sched = model.plan.meta["schedule"]
    p = graph_problem(plain.graph)
    assert sched["peak_bytes"] <= p.simulate(list(range(p.n)))[0]
    assert check_arena(model.graph, model.plan.arena) is None
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    ref = ort.InferenceSession(str(path), so).run(None, {"input": x})[0]
    y = model(x)
    rel = float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))
    assert rel <= 1e-4, f"{name}: max_rel_diff {rel:.2e}"
