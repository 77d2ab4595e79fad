"""Frontends: import a model (ONNX file/proto, or a PyTorch module) into the IR."""

from woodpecker.frontend.onnx_import import import_onnx, load_model_proto

__all__ = ["import_onnx", "load_model_proto"]
