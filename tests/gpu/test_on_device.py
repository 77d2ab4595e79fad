"""On a machine with a CUDA device (and the full install: Halide builds the kernels): a GPU
plan runs on the device and equals its walk on the CPU; device memory and events work.
Skipped elsewhere — CI has no GPU; the lent device runs benchmarks/gpu_device.py instead,
which needs no Halide."""

from __future__ import annotations

import numpy as np
import pytest

from woodpecker.gpu import driver

try:
    HOST_DEVICE = driver.host_device(75)
except driver.NoDevice as e:
    HOST_DEVICE, WHY = None, str(e)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(HOST_DEVICE is None, reason="no CUDA device here")]


def test_a_plan_runs_on_the_device_as_on_the_host(tmp_path):
    from tests.gpu.test_gpu_plan import _small_model
    from woodpecker.compiler_gpu import check_on_host, compile_gpu
    from woodpecker.runtime.gpu_plan import GpuPlan

    folder = compile_gpu(_small_model(5), tmp_path / "plan", "cuda")
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    session = GpuPlan.open(folder).session()
    got = session.run({"x": x})["y"]
    np.testing.assert_allclose(got, check_on_host(folder, {"x": x})["y"], rtol=1e-4, atol=1e-4)
    times = session.time({"x": x}, runs=5, warmup=1)
    assert len(times) == 5 and all(t > 0 for t in times)


def test_device_memory_round_trips():
    from woodpecker.engines.halide.gpu.runtime_build import cuda_runtime
    from woodpecker.gpu.runtime import CudaRuntime
    from woodpecker.target import Target

    rt = CudaRuntime(cuda_runtime(Target.parse("cuda")))
    memory = rt.alloc(4096)
    a = np.arange(256, dtype=np.float32).reshape(16, 16)
    view = rt.view(memory, 1024, a.shape, a.dtype)
    rt.upload(view, a)
    np.testing.assert_array_equal(rt.download(view, np.empty_like(a)), a)
    free, total = rt.memory_info()
    assert 0 < free <= total


def test_library_steps_and_the_choice_at_load_run_on_the_device(tmp_path):
    """torch's cuDNN/cuBLAS calls on the plan's own device memory (runtime/gpu_torch.py),
    for every step and as chosen per step by timing both on this device."""
    from tests.gpu.test_gpu_plan import _small_model
    from woodpecker.assembly.gpu_steps import EVERY_TASK
    from woodpecker.compiler_gpu import check_on_host, compile_gpu
    from woodpecker.runtime.gpu_plan import GpuPlan

    model = _small_model(5)
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    library = compile_gpu(model, tmp_path / "lib", "cuda", library=EVERY_TASK)
    expected = check_on_host(library, {"x": x})["y"]
    np.testing.assert_allclose(GpuPlan.open(library).session().run({"x": x})["y"], expected,
                               rtol=1e-3, atol=1e-3)
    session = GpuPlan.open(compile_gpu(model, tmp_path / "gen", "cuda")).session()
    report = session.choose({"x": x}, runs=3)
    assert all(c.generated_ms > 0 and c.library_ms > 0 for c in report)
    np.testing.assert_allclose(session.run({"x": x})["y"], expected, rtol=1e-3, atol=1e-3)


def test_stages_on_streams_and_a_cuda_graph_keep_the_outputs(tmp_path):
    """DOS stages on streams (runtime/gpu_stages.py) and the walk as one CUDA graph."""
    from woodpecker.compiler_gpu import check_on_host, compile_gpu
    from woodpecker.runtime.gpu_plan import GpuPlan
    from woodpecker.zoo import export

    folder = compile_gpu(str(export("transformer_encoder")), tmp_path / "enc", "cuda")
    x = np.random.default_rng(0).standard_normal((1, 128, 128)).astype(np.float32)
    expected = check_on_host(folder, {"input": x})["output"]
    session = GpuPlan.open(folder).session()
    session.schedule({"input": x}, runs=5)
    np.testing.assert_allclose(session.run({"input": x})["output"], expected, rtol=1e-3,
                               atol=1e-3)
    replay = session.graph()
    session.feed({"input": 2 * x})
    replay()
    session.memory.synchronize()
    np.testing.assert_allclose(session.fetch()["output"],
                               check_on_host(folder, {"input": 2 * x})["output"], rtol=1e-3,
                               atol=1e-3)
