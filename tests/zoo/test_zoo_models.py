"""Every zoo model compiles, runs, round-trips through a plan, and matches ONNX Runtime; from
the same tuning log, the same plan (`FIXED_KERNELS`: the generated kernels two models' plans
chose from a log of hand-picked schedules, recorded before a refactor and checked after it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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


# node -> [template, config] of every generated kernel the plan runs, per model, per host class
# (the hand-picked schedules a template offers depend on the vector registers: 16 with AVX2,
# 32 with AVX-512); written by `python -m tests.zoo.test_zoo_models --fixed-kernels` on a host
# of each class, checked by the test below where this host's class is there
FIXED_KERNELS = Path(__file__).with_name("fixed_log_kernels.json")


def _host_class() -> str:
    from woodpecker.engines.halide.host import host_vector_registers
    from woodpecker.target import Target

    return f"{host_vector_registers(tuple(Target.parse('cpu', 2).isa))} vector registers"


def _generated(name: str, folder: Path):
    """The model, compiled with generated kernels from a log of hand-picked schedules."""
    from tests.helpers import seed_tuning_log
    from woodpecker.frontend.onnx_import import load_model_proto

    proto = load_model_proto(str(zoo.export(name)))
    log = seed_tuning_log(proto, folder / "tuning.jsonl")
    return proto, woodpecker.compile(proto, engines="halide,numpy", tuning_log=log.path,
                                     threads=2)


def _kernels(model) -> dict[str, list]:
    return {n.name: [c.kernel.template, c.kernel.config] for n in model.graph.nodes
            for c in [model.plan.choices[n.name]] if c.kernel is not None}


@pytest.mark.parametrize("name", WIDER)
def test_zoo_model_through_generated_kernels(name, tmp_path):
    pytest.importorskip("halide")
    from tests.helpers import ort_run

    proto, model = _generated(name, tmp_path)
    assert model.generated_flops_share() >= 0.9, name   # ViT-Tiny: 93 %
    fixed = json.loads(FIXED_KERNELS.read_text()).get(_host_class(), {})
    if name in fixed:    # the same log gives the same plan
        assert _kernels(model) == fixed[name]
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


if __name__ == "__main__" and sys.argv[1:2] == ["--fixed-kernels"]:
    import tempfile

    every = json.loads(FIXED_KERNELS.read_text()) if FIXED_KERNELS.exists() else {}
    out = every[_host_class()] = {}
    for name in ("mobilenet_v3_small", "regnet_x_400mf"):
        with tempfile.TemporaryDirectory() as tmp:
            out[name] = _kernels(_generated(name, Path(tmp))[1])
    FIXED_KERNELS.write_text(json.dumps(every, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXED_KERNELS} for hosts with {_host_class()}: "
          + ", ".join(f"{k} {len(v)} kernels" for k, v in out.items()))
