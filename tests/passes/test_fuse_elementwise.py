"""Element-wise fusion: RandWire's weighted input sums (Mul by learned scalars, Add, ReLU)
become one FusedElementwise node that every engine computes like the original ops, and the
Halide kernel of such a group shares its task with every group of the same shape and ops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import woodpecker
from tests.helpers import make_model, ort_run, rand
from woodpecker.tasks import task_from_node


def _weighted_sum(scales=(0.7, 1.3, 0.4)) -> "onnx.ModelProto":  # noqa: F821
    """Three convs of x, weighted by scalars and summed, then ReLU, a Clip and a Div; the
    second conv's output is also a graph output, so its Mul must not absorb it."""
    c = 8
    inits = {f"w{i}": rand(c, c, 3, 3, seed=i + 1) for i in range(3)}
    inits.update({f"s{i}": np.array(s, np.float32) for i, s in enumerate(scales)})
    inits.update({"lo": np.array(0.1, np.float32), "hi": np.array(2.0, np.float32),
                  "d": np.array([1.5], np.float32), "w3": rand(c, c, 1, 1, seed=9)})
    nodes = [helper.make_node("Conv", ["x", f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1])
             for i in range(3)]
    nodes += [helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"m{i}"]) for i in range(3)]
    nodes += [helper.make_node("Add", ["m0", "m1"], ["a0"]),
              helper.make_node("Add", ["a0", "m2"], ["a1"]),
              helper.make_node("Relu", ["a1"], ["r"]),
              helper.make_node("Clip", ["r", "lo", "hi"], ["k"]),
              helper.make_node("Div", ["k", "d"], ["q"]),
              helper.make_node("Conv", ["q", "w3"], ["y"])]
    return make_model(nodes, [("x", [1, c, 10, 10])], [("y", [1, c, 10, 10]),
                                                      ("c1", [1, c, 10, 10])], inits)


def _pool_bn() -> "onnx.ModelProto":  # noqa: F821
    """DARTS' pooling branch: MaxPool, then a BatchNormalization no conv absorbs, then a
    per-channel scale and a ReLU."""
    c = 6
    rng = np.random.default_rng(3)
    inits = {"g": rand(c, seed=1), "b": rand(c, seed=2), "m": rand(c, seed=3),
             "v": (0.5 + rng.random(c)).astype(np.float32), "s": rand(1, c, 1, 1, seed=4)}
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["p", "g", "b", "m", "v"], ["n"],
                              epsilon=1e-3),
             helper.make_node("Mul", ["s", "n"], ["t"]),
             helper.make_node("Relu", ["t"], ["y"])]
    return make_model(nodes, [("x", [1, c, 10, 10])], [("y", [1, c, 10, 10])], inits)


def _groups(compiled):
    return [n for n in compiled.graph.nodes if n.op == "FusedElementwise"]


def test_weighted_sum_becomes_one_node():
    c = woodpecker.compile(_weighted_sum(), engines="numpy", threads=1)
    (group,) = _groups(c)
    assert [s["op"] for s in group.attrs["program"]] == \
        ["Mul", "Mul", "Mul", "Add", "Add", "Relu", "Clip", "Div"]
    assert [v.name for v in group.inputs[:3]] == ["c0", "c1", "c2"]
    assert group.inputs[3].data.tolist() == pytest.approx([0.7, 1.3, 0.4, 0.1, 2.0, 1.5])
    assert "c1" in [v.name for v in c.graph.outputs]


def test_batchnorm_joins_as_a_scale_and_shift_per_channel():
    c = woodpecker.compile(_pool_bn(), engines="numpy", threads=1)
    (group,) = _groups(c)
    assert [(s["op"], [a[0] for a in s["args"]]) for s in group.attrs["program"]] == \
        [("Mul", ["in", "channel"]), ("Add", ["step", "channel"]), ("Mul", ["channel", "step"]),
         ("Relu", ["step"])]
    assert group.inputs[1].data.size == 3 * 6


@pytest.mark.parametrize("engines", ["numpy", "torch", "onnxruntime"])
@pytest.mark.parametrize("make", [_weighted_sum, _pool_bn])
def test_every_engine_computes_the_group(engines, make):
    model = make()
    c = woodpecker.compile(model, engines=engines + ",numpy", threads=1)
    assert c.plan.engines[c.graph.nodes.index(_groups(c)[0])] == engines
    x = rand(*[d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim], seed=4)
    outs = c(x)
    for got, want in zip(outs if isinstance(outs, tuple) else (outs,), ort_run(model, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_groups_that_differ_in_constants_share_a_task():
    a = woodpecker.compile(_weighted_sum(), engines="numpy", threads=1)
    b = woodpecker.compile(_weighted_sum((2.0, -1.0, 0.5)), engines="numpy", threads=1)
    ta, tb = task_from_node(_groups(a)[0]), task_from_node(_groups(b)[0])
    assert ta is not None and ta.key == tb.key and ta.consts == 6 and ta.inputs == 3


def test_broadcasting_and_other_ranks_stay_unfused():
    """A run-time operand that broadcasts (the kernel reads every input at the same element),
    a constant that varies along a spatial axis, and a 2-d map (no channels-innermost layout
    to share with convs) stay as they are."""
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Relu", ["m"], ["y"]),
             helper.make_node("Relu", ["z"], ["t"]), helper.make_node("Add", ["x", "h"], ["u"])]
    model = make_model(nodes, [("x", [1, 4, 3, 3]), ("s", [1, 4, 1, 1]), ("z", [5, 6])],
                       [("y", [1, 4, 3, 3]), ("t", [5, 6]), ("u", [1, 4, 3, 3])],
                       {"h": rand(1, 1, 3, 1, seed=2)})
    c = woodpecker.compile(model, engines="numpy", threads=1)
    assert [n.op for n in c.graph.nodes] == ["Mul", "FusedElementwise", "Relu", "Add"]


def _relu_conv(reread: bool) -> "onnx.ModelProto":  # noqa: F821
    """DARTS' ReLU-Conv: a conv's output a is read by a ReLU → padded 3x3 conv and, unactivated,
    by an Add; `reread`: the ReLU's output is also a graph output (it must stay a node)."""
    c = 8
    inits = {"w0": rand(c, c, 1, 1, seed=1), "w1": rand(c, c, 3, 3, seed=2)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    outputs = [("y", [1, c, 6, 6])] + ([("r", [1, c, 6, 6])] if reread else [])
    return make_model(nodes, [("x", [1, c, 6, 6])], outputs, inits)


def test_an_activation_before_a_conv_becomes_its_prologue():
    c = woodpecker.compile(_relu_conv(False), engines="numpy", threads=1)
    assert [n.op for n in c.graph.nodes] == ["Conv", "FusedConv"]
    conv = c.graph.nodes[1]
    assert conv.inputs[0].name == "a" and \
        [s["op"] for s in conv.attrs["prologue"]] == ["Sigmoid"]
    kept = woodpecker.compile(_relu_conv(True), engines="numpy", threads=1)
    assert "FusedElementwise" in [n.op for n in kept.graph.nodes]


@pytest.mark.parametrize("engines", ["numpy", "torch", "onnxruntime"])
def test_every_engine_applies_the_prologue_before_padding(engines):
    """Sigmoid(0) is 0.5: the conv pads the activated input with zeros."""
    model = _relu_conv(False)
    c = woodpecker.compile(model, engines=engines + ",numpy", threads=1)
    assert c.plan.engines[1] == engines
    x = rand(1, 8, 6, 6, seed=7)
    np.testing.assert_allclose(c(x), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_numpy_writes_a_float32_group_into_its_output_like_the_reference():
    from woodpecker.engines.base import BuildContext
    from woodpecker.engines.registry import get_engine

    for make in (_weighted_sum, _pool_bn):
        c = woodpecker.compile(make(), engines="numpy", threads=1)
        node = next(n for n in c.graph.nodes if n.op == "FusedElementwise")
        kernel = get_engine("numpy").build(node, BuildContext(1, c.graph.opset))
        xs = [rand(*v.shape, seed=i) for i, v in enumerate(node.inputs) if v.data is None]
        out = np.empty(node.outputs[0].shape, np.float32)
        kernel.into([out], *xs)
        np.testing.assert_allclose(out, kernel(*xs)[0], rtol=1e-6, atol=1e-6)


def _squeeze_excite(reread: bool) -> "onnx.ModelProto":  # noqa: F821
    """EfficientNet's squeeze-and-excitation: a = conv(x); s = Sigmoid(conv(GAP(a))); the 1x1
    projection reads a * s. `reread`: a * s is also a graph output (the Mul must stay)."""
    c, k = 16, 8
    inits = {"w0": rand(c, c, 3, 3, seed=1), "w1": rand(8, c, 1, 1, seed=2),
             "w2": rand(c, 8, 1, 1, seed=3), "w3": rand(k, c, 1, 1, seed=4),
             "b3": rand(k, seed=5)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["a"], ["g"]),
             helper.make_node("Conv", ["g", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["t"]),
             helper.make_node("Sigmoid", ["t"], ["s"]),
             helper.make_node("Mul", ["s", "a"], ["m"]),
             helper.make_node("Conv", ["m", "w3", "b3"], ["y"])]
    outputs = [("y", [2, k, 6, 5])] + ([("m", [2, c, 6, 5])] if reread else [])
    return make_model(nodes, [("x", [2, c, 6, 5])], outputs, inits)


def test_a_channel_scale_before_a_conv_becomes_its_prologue():
    c = woodpecker.compile(_squeeze_excite(False), engines="numpy", threads=1)
    assert "Mul" not in [n.op for n in c.graph.nodes]
    proj = c.graph.nodes[-1]
    assert proj.op == "FusedConv" and proj.inputs[0].name == "a" and \
        proj.inputs[-1].shape == (2, 16, 1, 1) and \
        [s["op"] for s in proj.attrs["prologue"]] == ["Mul"]
    kept = woodpecker.compile(_squeeze_excite(True), engines="numpy", threads=1)
    assert "Mul" in [n.op for n in kept.graph.nodes]


@pytest.mark.parametrize("engines", ["numpy", "torch", "onnxruntime"])
def test_every_engine_scales_the_channels_inside_the_conv(engines):
    """(The generated kernels: tests/engines/test_halide_conv.py's SE_SCALE tasks, and
    EfficientNet and MobileNetV3 through them in tests/zoo.)"""
    model = _squeeze_excite(False)
    c = woodpecker.compile(model, engines=engines + ",numpy", threads=1)
    assert c.plan.engines[-1] == engines
    x = rand(2, 16, 6, 5, seed=7)
    got, want = c(x), ort_run(model, {"x": x})[0]
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))


def _mlp_gelu(form: str) -> "onnx.ModelProto":  # noqa: F821
    """ConvNeXt's MLP as PyTorch exports it below opset 20: MatMul → GELU in its erf form
    (`form` A: (x · s) · 0.5, B: (0.5 · x) · s, C: the scale by 1/√2 as a Mul) → MatMul."""
    inits = {"w1": rand(16, 32, seed=1) * 0.3, "w2": rand(32, 8, seed=2),
             "r2": np.array(np.sqrt(2), np.float32), "h": np.array(0.5, np.float32),
             "one": np.array(1.0, np.float32),
             "inv": np.array(1 / np.sqrt(2), np.float32)}
    scale = helper.make_node("Mul", ["a", "inv"], ["d"]) if form == "C" else \
        helper.make_node("Div", ["a", "r2"], ["d"])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), scale,
             helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["s"])]
    if form == "B":
        nodes += [helper.make_node("Mul", ["h", "a"], ["p"]),
                  helper.make_node("Mul", ["p", "s"], ["g"])]
    else:
        nodes += [helper.make_node("Mul", ["a", "s"], ["p"]),
                  helper.make_node("Mul", ["p", "h"], ["g"])]
    nodes.append(helper.make_node("MatMul", ["g", "w2"], ["y"]))
    return make_model(nodes, [("x", [1, 7, 7, 16])], [("y", [1, 7, 7, 8])], inits)


@pytest.mark.parametrize("form", ["A", "B", "C"])
@pytest.mark.parametrize("engines", ["numpy", "torch", "onnxruntime"])
def test_the_erf_form_of_gelu_becomes_the_products_epilogue(form, engines):
    model = _mlp_gelu(form)
    c = woodpecker.compile(model, engines=engines + ",numpy", threads=1)
    assert [n.op for n in c.graph.nodes] == ["FusedMatMul", "MatMul"]
    assert [s["op"] for s in c.graph.nodes[0].attrs["epilogue"]] == ["Gelu"]
    assert c.plan.engines[0] == engines
    x = rand(1, 7, 7, 16, seed=4)
    got, want = c(x), ort_run(model, {"x": x})[0]
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))


def test_a_gelu_like_pattern_read_elsewhere_stays():
    """The Erf's sum is also a graph output: nothing is rewritten."""
    model = _mlp_gelu("A")
    model.graph.output.append(helper.make_tensor_value_info("s", 1, [1, 7, 7, 32]))
    c = woodpecker.compile(model, engines="numpy", threads=1)
    assert "Erf" in [n.op for n in c.graph.nodes] and "Gelu" not in [n.op for n in c.graph.nodes]


def test_a_scale_and_shift_goes_to_onnx_runtime_as_one_batchnorm():
    """A BatchNormalization that folded into no conv is a Mul and an Add in the group; ONNX
    Runtime gets it back as one BatchNormalization (one pass over the activation)."""
    from woodpecker.frontend.onnx_export import node_protos

    c = woodpecker.compile(_pool_bn(), engines="onnxruntime,numpy", threads=1)
    (group,) = _groups(c)
    counter = iter(range(100))
    protos, _ = node_protos(group, lambda hint: f"{hint}__{next(counter)}", 17)
    assert [p.op_type for p in protos] == ["BatchNormalization", "Mul", "Relu"]


_C = 3
_const_kind = st.sampled_from(["const", "channel"])


@st.composite
def _programs(draw):
    """Chains of Mul/Add by constants (either operand order), Relu and Adds of the run-time
    input, where a step may also be read again later (then it is no lone scale-and-shift)."""
    program, consts = [], []

    def constant(kind):
        n = 1 if kind == "const" else _C
        consts.extend(draw(st.lists(st.floats(-2, 2, width=32), min_size=n, max_size=n)))
        return [kind, len(consts) - n]

    prev = ["in", 0]
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["Mul", "Add", "Relu", "AddInput", "AddEarlier",
                                   "Affine"]))
        if op == "Affine":      # a Mul by a constant, then an Add of one, operands any order
            for step_op in ("Mul", "Add"):
                args = [prev, constant(draw(_const_kind))]
                program.append({"op": step_op, "args": args[::-1] if draw(st.booleans())
                                else args, "attrs": {}})
                prev = ["step", len(program) - 1]
            continue
        if op == "Relu":
            program.append({"op": "Relu", "args": [prev], "attrs": {}})
        elif op == "AddInput":
            program.append({"op": "Add", "args": [prev, ["in", 0]], "attrs": {}})
        elif op == "AddEarlier" and len(program) >= 2:
            program.append({"op": "Add", "args": [prev, ["step", len(program) - 2]],
                            "attrs": {}})
        else:
            op = "Mul" if op == "AddEarlier" else op
            args = [prev, constant(draw(_const_kind))]
            program.append({"op": op, "args": args[::-1] if draw(st.booleans()) else args,
                            "attrs": {}})
        prev = ["step", len(program) - 1]
    return program, np.array(consts, np.float32)


@settings(deadline=None, max_examples=40)
@given(_programs())
def test_any_program_exported_to_onnx_computes_like_the_reference(case):
    """Whatever the export merges into BatchNormalizations, ONNX Runtime's result equals the
    numpy reference of the program."""
    from woodpecker.frontend.onnx_export import nodes_model
    from woodpecker.ir.graph import Graph
    from woodpecker.ops.fused import run_program

    program, consts = case
    g = Graph("p")
    x, y = (g.value(n, (1, _C, 4, 5), np.float32) for n in "xy")
    ins = [x] + ([g.const(consts, "k")] if consts.size else [])
    node = g.add_node("FusedElementwise", ins, [y], {"program": program})
    model = nodes_model([node], [x], [y], 17)
    xv = rand(1, _C, 4, 5, seed=2)
    (got,) = ort_run(model, {"x": xv})
    want = run_program(program, [xv], consts, (1, _C, 1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _fixpoint_group(graph, root, taken, rule):
    """The group as its definition says (the loop the pass used before issue 76): grow until
    no producer can join, rescanning every member each round."""
    from woodpecker.passes.fuse_elementwise import _eligible

    group, grown = [root], True
    while grown:
        grown = False
        for node in list(group):
            for v in node.inputs:
                p = None if v is None or v.is_const else v.producer
                if p is None or id(p) in taken or p in group or not _eligible(p, rule) or \
                        graph.is_output(v) or any(r not in group for r in v.consumers):
                    continue
                group.append(p)
                grown = True
    return group


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Relu", "Add", "Mul", "Sigmoid"]),
                          st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=25),
       st.integers(0, 1000))
def test_worklist_group_is_the_fixpoint(steps, extra_output):
    """Random element-wise DAGs (values read once or several times, some also graph outputs):
    every root's group from the worklist is the same set as the definition's."""
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes.fuse_elementwise import FOUR_D, _eligible, _group

    nodes, names = [], ["x"]
    for k, (op, a, b) in enumerate(steps):
        ins = [names[a % len(names)]] + ([names[b % len(names)]] if op in ("Add", "Mul") else [])
        nodes.append(helper.make_node(op, ins, [f"v{k}"]))
        names.append(f"v{k}")
    outs = sorted({names[-1], names[1 + extra_output % (len(names) - 1)]})
    model = make_model(nodes, [("x", [1, 2, 3, 3])], [(o, [1, 2, 3, 3]) for o in outs])
    graph = import_onnx(model)
    for root in graph.nodes:
        if _eligible(root, FOUR_D):
            got = _group(graph, root, set(), FOUR_D)
            want = _fixpoint_group(graph, root, set(), FOUR_D)
            assert {id(n) for n in got} == {id(n) for n in want}
            assert len(got) == len(want)


def test_a_long_chain_groups_in_linear_work(monkeypatch):
    """A chain of 3,000 Relus (61 s in this pass before: each round rescanned the whole group
    and searched it as a list) is one group, each producer looked at a bounded number of times
    (counted, not timed)."""
    import importlib

    from woodpecker.frontend.onnx_import import import_onnx

    fe = importlib.import_module("woodpecker.passes.fuse_elementwise")   # not the function

    n = 3000
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(n)]
    graph = import_onnx(make_model(nodes, [("v0", [1, 2, 3, 3])], [(f"v{n}", [1, 2, 3, 3])]))
    looks = [0]
    eligible = fe._eligible

    def counted(node, rule):
        looks[0] += 1
        return eligible(node, rule)

    monkeypatch.setattr(fe, "_eligible", counted)
    assert fe.fuse_elementwise(graph) == 1
    assert len(graph.nodes) == 1 and graph.nodes[0].op == "FusedElementwise"
    assert looks[0] <= 3 * n
