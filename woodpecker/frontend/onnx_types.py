"""ONNX value types read as Woodpecker's: dimensions (dynamic ones not ints) and element
types (numpy dtypes, or one UnsupportedOpError line). A plan a library runs whole
(frontend/whole.py) also holds strings, as numpy object arrays (`library_dtype`, `STRING`);
the node-level import does not (`element_dtype`)."""

from __future__ import annotations

import numpy as np
import onnx

from woodpecker.errors import UnsupportedOpError
from woodpecker.ir.types import onnx_type_name, to_numpy_dtype, to_onnx_type


def dims_of(vi: onnx.ValueInfoProto) -> list:
    t = vi.type
    if not t.HasField("tensor_type"):
        raise UnsupportedOpError(f"graph value {vi.name!r} is not a tensor "
                                 f"({t.WhichOneof('value')}); only tensors are supported")
    if not t.tensor_type.HasField("shape"):
        return [None]
    # a dimension written -1 is dynamic to ONNX Runtime (paddle2onnx writes them); one written
    # 0 stays 0 (an empty axis, as ONNX Runtime reads it) unless the user gives the shape
    # (frontend/onnx_import.specialise)
    return [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else
            (d.dim_param or ("?" if d.HasField("dim_value") else None))
            for d in t.tensor_type.shape.dim]


def element_dtype(elem_type: int, what: str) -> np.dtype:
    dt = to_numpy_dtype(elem_type)
    if dt is None:
        raise UnsupportedOpError(f"{what} has element type {onnx_type_name(elem_type)}, which "
                                 "is not supported")
    return dt


# strings: numpy's object arrays of str, as ONNX Runtime's and OpenVINO's Python APIs take and
# return them — held only by a plan a library runs whole (frontend/whole.py)
STRING = np.dtype(object)


# the element types numpy holds only through ml_dtypes (onnx's own reading of them):
# bfloat16, the float8s, 4-bit ints and floats — for initializers a library reads whole
# (their bytes go into its step model unchanged; no kernel of Woodpecker's computes them)
ML_DTYPES = {onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT8E4M3FN,
             onnx.TensorProto.FLOAT8E4M3FNUZ, onnx.TensorProto.FLOAT8E5M2,
             onnx.TensorProto.FLOAT8E5M2FNUZ, onnx.TensorProto.UINT4, onnx.TensorProto.INT4,
             *(getattr(onnx.TensorProto, n) for n in ("FLOAT4E2M1", "FLOAT8E8M0")
               if hasattr(onnx.TensorProto, n))}


def library_dtype(elem_type: int, what: str, constant: bool = False) -> np.dtype:
    """`element_dtype`, strings too (`STRING`): a value only a library computes; with
    `constant` (an initializer) the `ML_DTYPES` too, as onnx reads them."""
    if elem_type == onnx.TensorProto.STRING:
        return STRING
    if constant and elem_type in ML_DTYPES:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    return element_dtype(elem_type, what)


def onnx_elem_type(dtype: np.dtype) -> int:
    """The ONNX element type of a value's dtype (`STRING` included)."""
    if np.dtype(dtype) == STRING:
        return onnx.TensorProto.STRING
    return to_onnx_type(dtype)
