"""The IR's element-type numbers are ONNX's own (it names them without importing onnx)."""

from onnx import TensorProto, helper

from woodpecker.ir.types import ONNX_TO_NUMPY


def test_element_type_numbers_are_onnx_tensorproto_numbers():
    for code, dtype in ONNX_TO_NUMPY.items():
        assert helper.tensor_dtype_to_np_dtype(code) == dtype
    assert ONNX_TO_NUMPY[TensorProto.FLOAT].name == "float32"
