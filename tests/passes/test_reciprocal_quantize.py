"""A fused program's QuantizeLinear computes x · float32(1 / scale) instead of x / scale only
where that is exact over every value of its 8-bit inputs (ops/fused.with_reciprocals), and the
grouping pass marks it so: the marked program equals the division at every point of the domain
(hypothesis over scales and zero points), a near tie keeps the division, and a quantized
residual block marked so runs equal to ONNX Runtime."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from woodpecker.ops.fused import run_program, with_reciprocals


def _dq_q(a: str, out: str) -> list[dict]:
    return [{"op": "DequantizeLinear", "args": [["in", 0], ["const", 0], ["const", 1]],
             "attrs": {"dtype": a}},
            {"op": "QuantizeLinear", "args": [["step", 0], ["const", 2], ["const", 3]],
             "attrs": {"dtype": out}}]


def _residual(a: str, b: str, out: str) -> list[dict]:
    return [{"op": "DequantizeLinear", "args": [["in", 0], ["const", 0], ["const", 1]],
             "attrs": {"dtype": a}},
            {"op": "DequantizeLinear", "args": [["in", 1], ["const", 2], ["const", 3]],
             "attrs": {"dtype": b}},
            {"op": "Add", "args": [["step", 1], ["step", 0]], "attrs": {}},
            {"op": "QuantizeLinear", "args": [["step", 2], ["const", 4], ["const", 5]],
             "attrs": {"dtype": out}}]


def _grid(*dtypes: str) -> list[np.ndarray]:
    axes = [np.arange(np.iinfo(d).min, np.iinfo(d).max + 1).astype(d) for d in dtypes]
    return [a.reshape(-1) for a in np.meshgrid(*axes, indexing="ij")]


def _marked(program: list[dict]) -> bool:
    return bool(program[-1]["attrs"].get("reciprocal"))


scales = st.floats(2.0 ** -10, 0.5, width=32)
types = st.sampled_from(["uint8", "int8"])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(types, types, types, scales, scales, scales, st.integers(-128, 127),
       st.integers(-128, 127), st.integers(0, 255))
def test_a_marked_program_equals_the_division_everywhere(a, b, out, s0, s1, s2, z0, z1, z2):
    zp = lambda z, d: int(np.clip(z, np.iinfo(d).min, np.iinfo(d).max))  # noqa: E731
    consts = np.array([s0, zp(z0, a), s1, zp(z1, b), s2, zp(z2, out)], np.float32)
    program = _residual(a, b, out)
    marked = with_reciprocals(program, [np.dtype(a), np.dtype(b)], consts)
    grid = _grid(a, b)
    np.testing.assert_array_equal(run_program(marked, grid, consts, (1,)),
                                  run_program(program, grid, consts, (1,)))


def test_a_near_tie_keeps_the_division():
    """247 · 0.06967564 / 0.19895817 is 86.5 in float32 (half to even: 86); times the
    reciprocal it is 86.50001 (87): the step stays a division. A power-of-two scale, whose
    reciprocal is exact, is marked."""
    tie = np.array([0.06967564, 0, 0.19895817, 0], np.float32)
    assert not _marked(with_reciprocals(_dq_q("uint8", "uint8"), [np.dtype("uint8")], tie))
    exact = np.array([0.06967564, 0, 0.25, 0], np.float32)
    assert _marked(with_reciprocals(_dq_q("uint8", "uint8"), [np.dtype("uint8")], exact))


def test_what_the_check_cannot_cover_is_left_alone():
    """A float input (an unbounded domain), three inputs, per-channel constants: unmarked."""
    consts = np.array([0.1, 0, 0.25, 0], np.float32)
    assert with_reciprocals(_dq_q("uint8", "uint8"), [np.dtype("float32")], consts) == \
        _dq_q("uint8", "uint8")
    per_channel = _dq_q("uint8", "uint8")
    per_channel[0]["args"][1] = ["channel", 0]
    assert not _marked(with_reciprocals(per_channel, [np.dtype("uint8")], consts))


def test_a_quantized_residual_block_is_marked_and_runs_as_onnx_runtime_does():
    """A residual block whose residual arrives 8-bit: the add's group, fused into the conv's
    epilogue, reads two 8-bit tensors; its QuantizeLinear is marked (an output scale of
    1/8, whose reciprocal is exact) and the graph equals ONNX Runtime on the file bit for
    bit."""
    import onnxruntime as ort

    from tests.passes.test_fold_qdq import run_graph
    from tests.passes.test_fuse_qconv_program import HW, C, _block
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import optimize

    model = _block(5, np.uint8, quantized_r=True, out_scale=0.125)
    graph = import_onnx(model)
    optimize(graph)
    fused = next(n for n in graph.nodes if n.op == "FusedQLinearConv")
    assert [s["attrs"].get("reciprocal") for s in fused.attrs["program"]
            if s["op"] == "QuantizeLinear"] == [True]
    rng = np.random.default_rng(6)
    feeds = {"x": (rng.standard_normal((1, C, HW, HW)) * 2).astype(np.float32),
             "rq": rng.integers(0, 256, (1, C, HW, HW)).astype(np.uint8)}
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(run_graph(graph, feeds)["out"], want[0])
