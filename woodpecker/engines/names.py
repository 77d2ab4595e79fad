"""The engines' names: the one place they are spelled (plans, the CLI's --engines and the code
above engines/ use these constants)."""

HALIDE = "halide"            # Woodpecker's generated, tuned kernels
ONNXRUNTIME = "onnxruntime"  # ONNX Runtime's CPU execution provider
OPENVINO = "openvino"        # OpenVINO's CPU plugin
TORCH = "torch"              # PyTorch (oneDNN / MKL)
NUMPY = "numpy"              # the numpy reference: every op, and data movement as views

ALL = (TORCH, ONNXRUNTIME, NUMPY, HALIDE, OPENVINO)

# the folders of a plan where engines keep their artifacts (each engine's save_artifacts)
KERNELS_DIR = "kernels"             # Halide: compiled kernels and the runtime
ORT_MODELS_DIR = ONNXRUNTIME        # ONNX Runtime: step models
OPENVINO_MODELS_DIR = OPENVINO      # OpenVINO: step models
ARTIFACT_DIRS = (KERNELS_DIR, ORT_MODELS_DIR, OPENVINO_MODELS_DIR)
