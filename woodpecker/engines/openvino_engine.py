"""The OpenVINO engine: a node (fused nodes expanded), or a step of consecutive nodes, as a
small ONNX model (engines/onnx_step.py, the models ONNX Runtime's engine builds) compiled by
OpenVINO's CPU plugin, on the thread count given, computing float32 in float32.

Contract: `rank` is (None, None): the default preference never puts a node on OpenVINO; only
measured selection (a node or a library region timed faster here, or a library-first plan of
the whole model) chooses it. Capability is asked of OpenVINO itself: `accepts` compiles the
one-node model and declines the node when OpenVINO cannot read or compile it (`why_not` keeps
OpenVINO's reason); the compiled model is kept, while the node lives, for `build`, the answer
for identical nodes (engines/node_builds.py). It also
declines nodes whose run-time values OpenVINO's CPU plugin would compute narrower than ONNX
says (`NARROWED`). Kernels write into the executor's arrays through an infer request whose
tensors share their memory, bound again only when the arrays change. A saved plan keeps each
step's ONNX model (its sha256 checked on load), as ONNX Runtime's engine does; a loaded plan's
steps are compiled through OpenVINO's model cache (`CACHE_SUBDIR` in Woodpecker's cache).
"""

from __future__ import annotations

import importlib.util
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from woodpecker.cache import cache_dir
from woodpecker.config import OPENVINO_COMPILE_LIMIT_S, OPENVINO_PROBE_OPS
from woodpecker.engines import names
from woodpecker.engines.base import NUMERIC, BuildContext, Capabilities, Engine, Kernel
from woodpecker.engines.choice import Choices, KernelSpec
from woodpecker.engines.node_builds import NodeBuilds
from woodpecker.engines.onnx_step import StepModels, node_io
from woodpecker.engines.openvino_probe import bounded_compile
from woodpecker.errors import EngineError, first_line
from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ir.steps import StepIO
from woodpecker.ops import OPS
from woodpecker.ops.opaque import OP as OPAQUE
from woodpecker.ops.opaque import WHOLE_MODEL
from woodpecker.options import Precision

ARTIFACTS_DIR = names.OPENVINO_MODELS_DIR   # a saved plan's step models
CACHE_SUBDIR = "openvino"    # OpenVINO's compiled-model cache, under Woodpecker's cache
# float32 computed in float32, as every other engine does: OpenVINO's CPU plugin otherwise
# computes in bfloat16 where the CPU has it (this host's AMD EPYC reports
# INFERENCE_PRECISION_HINT bfloat16 by default; bench/runners.py measured the difference);
# a compile with a lower `Precision` asks for that type instead
HINTS = {Precision.FP32: "f32", Precision.BF16: "bf16", Precision.FP16: "f16"}
# Element types OpenVINO's CPU plugin computes otherwise than ONNX (and ONNX Runtime, and the
# numpy reference) do, measured with OpenVINO 2026.4 (one-node Add/Mul/Sub models): int64 and
# uint64 in 32 bits (2**40 + 1 + 2**40 gave 1), float64 in float32 (1 + 1e-12 gave 1), int8
# and uint8 saturating where ONNX wraps (uint8 255 + 255 gave 255, not 254). A node reading or
# writing such a value at run time is declined; constants of these types (shapes, axes,
# indices) are read when the model is compiled and are fine.
NARROWED = {"int64": "in 32 bits", "uint64": "in 32 bits", "float64": "in float32",
            "int8": "saturating", "uint8": "saturating"}


def compile_config(threads: int, cache: bool = False,
                   precision: Precision = Precision.FP32) -> dict[str, Any]:
    """Woodpecker's compile properties for OpenVINO's CPU plugin; `cache`: through OpenVINO's
    model cache (a loaded plan's steps); `precision`: the compile's (its hint)."""
    config: dict[str, Any] = {
        "INFERENCE_PRECISION_HINT": HINTS[precision],
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1,
        # OpenVINO's TBB workers do not spin on after a run (unlike ORT's, ort_engine.py):
        # measured on a 64-channel 56x56 3x3 conv + relu, 2 threads, the whole process spent
        # 0.5 to 1.2 ms of CPU time in the 100 ms after a run, all of it in the first 5 ms
        # (ORT without force_spinning_stop: 31 ms in the first 50 ms). Nothing to set for
        # that. Pinning (on by default in LATENCY mode) is switched off: the process also runs
        # Halide's and torch's threads on these cores, and pinning measured no faster
        # (unpinned 1.13 vs pinned 1.15 ms on that conv, 29.7 vs 32.3 us on a 16-channel
        # 14x14 one; 400 rounds interleaved, medians).
        "ENABLE_CPU_PINNING": False,
    }
    if cache:
        # A loaded plan's step compiles from OpenVINO's cache from the second load on:
        # randwire_cifar as one step (17 MB of weights) 426 -> 234 ms (median of 5 fresh
        # processes), the first load 15 % slower for writing it; small steps alike either
        # way. Only through a model read first: compile_model(path) keys its cache on the
        # path, size and mtime, and ran a stale model for a file of equal size and mtime.
        config["CACHE_DIR"] = str(cache_dir() / CACHE_SUBDIR)
    return config


class OpenVinoEngine(Engine):
    """Compiled models are built from the node (or a step's nodes) as an ONNX model while
    compiling; a saved plan keeps each step's serialized model, so loading compiles those,
    without the onnx package."""

    name = names.OPENVINO
    # tensors take contiguous memory; a step may be a region of consecutive nodes
    caps = Capabilities(writes_strided=False, own_threads=True, multi_node=True,
                        holds_constants=True)
    rank = (None, None)   # only measured selection chooses it (module docstring)
    ops = frozenset(OPS)
    dtypes = NUMERIC

    def __init__(self) -> None:
        self._core: Any = None
        # `accepts`' one-node compiled models
        self._nodes = NodeBuilds(self._compile, _reason, _narrowed)
        self._saved = StepModels(ARTIFACTS_DIR, "OpenVINO model")   # the steps' models

    def available(self) -> bool:
        return importlib.util.find_spec("openvino") is not None

    def _compile(self, model: "bytes | Path", ctx: BuildContext) -> Any:
        """OpenVINO's compiled model of a serialized ONNX model (or a model file: OpenVINO
        reads it itself), through its model cache for a loaded plan's steps; a large model's
        compile bounded in time (engines/openvino_probe.py)."""
        if self._core is None:
            import openvino as ov

            self._core = ov.Core()
        core = self._core
        source = str(model) if isinstance(model, Path) else model
        read = core.read_model(source)
        ops = len(read.get_ops())
        big = ops >= OPENVINO_PROBE_OPS   # compiled in a child first, through the cache
        return bounded_compile(core, read, source,
                               compile_config(ctx.threads, ctx.artifacts is not None or big,
                                              ctx.precision),
                               ops, OPENVINO_COMPILE_LIMIT_S, OPENVINO_PROBE_OPS)

    def accepts(self, node: Node, ctx: BuildContext) -> bool:
        return self._nodes.why_not(node, ctx) is None

    def declares(self, node: Node) -> bool:
        """Also none whose values OpenVINO computes narrower (`_narrowed`)."""
        return super().declares(node) and _narrowed(node) is None

    def why_not(self, node: Node, ctx: BuildContext) -> str:
        return self._nodes.why_not(node, ctx) or "refused the node"

    def build(self, node: Node, ctx: BuildContext, kernel: KernelSpec | None = None) -> Kernel:
        return self.build_step([node], *node_io(node), ctx, {})

    def build_step(self, nodes: list[Node], inputs: list[Value], outputs: list[Value],
                   ctx: BuildContext, choices: Choices) -> Kernel:
        """One compiled model computing `outputs` from `inputs` over consecutive `nodes` (a
        library region, runtime/steps.py): the plan's saved model where there is one,
        through OpenVINO's model cache; for a single node while compiling, the one `accepts`
        compiled."""
        if len(nodes) == 1 and ctx.artifacts is None:
            compiled = self._nodes.built(nodes[0], ctx)
            if compiled is None:
                raise RuntimeError(f"openvino cannot run {nodes[0].op} node "
                                   f"{nodes[0].name!r}: {self.why_not(nodes[0], ctx)}")
        else:
            with self._saved.model(nodes, inputs, outputs, ctx) as model:
                compiled = self._compile(model, ctx)
        return _kernel(compiled, inputs, outputs)

    def artifact_meta(self) -> dict:
        import openvino as ov

        return {"openvino": ov.__version__}

    def save_artifacts(self, directory: Path, graph: Graph, choices: Choices,
                       steps: list[StepIO], source: Path | None = None) -> dict:
        """Each step's serialized ONNX model (portable: any OpenVINO release reads it), made
        from its nodes, or for a loaded plan the model it was loaded with."""
        models = self._saved.save(directory, graph, steps, source)
        return {**self.artifact_meta(), "models": models}

    def load_artifacts(self, directory: Path, section: dict, choices: Choices) -> None:
        self._saved.load(directory, section["models"])

    def artifact_files(self, section: dict) -> list[str]:
        return [m["file"] for m in section.get("models", {}).values()]


def _narrowed(node: Node) -> str | None:
    """Why OpenVINO's CPU plugin would compute one of the node's run-time values otherwise
    than ONNX says (`NARROWED`), or None. The user's whole graph (library-first) is not
    declined for it — its int64 token ids and labels are the common case — but its outputs are
    checked against ONNX Runtime's before the plan may be chosen
    (selection/library_first.py). Any node, the whole graph too, with an empty value (a
    dimension of 0) is declined: OpenVINO 2026.4's CPU plugin corrupted the process's heap
    running a batch-0 input through MaxPool, AveragePool and Flatten (the fuzzer's find;
    ONNX Runtime returns the empty result)."""
    inputs, outputs = node_io(node)
    if any(v.shape is not None and 0 in v.shape for v in inputs + outputs):
        return "OpenVINO's CPU plugin mishandles empty tensors (a dimension of 0)"
    if node.op == OPAQUE and node.attrs.get("op_type") == WHOLE_MODEL:
        return None
    for v in inputs + outputs:
        how = NARROWED.get(v.dtype.name) if v.dtype is not None else None
        if how is not None:
            return f"OpenVINO's CPU plugin computes {v.dtype.name} {how}"
    return None


def _reason(e: BaseException) -> str:
    """OpenVINO's reason in one line: its messages open with where in its sources they were
    raised ("Exception from src/…:105:", "Check 'false' failed at …") and headings ending in
    a colon; the first line that is neither says what failed."""
    for line in (ln.strip() for ln in str(e).splitlines()):
        if line and not line.endswith(":") and not line.startswith(("Exception from ",
                                                                      "Check '")):
            return line
    return first_line(e)


def _kernel(compiled: Any, inputs: list[Value], outputs: list[Value]) -> Kernel:
    """`kernel(*arrays)` → new outputs in `outputs` order; `kernel.into(outs, *arrays)` has
    OpenVINO write into the given arrays (the executor's arena): one infer request whose
    tensors share the arrays' memory. A port's tensor stays bound while the very array of the
    last call comes again (the arena's views, every run), as Halide's kernels keep their
    buffers (engines/halide/aot.py). Ports are found by value name (OpenVINO keeps the ONNX
    names as its ports' tensor names); a value read twice is one port, bound twice."""
    import openvino as ov

    request = compiled.create_infer_request()
    ports = [compiled.input(v.name) for v in inputs] + [compiled.output(v.name) for v in outputs]
    n_in = len(inputs)
    # each port's shape where OpenVINO's compiled model fixes it: an array of another shape
    # is never bound, since OpenVINO would write the port's bytes into it (a mutated model
    # whose declared output shape its graph does not make crashed the process here)
    fixed = [tuple(p.get_partial_shape().to_shape()) if p.get_partial_shape().is_static
             else None for p in ports]
    # per port, a weak reference to the array whose memory its tensor shares (None: bind
    # again). An ov.Tensor does not keep the array alive: each call binds again any port whose
    # array is not the one given, which the caller keeps alive through the call.
    bound: list = [None] * len(ports)

    def into(outs, *args):
        held = []      # copies bound for this call only: arrays OpenVINO cannot share
        for k, a in enumerate((*args, *outs)):
            ref = bound[k]
            if ref is not None and ref() is a:
                continue
            if fixed[k] is not None and tuple(a.shape) != fixed[k]:
                raise EngineError(f"OpenVINO's {ports[k].get_any_name()!r} is "
                                  f"{list(fixed[k])}, the plan holds {list(a.shape)}")
            shared = a.flags.c_contiguous and a.flags.writeable
            memory = a if shared else np.array(a, order="C")
            request.set_tensor(ports[k], ov.Tensor(memory, shared_memory=True))
            bound[k] = weakref.ref(a) if shared else None
            if not shared:
                held.append((k, a, memory))
        request.infer(share_outputs=True)     # no copy of the outputs into new arrays
        for k, a, memory in held:
            if k >= n_in:
                np.copyto(a, memory)

    def run(*args):
        if any(d < 0 for v in outputs for d in v.shape):   # a dimension the data decides
            for k, a in enumerate(args):
                request.set_tensor(ports[k], ov.Tensor(np.ascontiguousarray(a)))
                bound[k] = None
            request.infer()
            return [np.array(request.get_tensor(p).data) for p in ports[n_in:]]
        outs = [np.empty(v.shape, v.dtype) for v in outputs]
        into(outs, *(np.asarray(a) for a in args))
        return outs

    return Kernel(run, into)
