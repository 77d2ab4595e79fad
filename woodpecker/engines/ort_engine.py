"""The onnxruntime engine: a node (fused nodes expanded) as a small ONNX model in its own
session, pinned to the thread count given. ORT fuses the expanded epilogue itself.

Capability is asked of ORT itself: ORT lacks kernels for some op/type pairs (Pow with an
unsigned exponent, say), so `accepts` builds the session and the engine declines the node when
ORT cannot; the session is kept for `build`, the answer for identical nodes
(engines/node_builds.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import weakref
from pathlib import Path

import numpy as np

from woodpecker.engines import names
from woodpecker.engines.base import NUMERIC, BuildContext, Capabilities, Engine, Kernel
from woodpecker.engines.choice import Choices, KernelSpec
from woodpecker.engines.node_builds import NodeBuilds
from woodpecker.engines.onnx_step import StepModels, node_io
from woodpecker.errors import first_line
from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.steps import StepIO
from woodpecker.ops import OPS
from woodpecker.ops.opaque import OP as OPAQUE
from woodpecker.ops.opaque import WHOLE_MODEL

ARTIFACTS_DIR = names.ORT_MODELS_DIR   # a saved plan's step models
# the element types of a whole-model session: numeric, strings (dtype object), and the
# types numpy holds through ml_dtypes, which only its initializers have (frontend/onnx_types
# ML_DTYPES: their bytes go into the step model unchanged)
STRINGS = NUMERIC | {"object", "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                     "float8_e5m2fnuz", "int4", "uint4", "float4_e2m1fn", "float8_e8m0fnu"}


def session_options(threads: int, layout: bool = True, optimize: bool = True):
    """Woodpecker's session options; `layout` False: every graph optimisation but the layout
    passes (ORT_ENABLE_EXTENDED); `optimize` False: none (the graph as written)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    elif not layout:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # fatal only: a session ONNX Runtime cannot make reaches us as an exception, which the
    # caller reports (or falls back from) in one line; its own red log lines on stderr
    # during a compile that succeeds only mislead
    so.log_severity_level = 4
    # ORT's workers spin while a run lasts (its default: they wait microseconds for the next
    # parallel section) but stop when it returns. By default they spin on for ~50 ms (measured:
    # a whole core's CPU time in the 50 ms after a run) and steal a core from whatever runs
    # next in this process: a Halide kernel of the same plan, or another benchmarked runtime.
    # Switching spinning off altogether (allow_spinning 0) cost ORT 33 % on mobilenet_v2
    # (8.78 vs 6.59 ms) and 4 % on resnet18; stopping it at the end of each run costs
    # nothing measurable (6.68 and 24.26 vs 24.16 ms, quiet gaps between runtimes).
    so.add_session_config_entry("session.force_spinning_stop", "1")
    return so


def new_session(model: "bytes | Path", threads: int, layout: bool = True,
                optimize: bool = True):
    """A CPU session of a serialized model (or a model file: ONNX Runtime then reads it itself,
    with no copy of its weights in this process's bytes — resnet18's session peaked 45 MiB
    lower) with Woodpecker's options (`session_options`)."""
    import onnxruntime as ort

    source = str(model) if isinstance(model, Path) else model
    return ort.InferenceSession(source, session_options(threads, layout, optimize),
                                providers=["CPUExecutionProvider"])


class OrtEngine(Engine):
    """Sessions are built from the node (or a step's nodes) as an ONNX model while compiling;
    a saved plan keeps each step's serialized model (its artifacts), so loading builds the
    sessions from those bytes, without the onnx package."""

    name = names.ONNXRUNTIME
    # I/O binding takes a pointer and a shape; a step may be a region of consecutive nodes
    caps = Capabilities(writes_strided=False, own_threads=True, multi_node=True,
                        holds_constants=True)
    rank = (2, 0)   # compute first (registry.preference says why)
    ops = frozenset(OPS)
    dtypes = NUMERIC

    def __init__(self) -> None:
        self._nodes = NodeBuilds(lambda model, ctx: new_session(model, ctx.threads), first_line)
        # (`accepts`' one-node sessions: ONNX Runtime's CPU provider computes float32 always)
        self._saved = StepModels(ARTIFACTS_DIR, "ONNX Runtime model")   # the steps' models

    def available(self) -> bool:
        return importlib.util.find_spec("onnxruntime") is not None

    def dtypes_for(self, node: Node) -> frozenset[str]:
        """Also strings (numpy's object arrays) where the node is the user's whole graph
        (frontend/whole.py): that plan has no arena, its session takes and returns object
        arrays itself. A node of a plan with an arena runs numeric types only."""
        if node.op == OPAQUE and node.attrs.get("op_type") == WHOLE_MODEL:
            return STRINGS
        return self.dtypes

    def accepts(self, node: Node, ctx: BuildContext) -> bool:
        return self._nodes.why_not(node, ctx) is None

    def why_not(self, node: Node, ctx: BuildContext) -> str:
        return self._nodes.why_not(node, ctx) or "refused the node"

    def build(self, node: Node, ctx: BuildContext, kernel: KernelSpec | None = None) -> Kernel:
        return self.build_step([node], *node_io(node), ctx, {})

    def build_step(self, nodes: list[Node], inputs: list[Value], outputs: list[Value],
                   ctx: BuildContext, choices: Choices) -> Kernel:
        """One session computing `outputs` from `inputs` over consecutive `nodes` (a library
        region, runtime/steps.py): the plan's saved model where there is one; for a single
        node while compiling, the session `accepts` built."""
        if len(nodes) == 1 and ctx.artifacts is None:
            sess = self._nodes.built(nodes[0], ctx)
            if sess is None:
                raise RuntimeError(f"onnxruntime cannot run {nodes[0].op} node "
                                   f"{nodes[0].name!r}")
        else:
            with self._saved.model(nodes, inputs, outputs, ctx) as model:
                try:
                    # ORT's Python wrapper prints its failed attempts ("EP Error …") to stdout
                    with contextlib.redirect_stdout(io.StringIO()):
                        sess = new_session(model, ctx.threads)
                except Exception:  # noqa: BLE001 - ORT raises its own types
                    # ORT 1.32's NCHWc layout pass can lose a graph output that another node
                    # of the region reads (a memory plan's region, which outputs every value:
                    # randwire_cifar's, regions of 2x its peak); without layout passes it
                    # builds
                    sess = new_session(model, ctx.threads, layout=False)
        return _kernel(sess, [v.name for v in inputs], [v.name for v in outputs])

    def save_artifacts(self, directory: Path, graph: Graph, choices: Choices,
                       steps: list[StepIO], source: Path | None = None) -> dict:
        """Each step's serialized model: made from its nodes, or for a loaded plan the model
        it was loaded with (no onnx package needed)."""
        models = self._saved.save(directory, graph, steps, source)
        return {**self.artifact_meta(), "models": models}

    def load_artifacts(self, directory: Path, section: dict, choices: Choices) -> None:
        self._saved.load(directory, section["models"])

    def artifact_files(self, section: dict) -> list[str]:
        return [m["file"] for m in section.get("models", {}).values()]


def _kernel(sess, in_names: list[str], out_names: list[str]) -> Kernel:
    """`kernel(*arrays)` → outputs in `out_names` order; `kernel.into(outs, *arrays)` writes
    into the given arrays (the executor's arena) through I/O binding. The binding stays as it
    is while the very arrays of the last call come again (the arena's views, every run), as
    Halide's kernels keep their buffers (engines/halide/aot.py)."""
    run = sess.run
    binding = sess.io_binding()
    bound: list = []    # weak references to the arrays bound last, inputs then outputs

    def kernel(*args):
        return run(out_names, dict(zip(in_names, args)))

    def into(outs, *args):
        arrays = (*args, *outs)
        if len(bound) != len(arrays) or any(r() is not a for r, a in zip(bound, arrays)):
            given = [np.ascontiguousarray(a) for a in args]   # alive until the run ends
            for name, a in zip(in_names, given):
                binding.bind_input(name, "cpu", 0, a.dtype, a.shape, a.ctypes.data)
            for name, o in zip(out_names, outs):
                binding.bind_output(name, "cpu", 0, o.dtype, o.shape, o.ctypes.data)
            copied = any(g is not a for g, a in zip(given, args))
            bound[:] = [] if copied else [weakref.ref(a) for a in arrays]
        sess.run_with_iobinding(binding)

    return Kernel(kernel, into, by_name=lambda feeds: run(out_names, feeds))


def call_overhead_ms(threads: int, runs: int = 50) -> float:
    """Median milliseconds of one call into a session that does (almost) nothing — an Identity
    of one float written into a bound output, as the executor calls a region. What splitting
    a library region into two sessions costs beyond the work itself (selection/per_node.py)."""
    import statistics
    import time

    from onnx import TensorProto, helper

    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1])  # noqa: E731
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])],
                                                "overhead", [vi("x")], [vi("y")]),
                              opset_imports=[helper.make_opsetid("", 17)])
    kernel = _kernel(new_session(model.SerializeToString(), threads), ["x"], ["y"])
    x, y = np.ones(1, np.float32), np.empty(1, np.float32)
    times = []
    for i in range(runs + 2):   # two warm-up calls
        t0 = time.perf_counter()
        kernel.into([y], x)
        if i >= 2:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)
