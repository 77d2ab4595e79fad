"""GPU plans without a GPU (issue 54): a plan builds here, its walk run on this CPU with the
plan's own offsets equals ONNX Runtime, it opens in a fresh process with only numpy on the
import path and refuses a host without its device, and a tampered plan is one PlanError."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from woodpecker.assembly.gpu_steps import EVERY_TASK
from woodpecker.compiler_gpu import check_on_host, compile_gpu
from woodpecker.errors import PlanError, WoodpeckerError
from woodpecker.runtime.gpu_plan import GpuPlan
from woodpecker.target import Target

ROOT = Path(__file__).resolve().parents[2]


def _small_model(seed: int = 0) -> onnx.ModelProto:
    """Conv → ReLU → max pool → conv + residual → global pool → flatten → Gemm."""
    rng = np.random.default_rng(seed)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32),
                                       name)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p1"], ["s2"]),
        helper.make_node("Relu", ["s2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [init("w1", 32, 3, 3, 3), init("b1", 32), init("w2", 32, 32, 3, 3), init("b2", 32),
         init("wf", 10, 32), init("bf", 10)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory):
    model = _small_model()
    folder = compile_gpu(model, tmp_path_factory.mktemp("gpu") / "plan", "cuda:a100")
    return model, folder


def _digest(folder: Path) -> str:
    return "sha256:" + hashlib.sha256((folder / "plan.json").read_bytes()).hexdigest()


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def test_a_gpu_plan_walked_on_the_host_equals_onnx_runtime(small_plan):
    model, folder = small_plan
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = check_on_host(folder, {"x": x})["y"]
    np.testing.assert_allclose(got, _ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    doc = json.loads((folder / "plan.json").read_text())
    assert [s["template"] for s in doc["steps"]] == ["conv", "pool", "conv", "pool", "dense"]
    assert all(s["sm"] == 80 for s in doc["steps"])
    assert doc["inputs"][0]["to_device"] is None     # the stem conv reads NCHW where it lies
    assert doc["values"]["f"]["alias"] == "g"         # Flatten is a view of the pool's bytes


def test_the_plan_opens_with_numpy_alone_and_refuses_a_host_without_its_device(small_plan,
                                                                               tmp_path):
    _, folder = small_plan
    only = tmp_path / "site"
    only.mkdir()
    numpy_dir = Path(np.__file__).parent
    for d in (numpy_dir, numpy_dir.with_name("numpy.libs")):
        if d.exists():
            (only / d.name).symlink_to(d)
    script = (
        "import sys\n"
        f"sys.path[:0] = [{str(ROOT)!r}, {str(only)!r}]\n"
        "from woodpecker.runtime.gpu_plan import GpuPlan\n"
        "from woodpecker.errors import PlanError\n"
        f"plan = GpuPlan.open({str(folder)!r}, digest={_digest(folder)!r})\n"
        "print(len(plan.doc['steps']), plan.device.name)\n"
        "try:\n    plan.session()\nexcept PlanError as e:\n    print('refused:', e)\n"
        "heavy = [m for m in ('halide', 'onnx', 'onnxruntime', 'torch', 'woodpecker.compiler',"
        " 'woodpecker.engines') if m in sys.modules]\n"
        "print('imported:', heavy)\n")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "5 NVIDIA A100-SXM4-80GB"
    assert lines[1].startswith("refused: cannot load this GPU plan here: it was built for "
                               "NVIDIA A100") and "\n" not in lines[1]
    assert lines[2] == "imported: []"


@pytest.mark.parametrize("edit, message", [
    (lambda d, f: (f / d["steps"][0]["kernel"]).write_bytes(b"not a kernel"), "sha256 differs"),
    (lambda d, f: (f / "weights.bin").unlink(), "missing"),
    (lambda d, f: d["values"][d["steps"][0]["out"]["value"]].update(offset=d["arena_bytes"]),
     "outside the arena"),
    (lambda d, f: d["steps"][1].update(sm=75), "PTX for sm_75"),
    (lambda d, f: d["steps"][1]["args"][0].update(value="nowhere"), "unknown value"),
    (lambda d, f: d.update(version=99), "plan version 99"),
    (lambda d, f: d["steps"][0].update(kernel="../../etc/passwd"), "not a file inside"),
    (lambda d, f: d.pop("weights"), "malformed"),
])
def test_a_tampered_gpu_plan_is_one_line(small_plan, tmp_path, edit, message):
    _, folder = small_plan
    copy = tmp_path / "plan"
    shutil.copytree(folder, copy)
    doc = json.loads((copy / "plan.json").read_text())
    edit(doc, copy)
    (copy / "plan.json").write_text(json.dumps(doc))
    with pytest.raises(PlanError, match=message) as e:
        GpuPlan.open(copy)
    assert "\n" not in str(e.value)


def test_a_gpu_plan_from_elsewhere_opens_pinned_or_trusted(small_plan, tmp_path):
    """A GPU plan is native code: this user's signed plan opens as it is; one unsigned or
    edited (here: its signature dropped) only pinned by its digest or with trust=True."""
    _, folder = small_plan
    GpuPlan.open(folder)
    copy = tmp_path / "plan"
    shutil.copytree(folder, copy)
    doc = json.loads((copy / "plan.json").read_text())
    doc.pop("signature")
    (copy / "plan.json").write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="holds native code .* carries no signature: a plan "
                                        "is a program") as e:
        GpuPlan.open(copy)
    assert "\n" not in str(e.value)
    GpuPlan.open(copy, digest=_digest(copy))
    GpuPlan.open(copy, trust=True)
    with pytest.raises(PlanError, match="is not the plan you trusted"):
        GpuPlan.open(copy, digest="sha256:" + "0" * 64)
    with pytest.raises(PlanError, match="is not a plan digest"):
        GpuPlan.open(copy, digest=12345)


def test_gpu_native_code_is_loaded_from_the_bytes_checked(small_plan, tmp_path):
    """The runtime and kernels are mapped from a sealed copy of the bytes whose sha256 was
    checked: a file swapped after the copy changes nothing, one swapped before is refused
    (it had loaded whatever lay at the path when dlopen ran)."""
    _, folder = small_plan
    copy = tmp_path / "plan"
    shutil.copytree(folder, copy)
    plan = GpuPlan.open(copy)
    step = plan.doc["steps"][0]
    entry = {"file": step["kernel"], "sha256": step["sha256"]}
    original = (copy / step["kernel"]).read_bytes()
    sealed = plan.native(entry)
    (copy / step["kernel"]).write_bytes(b"payload")
    assert sealed.read_bytes() == original
    with pytest.raises(PlanError, match="sha256 differs"):
        plan.native(entry)


def test_a_gpu_plan_save_never_writes_through_a_planted_link(tmp_path):
    """runtime.so, weights.bin and plan.json planted as links to a user's files: the save
    replaces the links, the user's files keep their bytes."""
    folder = tmp_path / "plan"
    folder.mkdir()
    victims = {}
    for name in ("runtime.so", "weights.bin", "plan.json"):
        victims[name] = tmp_path / f"user-{name}"
        victims[name].write_bytes(b"the user's own file")
        (folder / name).symlink_to(victims[name])
    compile_gpu(_small_model(), folder, "cuda:a100")
    for name, victim in victims.items():
        assert victim.read_bytes() == b"the user's own file", name
        assert not (folder / name).is_symlink(), name
    GpuPlan.open(folder)


def test_feeds_of_the_wrong_shape_are_one_line(small_plan):
    from woodpecker.assembly.gpu_host import HostMemory

    session = GpuPlan.open(small_plan[1]).session(HostMemory())
    with pytest.raises(WoodpeckerError, match=r"input 'x' must be float32 of shape \[1, 3, 16"):
        session.run({"x": np.zeros((1, 3, 8, 8), np.float32)})
    with pytest.raises(WoodpeckerError, match="missing input 'x'"):
        session.run({})


def test_nodes_no_gpu_template_computes_are_named(tmp_path):
    nodes = [helper.make_node("ArgMax", ["x"], ["y"], axis=1)]
    graph = helper.make_graph(
        nodes, "arg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(WoodpeckerError, match=r"neither a GPU kernel nor the host computes 1 "
                                              r"node\(s\): .*ArgMax"):
        compile_gpu(model, tmp_path / "plan", "cuda:h100")
    assert not (tmp_path / "plan" / "plan.json").exists()


@pytest.mark.slow
def test_resnet18_gpu_plan_builds_and_equals_onnx_runtime_on_the_host(tmp_path):
    """Issue 54's device-free acceptance: a GPU plan for resnet18 builds here; its walk on this
    CPU equals ONNX Runtime (the fresh-process load is the test above, on the small plan)."""
    from woodpecker.zoo import export

    path = str(export("resnet18"))
    folder = compile_gpu(path, tmp_path / "resnet18", "cuda:h100")
    plan = GpuPlan.open(folder)
    assert len(plan.doc["steps"]) == 23 and plan.device.capability == 90
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    got = check_on_host(folder, {"input": x})
    (name,) = got
    ref = _ort(onnx.load(path), {"input": x})[0]
    np.testing.assert_allclose(got[name], ref, rtol=1e-3, atol=1e-3)
    # the device script's torch reference of the plan's own graph (the eager and compiled
    # baselines on the device) equals it too, here on the CPU
    import torch

    from benchmarks.gpu_device import TorchPlan

    with torch.no_grad():
        mirrored = TorchPlan(plan, torch, "cpu")(input=torch.from_numpy(x))[name].numpy()
    np.testing.assert_allclose(mirrored, ref, rtol=1e-3, atol=1e-3)


def test_the_gpu_plan_command_builds_and_checks(tmp_path, capsys):
    from woodpecker.cli import main

    onnx.save(_small_model(3), tmp_path / "small.onnx")
    assert main(["gpu-plan", str(tmp_path / "small.onnx"), "-o", str(tmp_path / "plan"),
                 "--target", "cuda:t4", "--check"]) == 0
    out = capsys.readouterr().out
    assert "GPU plan for Tesla T4 (sm_75" in out and "5 kernels" in out
    worst = float(out.rsplit("max |difference| ", 1)[1].split()[0])
    assert worst < 1e-4
    assert main(["gpu-plan", str(tmp_path / "small.onnx"), "-o", str(tmp_path / "p2"),
                 "--target", "cuda:sm_60"]) == 1
    assert "no known device of compute capability 6.0" in capsys.readouterr().err


def test_a_transformer_encoder_gpu_plan_equals_onnx_runtime_on_the_host(tmp_path):
    """Attention's movement (Transpose, Gather, views of the model input), batched products,
    softmax and layer norms, in the values' own layout."""
    import torch

    from benchmarks.gpu_device import TorchPlan
    from woodpecker.zoo import export

    path = str(export("transformer_encoder"))
    folder = compile_gpu(path, tmp_path / "enc", "cuda:h100")
    plan = GpuPlan.open(folder)
    assert {"movement", "rows", "dense"} <= {s["template"] for s in plan.doc["steps"]}
    assert not any(v.get("nhwc") for v in plan.doc["values"].values())
    x = np.random.default_rng(0).standard_normal((1, 128, 128)).astype(np.float32)
    (name, got), = check_on_host(folder, {"input": x}).items()
    ref = _ort(onnx.load(path), {"input": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        mirrored = TorchPlan(plan, torch, "cpu")(input=torch.from_numpy(x))[name].numpy()
    np.testing.assert_allclose(mirrored, ref, rtol=1e-4, atol=1e-4)


def test_an_encoder_exported_at_batch_2_plans_its_residual_sums(tmp_path):
    """A batch above 1 leaves the residual sums as plain 3-d Adds (at batch 1 the exporter's
    shapes differ): GPU plans group them (fuse_float_rows, outside the CPU pipelines) for the
    element-wise template, in the values' own layout."""
    import torch

    from benchmarks.gpu_device import TorchPlan
    from benchmarks.gpu_prepare import at_batch
    from woodpecker.passes import AGO

    assert "fuse_float_rows" not in AGO
    model = at_batch("transformer_encoder", 2)
    folder = compile_gpu(model, tmp_path / "enc2", "cuda:h100")
    plan = GpuPlan.open(folder)
    rows = [s for s in plan.doc["steps"] if s["task"].startswith("elementwise_rows")]
    assert len(rows) == 2 and {s["template"] for s in rows} == {"elementwise"}
    x = np.random.default_rng(0).standard_normal((2, 128, 128)).astype(np.float32)
    (name, got), = check_on_host(folder, {"input": x}).items()
    ref = _ort(model, {"input": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        mirrored = TorchPlan(plan, torch, "cpu")(input=torch.from_numpy(x))[name].numpy()
    np.testing.assert_allclose(mirrored, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("which", ["every", "first conv and the product"])
def test_library_steps_run_on_torch_over_the_plans_own_views(tmp_path, which):
    """Library steps (runtime/gpu_torch.py) take the generated kernels' places on the same
    arena views — NHWC images, a residual's flat view, the conv's HWIO weights — and the
    walk still equals ONNX Runtime, alone or mixed with generated kernels."""
    from woodpecker.assembly.gpu_steps import EVERY_TASK, gpu_steps
    from woodpecker.compiler_gpu import gpu_graph

    model = _small_model(5)
    if which == "every":
        library = EVERY_TASK
    else:
        steps = gpu_steps(gpu_graph(model), Target.parse("cuda:a100"))
        library = {next(s.task.key for s in steps if s.task.kind == "conv2d"),
                   next(s.task.key for s in steps if s.task.kind == "dense")}
    folder = compile_gpu(model, tmp_path / "lib", "cuda:a100", library=library)
    doc = GpuPlan.open(folder).doc
    engines = [s.get("engine", "generated") for s in doc["steps"]]
    assert engines.count("library") == (len(engines) if which == "every" else 2)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = check_on_host(folder, {"x": x})
    ref = _ort(model, {"x": x})
    np.testing.assert_allclose(list(got.values())[0], ref[0], rtol=1e-4, atol=1e-4)


def test_choosing_engines_at_load_times_both_and_keeps_the_outputs(small_plan):
    """`session.choose` times each step as its generated kernel and as its library call on
    the plan's views and keeps the faster; the outputs stay ONNX Runtime's whichever wins."""
    from woodpecker.assembly.gpu_host import HostMemory

    model, folder = small_plan
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    session = GpuPlan.open(folder).session(HostMemory())
    report = session.choose({"x": x}, runs=2)
    steps = GpuPlan.open(folder).doc["steps"]
    assert [c.node for c in report] == [s["node"] for s in steps]
    for choice in report:
        assert choice.generated_ms > 0 and choice.library_ms > 0
        assert choice.engine == ("library" if choice.library_ms < choice.generated_ms
                                 else "generated")
    got = session.run({"x": x})
    np.testing.assert_allclose(list(got.values())[0], _ort(model, {"x": x})[0], rtol=1e-4,
                               atol=1e-4)


def test_a_winograd_step_keeps_raw_weights_for_the_library(tmp_path):
    """A measured choice of template (GpuChoice) is honoured: the 3×3 conv on Winograd, its
    weights transformed at build (U = G g Gᵀ) with the raw ones kept as `library_args`, so
    the choice at load can still time it against cuDNN; both walks equal ONNX Runtime."""
    from woodpecker.assembly.gpu_host import HostMemory
    from woodpecker.assembly.gpu_steps import GpuChoice, gpu_steps
    from woodpecker.compiler_gpu import gpu_graph
    from woodpecker.engines.halide.gpu import winograd

    model = _small_model(9)
    steps = gpu_steps(gpu_graph(model), Target.parse("cuda:a100"))
    task = next(s.task for s in steps if winograd.supports(s.task))
    key = task.key
    config = next(c for c in winograd.space(task, Target.parse("cuda:a100").device)
                  .valid_configs() if c["m"] == 2)
    folder = compile_gpu(model, tmp_path / "w", "cuda:a100",
                         configs={key: GpuChoice("winograd", config)})
    doc = GpuPlan.open(folder).doc
    (step,) = [s for s in doc["steps"] if s["task"] == key]
    assert step["template"] == "winograd" and "library_args" in step
    entries = doc["weights"]["entries"]
    assert entries[step["args"][1]["weight"]]["shape"][:2] == [4, 4]       # (b, a, C, K)
    assert entries[step["library_args"][1]["weight"]]["shape"][:2] == [3, 3]   # HWIO
    x = np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float32)
    ref = _ort(model, {"x": x})[0]
    np.testing.assert_allclose(check_on_host(folder, {"x": x})["y"], ref, rtol=1e-4, atol=1e-4)
    session = GpuPlan.open(folder).session(HostMemory())
    session.choose({"x": x}, runs=1)
    np.testing.assert_allclose(session.run({"x": x})["y"], ref, rtol=1e-4, atol=1e-4)
    library = compile_gpu(model, tmp_path / "l", "cuda:a100", library={key},
                          configs={key: GpuChoice("winograd", config)})
    np.testing.assert_allclose(check_on_host(library, {"x": x})["y"], ref, rtol=1e-4,
                               atol=1e-4)


def _walk_and_mirror_equal_ort(model, plan: GpuPlan, x: np.ndarray) -> np.ndarray:
    """The plan's walk on the host and the device script's torch mirror both equal ONNX
    Runtime on input `x` (output `y`); returns ONNX Runtime's output."""
    import torch

    from benchmarks.gpu_device import TorchPlan

    ref = _ort(model, {"x": x})[0]
    np.testing.assert_allclose(check_on_host(plan.folder, {"x": x})["y"], ref, rtol=1e-4,
                               atol=1e-4)
    with torch.no_grad():
        mirrored = TorchPlan(plan, torch, "cpu")(x=torch.from_numpy(x))["y"].numpy()
    np.testing.assert_allclose(mirrored, ref, rtol=1e-4, atol=1e-4)
    return ref


def _model(nodes, inputs, outputs, weights) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs, weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_nhwc_values_read_in_the_model_layout_are_converted(tmp_path, precision):
    """A conv's NHWC output read by a softmax over its last (NCHW) axis, and flattened into a
    classifier with 4×4 pixels left (VGG's and AlexNet's Flatten): one movement kernel each
    (LayoutConvert) transposes it to NCHW; the walk and the torch mirror equal ONNX Runtime."""
    import torch

    from benchmarks.gpu_device import TorchPlan

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((10, 128)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Softmax", ["c"], ["s"], axis=-1),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                   [helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 8, 8, 8]),
                    helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w, fc])
    folder = compile_gpu(model, tmp_path / "plan", "cuda:h100", precision=precision)
    plan = GpuPlan.open(folder)
    converts = [s for s in plan.doc["steps"] if s.get("layout_conversion")]
    assert len(converts) == 2 and {s["template"] for s in converts} == {"movement"}
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = check_on_host(folder, {"x": x})
    bar = 1e-4 if precision == "fp32" else 2e-2
    for ref, name in zip(_ort(model, {"x": x}), ("s", "y"), strict=True):
        np.testing.assert_allclose(got[name], ref, rtol=bar, atol=bar * np.abs(ref).max())
        if precision == "fp32":
            with torch.no_grad():
                mirrored = TorchPlan(plan, torch, "cpu")(x=torch.from_numpy(x))[name].numpy()
            np.testing.assert_allclose(mirrored, ref, rtol=1e-4, atol=1e-4)


def test_concats_plan_in_nhwc_or_in_the_model_layout(tmp_path):
    """Two convs' NHWC outputs joined along channels stay NHWC (an inception block); joined
    with the model input they are converted and joined in the model's layout; a constant
    joins the latter. Walk and mirror equal ONNX Runtime; no node is refused."""


    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 4, 1, 1)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((6, 4, 3, 3)).astype(np.float32), "w2")
    k = numpy_helper.from_array(rng.standard_normal((1, 2, 6, 6)).astype(np.float32), "k")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Conv", ["x", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Concat", ["r", "x", "k"], ["y"], axis=1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 20, 6, 6])],
                   [w1, w2, k])
    folder = compile_gpu(model, tmp_path / "plan", "cuda:h100")
    plan = GpuPlan.open(folder)
    concats = [s for s in plan.doc["steps"] if s["template"] == "concat"]
    assert [json.loads(s["task"].partition(":")[2])["nhwc"] for s in concats] == [True, False]
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    ref = _walk_and_mirror_equal_ort(model, plan, x)
    library = compile_gpu(model, tmp_path / "lib", "cuda:h100", library=EVERY_TASK)
    np.testing.assert_allclose(check_on_host(library, {"x": x})["y"], ref, rtol=1e-4,
                               atol=1e-4)


def test_a_node_no_gpu_kernel_computes_runs_on_the_host_between_copies(tmp_path, capsys):
    """A Split and a Resize (no GPU template): host steps running the ops' numpy references
    between copies, their inputs converted to the model's layout and their outputs back to
    NHWC for the convs; the walk and the torch mirror equal ONNX Runtime, the CLI says how
    many ran on the host, and the choice at load leaves them alone."""

    from woodpecker.assembly.gpu_host import HostMemory
    from woodpecker.cli import main

    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w2")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Split", ["c"], ["a", "b"], axis=1, num_outputs=2),
             helper.make_node("Conv", ["a", "w2"], ["d"]),
             helper.make_node("Add", ["d", "b"], ["e"]),
             helper.make_node("Resize", ["e", "", "scales"], ["y"], mode="nearest")]
    model = helper.make_model(helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 12, 12])], [w, w2, scales]),
        opset_imports=[helper.make_opsetid("", 18)])
    folder = compile_gpu(model, tmp_path / "plan", "cuda:h100")
    plan = GpuPlan.open(folder)
    host = [s for s in plan.doc["steps"] if s.get("engine") == "host"]
    assert [s["op"] for s in host] == ["Split", "Resize"]
    assert len(host[0]["outs"]) == 2 and host[1]["args"][1] == {"none": True}
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    ref = _walk_and_mirror_equal_ort(model, plan, x)
    session = plan.session(HostMemory())
    report = session.choose({"x": x}, runs=1)
    assert len(report) == len(plan.doc["steps"]) - 2
    np.testing.assert_allclose(session.run({"x": x})["y"], ref, rtol=1e-4, atol=1e-4)
    onnx.save(model, tmp_path / "m.onnx")
    assert main(["gpu-plan", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "p2"), "--target",
                 "cuda:h100"]) == 0
    assert "2 node(s) run on the host between copies" in capsys.readouterr().out


def test_a_position_embedding_and_a_two_class_head_plan(tmp_path):
    """A ViT's Add of a constant of the activation's whole shape (an input of the element-wise
    group, stored with the weights) and SwiftNet's 2-class classifier (a product's tile of
    one or two threads across)."""
    rng = np.random.default_rng(3)
    pos = numpy_helper.from_array(rng.standard_normal((1, 5, 16)).astype(np.float32), "pos")
    fc = numpy_helper.from_array(rng.standard_normal((16, 2)).astype(np.float32), "fc")
    nodes = [helper.make_node("Add", ["x", "pos"], ["e"]),
             helper.make_node("MatMul", ["e", "fc"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 16])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 2])], [pos, fc])
    folder = compile_gpu(model, tmp_path / "plan", "cuda:h100")
    assert [s["template"] for s in GpuPlan.open(folder).doc["steps"]] == ["elementwise", "dense"]
    x = rng.standard_normal((1, 5, 16)).astype(np.float32)
    np.testing.assert_allclose(check_on_host(folder, {"x": x})["y"], _ort(model, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)


def test_a_value_held_in_its_own_layout_is_converted_for_a_conv(tmp_path):
    """A softmax's output (its own layout) read by a conv (NHWC), as a ShuffleNet's Slice or
    a ConvNeXt's Transpose feeds one: converted to NHWC by one movement kernel."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1),
             helper.make_node("Conv", ["s", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [w])
    folder = compile_gpu(model, tmp_path / "plan", "cuda:h100")
    steps = GpuPlan.open(folder).doc["steps"]
    assert [s.get("layout_conversion", False) for s in steps] == [False, True, False]
    x = rng.standard_normal((1, 8, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(check_on_host(folder, {"x": x})["y"], _ort(model, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)


def test_convs_with_a_prologue_plan_on_the_gpu(tmp_path):
    """Squeeze-and-excitation (x · sigmoid(conv(pool(x))) into a conv: the scale becomes the
    conv's prologue, a run-time per-channel vector) and a ReLU before a depthwise conv
    (RandWire's, DARTS'): the templates apply the prologue as they read the input; walk,
    mirror and the library path equal ONNX Runtime."""
    import torch

    from benchmarks.gpu_device import TorchPlan

    rng = np.random.default_rng(2)
    ws = numpy_helper.from_array(rng.standard_normal((16, 16, 1, 1)).astype(np.float32), "ws")
    wc = numpy_helper.from_array(rng.standard_normal((16, 16, 1, 1)).astype(np.float32), "wc")
    wd = numpy_helper.from_array(rng.standard_normal((16, 1, 3, 3)).astype(np.float32), "wd")
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]),
             helper.make_node("Conv", ["p", "ws"], ["q"]),
             helper.make_node("Sigmoid", ["q"], ["g"]),
             helper.make_node("Mul", ["x", "g"], ["m"]),
             helper.make_node("Conv", ["m", "wc"], ["y"]),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Conv", ["r", "wd"], ["z"], group=16, pads=[1, 1, 1, 1])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8]),
                    helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16, 8, 8])],
                   [ws, wc, wd])
    folder = compile_gpu(model, tmp_path / "plan", "cuda:h100")
    plan = GpuPlan.open(folder)
    prologues = [s for s in plan.doc["steps"] if '"prologue"' in s["task"]]
    assert len(prologues) == 2
    x = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    refs = dict(zip("yz", _ort(model, {"x": x}), strict=True))
    library = compile_gpu(model, tmp_path / "lib", "cuda:h100", library=EVERY_TASK)
    with torch.no_grad():
        mirrored = TorchPlan(plan, torch, "cpu")(x=torch.from_numpy(x))
    for got in (check_on_host(folder, {"x": x}), check_on_host(library, {"x": x}),
                {k: v.numpy() for k, v in mirrored.items()}):
        for name, ref in refs.items():
            np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-4)


def test_an_fp16_plan_stores_half_precision_and_stays_close(tmp_path, small_plan):
    """`precision="fp16"`: weights and activations in float16 on the device, computed in
    float32; the host converts inputs and outputs. Within 1e-2 of the outputs' scale. Its
    arena is planned in half precision's bytes: at most half the fp32 plan's, plus alignment."""
    model = _small_model(7)
    folder = compile_gpu(model, tmp_path / "half", "cuda:a100", precision="fp16")
    doc = json.loads((folder / "plan.json").read_text())
    assert doc["precision"] == "fp16"
    full = GpuPlan.open(small_plan[1]).doc["arena_bytes"]      # the same shapes in fp32
    assert doc["arena_bytes"] <= full // 2 + 64 * len(doc["values"])
    assert {e["dtype"] for e in doc["weights"]["entries"]} == {"float16"}
    assert {v["dtype"] for v in doc["values"].values()} == {"float16"}
    assert doc["inputs"][0]["dtype"] == doc["outputs"][0]["dtype"] == "float32"
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = check_on_host(folder, {"x": x})["y"]
    assert got.dtype == np.float32
    ref = _ort(model, {"x": x})[0]
    assert np.max(np.abs(got - ref)) <= 1e-2 * max(1.0, float(np.max(np.abs(ref))))
    with pytest.raises(WoodpeckerError, match="GPU plans compute in fp32 or fp16"):
        compile_gpu(model, tmp_path / "bf", "cuda:a100", precision="bf16")
