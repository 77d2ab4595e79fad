"""Small ONNX models built by hand for tests, and a reference run through onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from woodpecker.runtime.plan_schedule import PlanSchedule

F32 = TensorProto.FLOAT
# a plan schedule whose consecutive library nodes run as one region (as compiles do)
REGIONS = PlanSchedule(library_regions=True)


def custom_op_model(shape=(2, 3)) -> onnx.ModelProto:
    """One node of an op no library knows (domain example.custom): no engine runs it."""
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="example.custom", name="f1")
    graph = helper.make_graph([node], "test", [helper.make_tensor_value_info("x", F32, shape)],
                              [helper.make_tensor_value_info("y", F32, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("example.custom", 1)])
    model.ir_version = 9
    return model


def make_model(nodes, inputs, outputs, initializers=None, opset=17) -> onnx.ModelProto:
    """`inputs`/`outputs`: (name, shape) pairs or ValueInfoProtos; float32 unless given."""
    def vi(x):
        if isinstance(x, onnx.ValueInfoProto):
            return x
        name, shape = x[:2]
        elem = x[2] if len(x) > 2 else F32
        return helper.make_tensor_value_info(name, elem, shape)
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "test", [vi(i) for i in inputs], [vi(o) for o in outputs],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def rand(*shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def conv_bn_relu_residual() -> onnx.ModelProto:
    """x → Conv → BN → (+ x) → Relu → Conv(no bias) → Add(bias) → Clip; exercises every pass."""
    c = 8
    w1, w2 = rand(c, c, 3, 3, seed=1) * 0.2, rand(c, c, 1, 1, seed=2) * 0.3
    rng = np.random.default_rng(3)
    inits = {
        "w1": w1, "b1": rand(c, seed=4), "w2": w2,
        "gamma": (1 + 0.1 * rng.standard_normal(c)).astype(np.float32),
        "beta": rand(c, seed=5), "mean": rand(c, seed=6) * 0.1,
        "var": (0.5 + rng.random(c)).astype(np.float32),
        "bias2": rand(1, c, 1, 1, seed=7), "lo": np.array(0.0, np.float32),
        "hi": np.array(6.0, np.float32), "shape": np.array([1, -1], np.int64),
    }
    nodes = [
        helper.make_node("Identity", ["x"], ["xi"]),
        helper.make_node("Sigmoid", ["x"], ["dead"]),
        helper.make_node("Conv", ["xi", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn"]),
        helper.make_node("Add", ["bn", "xi"], ["res"]),
        helper.make_node("Relu", ["res"], ["r"]),
        helper.make_node("Dropout", ["r"], ["d"]),
        helper.make_node("Conv", ["d", "w2"], ["c2"]),
        helper.make_node("Add", ["c2", "bias2"], ["c2b"]),
        helper.make_node("Clip", ["c2b", "lo", "hi"], ["clip"]),
        helper.make_node("Shape", ["clip"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["clip", "target"], ["y"]),
    ]
    inits.update({"zero": np.array(0, np.int64), "axes0": np.array([0], np.int64),
                  "minus1": np.array([-1], np.int64)})
    del inits["shape"]
    return make_model(nodes, [("x", [1, c, 6, 6])], [("y", [1, c * 36])], inits)


def _graph(graph_or_model):
    """An optimised graph: the one given, or an ONNX model imported and optimised."""
    if isinstance(graph_or_model, onnx.ModelProto):
        from woodpecker.frontend.onnx_import import import_onnx
        from woodpecker.passes import optimize

        graph = import_onnx(graph_or_model)
        optimize(graph)
        return graph
    return graph_or_model


def _log_of(graph_or_model, path, pick, parts: bool = False):
    """A tuning log holding, for every task of the graph (optimised from a model when given
    one), the config `pick(space, i)` of its first template (cost 0.1 ms)."""
    from woodpecker.engines.halide.templates import template_module
    from woodpecker.tune.extract import extract_tasks
    from woodpecker.tune.records import TuningLog, TuningRecord

    log = TuningLog(path)
    for i, g in enumerate(extract_tasks(_graph(graph_or_model), parts)):
        config = pick(template_module(g.templates[0]).space(g.task), i)
        log.append(TuningRecord(g.task.key, g.templates[0], config, 1e-4))
    return log


def sampled_log(graph, path):
    """A tuning log holding, for each task of `graph` (an optimised graph or an ONNX model),
    one random valid configuration of its first template (cost 0.1 ms): generated kernels for
    every task, no tuning."""
    import random

    return _log_of(graph, path, lambda space, i: space.sample(random.Random(i)))


def seed_tuning_log(graph, path, parts: bool = False):
    """A tuning log holding, for every task of `graph` (an optimised graph or an ONNX model;
    with `parts`, also of each intensive fusion's parts), its first template's hand-picked
    seed schedule (a random valid config where it has none): a plan's generated kernels
    without any tuning."""
    import random

    return _log_of(graph, path, lambda space, i: space.seeds[0] if space.seeds
                   else space.sample(random.Random(0)), parts)


def conv_dag_model(steps: list[tuple[str, int, int]], c: int, hw: int) -> onnx.ModelProto:
    """A random DAG of convs on (1, c, hw, hw): each step (op, a, b) reads value a (and b for
    an Add) among x and the earlier steps' results — op "dw" (3x3 depthwise), "pw" (1x1),
    "conv" (3x3), "relu" or "add"; every result no step reads is a graph output."""
    shape = [1, c, hw, hw]
    values, nodes, inits, read = ["x"], [], {}, set()
    for i, (kind, a, b) in enumerate(steps):
        x, y = values[a % len(values)], f"v{i}"
        read.add(x)
        if kind == "dw":
            inits[f"w{i}"] = rand(c, 1, 3, 3, seed=i)
            nodes.append(helper.make_node("Conv", [x, f"w{i}"], [y], pads=[1, 1, 1, 1],
                                          group=c))
        elif kind in ("pw", "conv"):
            k = 1 if kind == "pw" else 3
            inits[f"w{i}"] = rand(c, c, k, k, seed=i) * (0.4 if k == 1 else 0.15)
            inits[f"b{i}"] = rand(c, seed=i)
            nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y],
                                          pads=[k // 2] * 4))
        elif kind == "relu":
            nodes.append(helper.make_node("Relu", [x], [y]))
        else:
            other = values[b % len(values)]
            read.add(other)
            nodes.append(helper.make_node("Add", [x, other], [y]))
        values.append(y)
    outputs = [(v, shape) for v in values[1:] if v not in read]
    return make_model(nodes, [("x", shape)], outputs, inits)
