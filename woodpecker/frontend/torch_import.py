"""PyTorch module → ONNX → the ONNX frontend.

The current exporter (`torch.onnx.export(..., dynamo=True)`: torch.export's FX graph translated
by onnxscript) is used first: it is the one torch maintains, and what `transformers` models
export with today. Where it fails on a module, the TorchScript exporter (deprecated in torch
2.9+, still able to trace many eval-mode modules) is tried, and the model records which one
made it (`woodpecker.exporter` in its metadata). `example_inputs`: a tensor, a tuple of
positional tensors, or a dict of keyword tensors (as `transformers` models take them).
"""

from __future__ import annotations

import io
import logging
import warnings
from typing import Any

from woodpecker.errors import ModelError, first_line

EXPORT_OPSET = 18    # the exporter's default; Woodpecker reads opsets 13 and newer


def export_module(module: Any, example_inputs: Any, input_names=None, output_names=None,
                  opset: int = EXPORT_OPSET,
                  exporters: tuple[str, ...] = ("dynamo", "torchscript")) -> bytes:
    """The module as serialized ONNX, by the first of `exporters` that succeeds."""
    import torch

    if example_inputs is None:
        raise ModelError("compiling a torch module needs example_inputs (a tensor, a tuple or "
                         "a dict of tensors)")
    args, kwargs = (), {}
    if isinstance(example_inputs, torch.Tensor):
        args = (example_inputs,)
    elif isinstance(example_inputs, dict):
        kwargs = dict(example_inputs)
    elif isinstance(example_inputs, (tuple, list)):
        args = tuple(example_inputs)
    else:
        raise ModelError(f"example_inputs must be a tensor, a tuple or list of tensors or a "
                         f"dict of tensors, not a {type(example_inputs).__name__}")
    module = module.eval()
    errors = []
    for exporter in exporters:
        try:
            proto = export_with(module, args, kwargs, exporter, input_names, output_names, opset)
        except Exception as e:  # noqa: BLE001 - both exporters raise many types
            errors.append(f"{exporter}: {first_line(e, cause=True)}")
            continue
        entry = proto.metadata_props.add()
        entry.key, entry.value = "woodpecker.exporter", exporter
        return proto.SerializeToString()
    raise ModelError(f"torch.onnx.export failed ({'; '.join(errors)})")


def export_with(module, args, kwargs, exporter, input_names, output_names, opset):
    """`module` exported by one exporter ("dynamo": torch's current one; else TorchScript's)
    to an ONNX ModelProto of `opset`."""
    import onnx
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            # onnxscript's constant folding logs each value it could not fold as a warning
            quiet = logging.getLogger("onnxscript")
            level = quiet.level
            quiet.setLevel(logging.ERROR)
            try:
                program = torch.onnx.export(module, args, kwargs=kwargs or None, dynamo=True,
                                            opset_version=opset, input_names=input_names,
                                            output_names=output_names, verbose=False)
            finally:
                quiet.setLevel(level)
            return program.model_proto
        buf = io.BytesIO()
        # Grad stays enabled: under no_grad nn.TransformerEncoder takes a fused fast path
        # (aten::_transformer_encoder_layer_fwd) that has no TorchScript export.
        torch.onnx.export(module, args + ((kwargs,) if kwargs else ()), buf, dynamo=False,
                          opset_version=opset, input_names=input_names,
                          output_names=output_names, do_constant_folding=True)
        return onnx.load_from_string(buf.getvalue())
