"""The core install's promise (`make core-install`, run by `make test`): in a fresh venv holding
only `pip install .` — no torch, no extras — Woodpecker compiles an ONNX model, tunes its
kernels for a few seconds, saves and loads the plan, and gives ONNX Runtime's outputs.

Not a pytest module (it must run in the venv of the core install, not the test venv).
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import woodpecker


def model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * .1, "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    graph = helper.make_graph(
        nodes, "core", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> int:
    for extra in ("torch", "scipy", "xgboost", "openvino", "matplotlib"):
        if importlib.util.find_spec(extra) is not None:
            print(f"core install check: {extra} is installed; this must be a core-only venv")
            return 1
    m = model()
    x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with tempfile.TemporaryDirectory() as tmp:
        # the generated kernels alone, so the Halide engine is exercised whatever wins
        compiled = woodpecker.compile(
            m, threads=1, engines="halide,numpy", tuning_log=Path(tmp) / "t.jsonl",
            tune=woodpecker.TuneOptions("15s", search="ga"))
        if "halide" not in compiled.plan.engines:
            print("core install check: no generated kernel in the plan")
            return 1
        compiled.save(Path(tmp) / "plan")
        loaded = woodpecker.load(Path(tmp) / "plan")
        got = loaded.run({"x": x})["y"]
        session = woodpecker.InferenceSession(m.SerializeToString(), cache=Path(tmp) / "s")
        via_session = session.run(None, {"x": x})[0]
    err = max(float(np.max(np.abs(got - ref))), float(np.max(np.abs(via_session - ref))))
    print(f"core install check: engines {sorted(set(loaded.plan.engines))}, "
          f"largest difference from ONNX Runtime {err:.2e}")
    if err > 1e-4:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
