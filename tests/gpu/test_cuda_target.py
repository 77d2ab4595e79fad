"""The cuda target (issue 54): devices named or read from the driver, target keys, plans that
refuse to load without their device, and clear errors for every wrong spec."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from woodpecker.errors import WoodpeckerError
from woodpecker.gpu import driver
from woodpecker.gpu.devices import KNOWN_DEVICES, GpuDevice, halide_capability, known_device
from woodpecker.target import Target


def test_known_devices_by_name_and_capability():
    assert known_device("h100").capability == 90
    assert known_device("sm_80") == KNOWN_DEVICES["a100"]
    assert known_device("8.0") == known_device("80") == KNOWN_DEVICES["a100"]
    with pytest.raises(ValueError, match="no known device of compute capability 6.0"):
        known_device("sm_60")
    with pytest.raises(ValueError, match="unknown CUDA device 'v100x'"):
        known_device("v100x")


def test_halide_capability_is_the_newest_the_device_runs():
    assert halide_capability(90) == 86       # Hopper runs sm_86 PTX (JIT)
    assert halide_capability(89) == 86
    assert halide_capability(80) == 80
    assert halide_capability(75) == 75
    with pytest.raises(ValueError, match="older than"):
        halide_capability(20)


def test_a_named_cuda_target_keys_records_by_its_device():
    t = Target.parse("cuda:h100")
    assert t.kind == "cuda" and t.device == KNOWN_DEVICES["h100"]
    assert t.record_key == "cuda:nvidia-h100-80gb-hbm3:sm_90"
    assert t.halide_target == "x86-64-linux-sse41-cuda-cuda_capability_86"
    assert t.isa == ()          # its host code is baseline: it runs on the device's host
    assert Target.parse("cpu").halide_target == "host"
    assert Target.from_json(json.loads(json.dumps(t.to_json()))) == t
    assert "device" not in Target.parse("cpu").to_json()


@pytest.mark.parametrize("spec, message", [
    ("cuda:v100x", "unknown CUDA device"), ("cpu:h100", "unknown target"),
    ("rocm", "unknown target"), ("cuda:sm_60", "no known device")])
def test_wrong_target_specs_are_one_line(spec, message):
    with pytest.raises(WoodpeckerError, match=message) as e:
        Target.parse(spec)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("edit", [
    lambda d: d.pop("device"), lambda d: d["device"].pop("sms"),
    lambda d: d["device"].update(capability="ninety"), lambda d: d["device"].update(sms=0),
    lambda d: d.update(kind="tpu")])
def test_a_tampered_cuda_target_is_refused(edit):
    d = Target.parse("cuda:a100").to_json()
    edit(d)
    with pytest.raises(ValueError, match="target"):
        Target.from_json(d)


def test_a_cpu_target_with_a_device_is_refused():
    d = Target.parse("cpu").to_json()
    d["device"] = KNOWN_DEVICES["t4"].to_json()
    with pytest.raises(ValueError, match="with a device"):
        Target.from_json(d)


def test_without_a_driver_the_host_has_no_device(monkeypatch):
    monkeypatch.setattr(driver, "LIBRARY", "libcuda-that-is-not-here.so.1")
    driver._library.cache_clear()
    try:
        with pytest.raises(WoodpeckerError, match="no CUDA driver.*--target cuda:h100"):
            Target.parse("cuda")
        why = Target.parse("cuda:h100").incompatibility()
        assert why.startswith("it was built for NVIDIA H100") and "no CUDA driver" in why
    finally:
        driver._library.cache_clear()


def test_against_another_host_target():
    h100, t4 = Target.parse("cuda:h100"), Target.parse("cuda:t4")
    assert h100.incompatibility(t4) is not None          # sm_86 PTX does not run on sm_75
    assert t4.incompatibility(h100) is None              # sm_75 PTX runs on sm_90
    assert h100.incompatibility(Target.parse("cpu")).endswith("has no such device")


@pytest.fixture
def fake_driver(tmp_path, monkeypatch):
    """The driver API answered by tests/gpu/fake_libcuda.c (one H100)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lib = tmp_path / "libcuda_fake.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib),
                    str(Path(__file__).with_name("fake_libcuda.c"))], check=True)
    monkeypatch.setattr(driver, "LIBRARY", str(lib))
    driver._library.cache_clear()
    yield lib
    driver._library.cache_clear()


def test_the_driver_binding_reads_a_device(fake_driver):
    (dev,) = driver.devices()
    assert dev == GpuDevice("NVIDIA H100 80GB HBM3", 90, 132, 85520809984, 50 * 2**20,
                            1024, 49152, 232448, 65536, 32)
    assert driver.host_device(86) == dev
    with pytest.raises(driver.NoDevice, match="older than sm_100"):
        driver.host_device(100)
    t = Target.parse("cuda")
    assert t.device == dev and t.record_key == "cuda:nvidia-h100-80gb-hbm3:sm_90"
    assert Target.parse("cuda:h100").incompatibility() is None    # the host has one


def test_compiling_a_model_for_cuda_says_what_is_missing():
    import woodpecker
    from tests.helpers import conv_bn_relu_residual

    with pytest.raises(WoodpeckerError,
                       match="GPU plan folder.*compile_gpu.*or compile for target cpu") as e:
        woodpecker.compile(conv_bn_relu_residual(), target="cuda:h100")
    assert "\n" not in str(e.value)
