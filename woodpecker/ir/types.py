"""Element types: the mapping between ONNX tensor types and numpy dtypes.

Only dtypes numpy represents natively are supported; bfloat16, float8, int4 and strings are
rejected at import with an `UnsupportedOpError` naming the value.
"""

from __future__ import annotations

import numpy as np

# ONNX's TensorProto.DataType numbers (fixed by the ONNX standard, onnx.proto3), so the IR can
# name element types without importing onnx (a plan loads and runs without it).
ONNX_TO_NUMPY: dict[int, np.dtype] = {
    1: np.dtype("float32"), 11: np.dtype("float64"), 10: np.dtype("float16"),
    3: np.dtype("int8"), 5: np.dtype("int16"), 6: np.dtype("int32"), 7: np.dtype("int64"),
    2: np.dtype("uint8"), 4: np.dtype("uint16"), 12: np.dtype("uint32"),
    13: np.dtype("uint64"), 9: np.dtype("bool"),
}
NUMPY_TO_ONNX: dict[np.dtype, int] = {v: k for k, v in ONNX_TO_NUMPY.items()}


def onnx_type_name(elem_type: int) -> str:
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"unknown element type {elem_type}"


def to_numpy_dtype(elem_type: int) -> np.dtype | None:
    """The numpy dtype for an ONNX element type, or None when Woodpecker cannot hold it."""
    return ONNX_TO_NUMPY.get(elem_type)


def to_onnx_type(dtype: np.dtype) -> int:
    return NUMPY_TO_ONNX[np.dtype(dtype)]


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse `1x3x224x224` (or `1,3,224,224`) into a shape tuple."""
    parts = text.replace(",", "x").split("x") if text else []
    try:
        dims = tuple(int(p) for p in parts if p != "")
    except ValueError:
        raise ValueError(f"bad shape {text!r}: expected dimensions like 1x3x224x224") from None
    if not dims or any(d < 1 for d in dims):
        raise ValueError(f"bad shape {text!r}: dimensions must be at least 1")
    return dims
