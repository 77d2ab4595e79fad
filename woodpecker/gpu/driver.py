"""The CUDA driver API through ctypes: which CUDA devices this host has, and their facts.

Contract: `devices()` lists the host's devices as `GpuDevice`s read from the driver
(libcuda.so.1: cuInit, cuDeviceGet*, cuDeviceTotalMem, cuDeviceGetAttribute);
`host_device(capability)` is the first one able to run code built for `capability`, or
raises `NoDevice` with one line saying why (no driver, no device, too old). Nothing here
imports beyond numpy and the standard library, so a saved GPU plan checks its device in a
process without Halide, onnx or the compiler.

Why the driver API and not torch or CuPy: it is the one library every machine with an NVIDIA
GPU has (it ships with the kernel driver), and Halide's own CUDA runtime loads the same one.
"""

from __future__ import annotations

import ctypes
import functools
import os

from woodpecker.gpu.devices import GpuDevice

LIBRARY = os.environ.get("WOODPECKER_LIBCUDA", "libcuda.so.1")

# CUdevice_attribute values (cuda.h)
_ATTRIBUTES = {"max_threads_per_block": 1, "shared_per_block": 8, "registers_per_block": 12,
               "warp": 10, "sms": 16, "l2": 38, "major": 75, "minor": 76, "shared_optin": 97}


class NoDevice(Exception):
    """This host cannot run CUDA code: the message says why, in one line."""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise NoDevice(f"the CUDA driver failed at {what} (CUresult {rc})")


@functools.cache
def _library() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(LIBRARY)
    except OSError as e:
        raise NoDevice(f"no CUDA driver on this host ({e})") from None
    _check(lib.cuInit(0), "cuInit")
    return lib


def devices() -> list[GpuDevice]:
    """This host's CUDA devices, in the driver's order; NoDevice without a driver."""
    lib = _library()
    count = ctypes.c_int(0)
    _check(lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    found = []
    for ordinal in range(count.value):
        dev = ctypes.c_int(0)
        _check(lib.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        name = ctypes.create_string_buffer(256)
        _check(lib.cuDeviceGetName(name, 256, dev), "cuDeviceGetName")
        memory = ctypes.c_size_t(0)
        _check(lib.cuDeviceTotalMem_v2(ctypes.byref(memory), dev), "cuDeviceTotalMem")
        facts = {}
        for field, code in _ATTRIBUTES.items():
            value = ctypes.c_int(0)
            _check(lib.cuDeviceGetAttribute(ctypes.byref(value), code, dev),
                   f"cuDeviceGetAttribute({field})")
            facts[field] = value.value
        major, minor = facts.pop("major"), facts.pop("minor")
        found.append(GpuDevice(name=name.value.decode(errors="replace"),
                               capability=10 * major + minor, memory=memory.value, **facts))
    return found


def host_device(capability: int = 0) -> GpuDevice:
    """The first device of this host that runs code built for `capability` (×10); NoDevice
    saying why there is none."""
    found = devices()
    if not found:
        raise NoDevice("the CUDA driver reports no device on this host")
    for dev in found:
        if dev.capability >= capability:
            return dev
    raise NoDevice(f"this host's CUDA devices ({', '.join(d.describe() for d in found)}) are "
                   f"older than sm_{capability}")
