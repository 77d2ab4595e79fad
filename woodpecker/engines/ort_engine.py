"""The onnxruntime engine: a node (fused nodes expanded) as a small ONNX model in its own
session, pinned to the thread count given. ORT fuses the expanded epilogue itself."""

from __future__ import annotations

from woodpecker.engines.base import NUMERIC, BuildContext, Engine, Kernel, runtime_positions
from woodpecker.ir.graph import Node
from woodpecker.ir.to_onnx import nodes_model
from woodpecker.ops import OPS


def session_options(threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return so


class OrtEngine(Engine):
    name = "onnxruntime"
    ops = frozenset(OPS)
    dtypes = NUMERIC

    def available(self) -> bool:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return False
        return True

    def build(self, node: Node, ctx: BuildContext) -> Kernel:
        import onnxruntime as ort

        inputs = [node.inputs[i] for i in runtime_positions(node)]
        model = nodes_model([node], inputs, node.outputs, ctx.opset)
        sess = ort.InferenceSession(model.SerializeToString(), session_options(ctx.threads),
                                    providers=["CPUExecutionProvider"])
        names = [v.name for v in inputs]
        run = sess.run

        def kernel(*args):
            return run(None, dict(zip(names, args)))

        return kernel
