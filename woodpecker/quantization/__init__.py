"""Quantization (issue 53): `woodpecker.quantization(model, output, calibrate=...)` writes a
standard QDQ (static) or dynamically quantized ONNX model and reports its accuracy against the
float model (`ptq.py`); calibration data from files or Python (`data.py`); each layer's own
quantization noise, which decides the layers kept in fp32 (`layers.py`)."""

from woodpecker.options import Calibration, QuantizeOptions
from woodpecker.quantization.ptq import QuantizeReport, quantize

__all__ = ["Calibration", "QuantizeOptions", "QuantizeReport", "quantize"]
