"""Halide's buffer ABI (`halide_buffer_t`, HalideRuntime.h) in ctypes: how Woodpecker hands
arrays to compiled Halide kernels — host arrays to CPU kernels (engines/halide/aot.py), device
memory to GPU kernels (gpu/runtime.py). Standard library and numpy only, at the bottom of the
layers, so a saved plan runs without Halide's compiler.

Halide's dimension 0 is numpy's last axis; strides are in elements.
"""

from __future__ import annotations

import ctypes

import numpy as np

TYPE_CODES = {"i": 0, "u": 1, "f": 2}
BFLOAT = 4     # halide_type_bfloat: ml_dtypes' bfloat16 arrays (bf16 kernels' packed weights)
HOST_DIRTY, DEVICE_DIRTY = 1, 2     # halide_buffer_flags


class Dim(ctypes.Structure):
    _fields_ = [("min", ctypes.c_int32), ("extent", ctypes.c_int32),
                ("stride", ctypes.c_int32), ("flags", ctypes.c_uint32)]


class Type(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class Buffer(ctypes.Structure):
    """`halide_buffer_t`: `device` and `device_interface` name device memory (0 and None for
    a host array), `host` the host memory (None for device-only buffers)."""

    _fields_ = [("device", ctypes.c_uint64), ("device_interface", ctypes.c_void_p),
                ("host", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("type", Type),
                ("dimensions", ctypes.c_int32), ("dim", ctypes.POINTER(Dim)),
                ("padding", ctypes.c_void_p)]


def type_of(dtype: np.dtype) -> Type:
    dtype = np.dtype(dtype)
    code = BFLOAT if dtype.name == "bfloat16" else TYPE_CODES[dtype.kind]
    return Type(code, 8 * dtype.itemsize, 1)


def dims_of(shape, strides_in_elements) -> ctypes.Array:
    nd = len(shape)
    return (Dim * nd)(*[Dim(0, shape[nd - 1 - i], strides_in_elements[nd - 1 - i], 0)
                        for i in range(nd)])


def host_buffer(a: np.ndarray) -> tuple[Buffer, ctypes.Array]:
    """A halide_buffer_t over numpy array `a` (and its dims, which must outlive it)."""
    dims = dims_of(a.shape, [s // a.itemsize for s in a.strides])
    return Buffer(0, None, a.ctypes.data, 0, type_of(a.dtype), a.ndim, dims, None), dims


def device_buffer(device: int, interface: int, shape, dtype,
                  host: "np.ndarray | None" = None) -> tuple[Buffer, ctypes.Array]:
    """A halide_buffer_t of contiguous device memory at `device` (a CUdeviceptr), owned by
    `interface` (halide_cuda_device_interface()), of `shape` and `dtype`; with `host`, the
    host array it is copied from and to (halide_copy_to_device / _to_host)."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.insert(0, step)
        step *= extent
    dims = dims_of(tuple(shape), strides)
    buf = Buffer(device, interface, None if host is None else host.ctypes.data, 0,
                 type_of(dtype), len(shape), dims, None)
    return buf, dims
