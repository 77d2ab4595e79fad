"""DOS stages of a GPU plan on streams (runtime/gpu_stages.py), without a GPU: the step graph
and byte spans read from a plan, a DOS schedule over costs that favour concurrency wherever the
arena allows it, and the staged walk (streams and events are no-ops on the host memory) still
equal to ONNX Runtime; the session's own measured scheduling ends valid."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from woodpecker.assembly.gpu_host import HostMemory
from woodpecker.compiler_gpu import compile_gpu
from woodpecker.runtime.gpu_plan import GpuPlan
from woodpecker.runtime.gpu_stages import may_share, staged_walk, step_edges, step_spans
from woodpecker.schedule.dos_steps import INF, contiguous_schedule, stage_cost


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from woodpecker.zoo import export

    path = str(export("transformer_encoder"))
    folder = compile_gpu(path, tmp_path_factory.mktemp("enc") / "plan", "cuda:h100")
    x = np.random.default_rng(0).standard_normal((1, 128, 128)).astype(np.float32)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    return GpuPlan.open(folder), x, ref


class Eager:
    """Costs under which every stage the arena allows runs at half its time in turn."""

    threads = 4

    def __init__(self, spans, n):
        self.spans, self.alone = spans, [1.0] * n

    def candidate(self, s):
        return True

    def ratio(self, stage):
        return 0.5 if may_share(self.spans, stage) else INF

    def __call__(self, stage):
        return stage_cost(self, stage, 0.03)


def test_edges_follow_the_values_and_spans_the_arena(encoder):
    plan, _, _ = encoder
    doc = plan.doc
    edges = step_edges(doc)
    assert all(u < v for u, v in edges) and len(edges) >= len(doc["steps"]) - 1
    spans = step_spans(doc)
    for reads, write in spans:
        assert write is not None and 0 <= write[0] < write[1] <= doc["arena_bytes"]
        assert all(0 <= lo < hi <= doc["arena_bytes"] for lo, hi in reads)
    # a step never shares a stage with one whose output bytes it reads
    for u, v in edges:
        assert not may_share(spans, frozenset({u, v})) or not any(
            lo < spans[u][1][1] and spans[u][1][0] < hi for lo, hi in spans[v][0])


def test_a_staged_walk_equals_the_walk_in_turn(encoder):
    plan, x, ref = encoder
    session = plan.session(HostMemory())
    n = len(plan.doc["steps"])
    edges = step_edges(plan.doc)
    found = contiguous_schedule(n, edges, Eager(step_spans(plan.doc), n))
    assert found.is_valid(range(n), edges)
    together = [s for s in found.stages if len(s.nodes) > 1]
    assert together, "attention's Q, K and V products are independent"
    assert all(may_share(step_spans(plan.doc), s.nodes) for s in together)
    session.walk = staged_walk(session, found, [0] * 4)
    np.testing.assert_allclose(session.run({"input": x})["output"], ref, rtol=1e-4, atol=1e-4)


def test_the_session_schedules_itself_on_measured_costs(encoder):
    plan, x, ref = encoder
    session = plan.session(HostMemory())
    found = session.schedule({"input": x}, streams=2, runs=1)
    n = len(plan.doc["steps"])
    assert found.is_valid(range(n), step_edges(plan.doc))
    np.testing.assert_allclose(session.run({"input": x})["output"], ref, rtol=1e-4, atol=1e-4)
