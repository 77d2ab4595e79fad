"""PyTorch module → ONNX (torch.onnx.export, TorchScript exporter) → the ONNX frontend.

The TorchScript exporter is used because it is fast and exports eval-mode torchvision and
nn.TransformerEncoder models to plain opset-17 ONNX; the result is imported like any file.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

from woodpecker.errors import ModelError

EXPORT_OPSET = 17


def export_module(module: Any, example_inputs: Any, input_names=None, output_names=None,
                  opset: int = EXPORT_OPSET) -> bytes:
    import torch

    if example_inputs is None:
        raise ModelError("compiling a torch module needs example_inputs (a tensor or tuple)")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    module = module.eval()
    buf = io.BytesIO()
    # Grad stays enabled: under no_grad nn.TransformerEncoder takes a fused fast path
    # (aten::_transformer_encoder_layer_fwd) that has no ONNX export.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, tuple(example_inputs), buf, dynamo=False,
                              opset_version=opset, input_names=input_names,
                              output_names=output_names, do_constant_folding=True)
        except Exception as e:
            raise ModelError(f"torch.onnx.export failed: {str(e).splitlines()[0]}") from None
    return buf.getvalue()
