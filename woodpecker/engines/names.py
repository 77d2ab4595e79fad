"""The engines' names: the one place they are spelled (plans, the CLI's --engines and the code
above engines/ use these constants)."""

HALIDE = "halide"            # Woodpecker's generated, tuned kernels
ONNXRUNTIME = "onnxruntime"  # ONNX Runtime's CPU execution provider
OPENVINO = "openvino"        # OpenVINO's CPU plugin
TORCH = "torch"              # PyTorch (oneDNN / MKL)
NUMPY = "numpy"              # the numpy reference: every op, and data movement as views

ALL = (TORCH, ONNXRUNTIME, NUMPY, HALIDE, OPENVINO)
