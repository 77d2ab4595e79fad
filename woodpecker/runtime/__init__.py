"""The runtime: a saved or freshly assembled plan, its kernels built, run step by step.

Loading and running a plan (`runtime.compiled.load`) imports nothing of the compiler, the
tuner or selection, nor any engine the plan does not use (see ARCHITECTURE.md).
"""
