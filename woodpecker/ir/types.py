"""Element types: the mapping between ONNX tensor types and numpy dtypes.

Only dtypes numpy represents natively are supported; bfloat16, float8, int4 and strings are
rejected at import with an `UnsupportedOpError` naming the value.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

ONNX_TO_NUMPY: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype("float32"),
    TensorProto.DOUBLE: np.dtype("float64"),
    TensorProto.FLOAT16: np.dtype("float16"),
    TensorProto.INT8: np.dtype("int8"),
    TensorProto.INT16: np.dtype("int16"),
    TensorProto.INT32: np.dtype("int32"),
    TensorProto.INT64: np.dtype("int64"),
    TensorProto.UINT8: np.dtype("uint8"),
    TensorProto.UINT16: np.dtype("uint16"),
    TensorProto.UINT32: np.dtype("uint32"),
    TensorProto.UINT64: np.dtype("uint64"),
    TensorProto.BOOL: np.dtype("bool"),
}
NUMPY_TO_ONNX: dict[np.dtype, int] = {v: k for k, v in ONNX_TO_NUMPY.items()}


def onnx_type_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type).lower()


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
    if any(d < 0 for d in dims):
        raise ValueError(f"bad shape {text!r}: dimensions must be non-negative")
    return dims
