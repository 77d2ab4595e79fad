"""GPU facts below the compiler: the CUDA devices a plan can be built for (`devices`) and the
CUDA driver, read through ctypes (`driver`) — numpy and the standard library only, so a saved
GPU plan checks its device without Halide, onnx or the compiler (issue 54's build-here,
run-there split)."""
