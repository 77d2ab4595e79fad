"""What an engine is: a capability declaration, a builder of kernels, and the keeper of its own
artifacts in a saved plan.

Thesis ch. 5 (Yin-Yang/XLVM): each engine describes which ops, dtypes and layouts it can run;
the selector maps each node to an engine that declares it. The protocol, beyond that:

- `build(node, ctx, kernel)` returns a `Kernel`: called with the node's run-time inputs
  (constants are bound when it is built) it returns one array per output; its optional `into`
  writes into given arrays (the executor's arena) and `bind` returns a `Bound` call of no
  arguments over arrays fixed once. `Capabilities` declares what the engine's kernels do.
- `build_step(nodes, inputs, outputs, ctx, choices)` builds one kernel for a step of several
  consecutive nodes when the engine declares `multi_node` (ONNX Runtime's library regions;
  next, fused subgraphs and parallel stages); a step of one node is `build`.
- `activate(threads)` makes the engine's process-wide settings a model's before it runs.
- `save_artifacts` / `load_artifacts` write and check what the engine's steps need in a plan
  folder (compiled kernels, serialized models), `artifact_meta` / `incompatibility` what must
  match on the loading host. The runtime knows no engine's files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from woodpecker.engines.choice import Choices, KernelSpec
from woodpecker.ir.graph import Graph, Node, Value, runtime_positions
from woodpecker.ir.steps import StepIO
from woodpecker.options import Precision


@dataclass(frozen=True)
class BuildContext:
    """What a kernel builder may need beyond the node: thread count, the model's opset, the
    saved plan's folder when the kernels come from one (its engines' artifacts), and while
    compiling the user's ONNX model (library regions are built from its nodes); the compile's
    `precision` (a library with a lower-precision mode uses it: OpenVINO's hint)."""

    threads: int = 2
    opset: int = 17
    artifacts: Path | None = None
    # the user's ONNX model the graph came from, while compiling (ir.graph.Graph.source)
    source: Any = field(default=None, compare=False, repr=False)
    precision: Precision = Precision.FP32


@dataclass(frozen=True)
class Bound:
    """A kernel bound to fixed arrays: `call()` computes them. Consecutive bound calls with
    the same `join` may be run as one: `join([bound, …])` returns that single call (or None
    when it cannot); `handle` is what `join` and `together` read of each. Independent bound
    calls with the same `together` may run at the same time, each on one thread:
    `together([bound, …])` returns one `Bound` doing so (or None when it cannot) — a
    concurrent stage of a parallel schedule (schedule/dos.py)."""

    call: Callable[[], None]
    join: Callable[[list["Bound"]], Callable[[], None] | None] | None = None
    handle: Any = None
    together: Callable[[list["Bound"]], "Bound | None"] | None = None


@dataclass(frozen=True)
class Kernel:
    """`run(*arrays)` → a list of new output arrays; `into(outs, *arrays)` writes the outputs
    into `outs` (None: the executor copies `run`'s results in); `bind(outs, *arrays)` → a
    `Bound` over these very arrays, or None where it cannot bind them."""

    run: Callable[..., Sequence[np.ndarray]]
    into: Callable[..., None] | None = None
    bind: Callable[..., Bound | None] | None = None
    # `by_name(feeds)`: `run` with the arguments by their value names (a library session's
    # own call, no repacking); None where the kernel takes them in order only
    by_name: Callable[[dict[str, np.ndarray]], Sequence[np.ndarray]] | None = None

    def __call__(self, *arrays: Any) -> Sequence[np.ndarray]:
        return self.run(*arrays)

    def before(self, hook: Callable[[], object]) -> "Kernel":
        """This kernel calling `hook()` first (on `run` and `into`; binding is dropped)."""
        run, into = self.run, self.into

        def hooked_run(*arrays):
            hook()
            return run(*arrays)

        hooked_into = None
        if into is not None:
            def hooked_into(outs, *arrays):
                hook()
                into(outs, *arrays)

        return Kernel(hooked_run, hooked_into)


@dataclass(frozen=True)
class Capabilities:
    """What an engine's kernels can do, declared.

    `writes_strided`: `into` takes any numpy view (an NHWC channel slice of a Concat's output,
    assembly/inplace.py), or the executor copies a new result in; `own_threads`: it runs
    worker threads of its own (other engines' spinning workers are rested before its steps);
    `multi_node`: one kernel may compute a step of consecutive nodes (`build_step`);
    `generated`: it runs the tuned kernels selection chose (a node's `Choice.kernel`);
    `views`: data movement runs as views and layout-following rewrites (assembly/layout.py);
    `holds_constants`: a saved plan's step carries the constants its nodes read inside the
    engine's own artifacts (ONNX Runtime's and OpenVINO's step models embed them), so a plan
    need not store them again in its weights file."""

    writes_strided: bool = True
    own_threads: bool = False
    multi_node: bool = False
    generated: bool = False
    views: bool = False
    holds_constants: bool = False


class Engine:
    name = ""
    ops: frozenset[str] = frozenset()
    dtypes: frozenset[str] = frozenset()
    layouts: frozenset[str] = frozenset({""})
    caps = Capabilities()
    # Default preference before any measurement (registry.preference), for data movement and
    # for compute: lower first; None: never chosen by default.
    rank: tuple[int | None, int | None] = (None, None)

    def available(self) -> bool:
        return True

    def supports(self, node: Node, ctx: BuildContext) -> bool:
        """The declared capability, refined by `accepts` for op variants."""
        return self.declares(node) and self.accepts(node, ctx)

    def declares(self, node: Node) -> bool:
        """What the engine declares it runs (op, element types, layouts), without asking the
        library itself (`accepts` may build the node)."""
        if node.op not in self.ops:
            return False
        dtypes = self.dtypes_for(node)
        for v in list(node.inputs) + list(node.outputs):
            if v is not None and (v.dtype is None or v.dtype.name not in dtypes):
                return False
            if v is not None and v.layout not in self.layouts:
                return False
        return True

    def dtypes_for(self, node: Node) -> frozenset[str]:
        """The element types the engine runs `node`'s op in (`dtypes` unless an engine runs
        some ops in others: the Halide engine's integer convolutions)."""
        return self.dtypes

    def accepts(self, node: Node, ctx: BuildContext) -> bool:
        """Variant-level capability beyond op and dtype (pads, attributes, library support)."""
        return True

    def refusal(self, node: Node, ctx: BuildContext) -> str | None:
        """Why this engine cannot run `node`, in a few words (None: it can) — what a user
        reads when no engine runs a node. Engines that ask a library override `why_not`."""
        if node.op not in self.ops:
            return f"no kernel for {node.op}"
        dtypes = self.dtypes_for(node)
        for v in list(node.inputs) + list(node.outputs):
            if v is not None and (v.dtype is None or v.dtype.name not in dtypes):
                return f"no kernel for element type {v.dtype}"
            if v is not None and v.layout not in self.layouts:
                return f"no kernel for layout {v.layout!r}"
        return None if self.accepts(node, ctx) else self.why_not(node, ctx)

    def why_not(self, node: Node, ctx: BuildContext) -> str:
        """Why `accepts` refused `node` (engines that ask a library keep its error)."""
        return "refused the node"

    def build(self, node: Node, ctx: BuildContext, kernel: KernelSpec | None = None) -> Kernel:
        """A kernel computing `node`; `kernel` is the generated kernel chosen for it (engines
        with `caps.generated` need one)."""
        raise NotImplementedError

    def build_step(self, nodes: list[Node], inputs: list[Value], outputs: list[Value],
                   ctx: BuildContext, choices: Choices) -> Kernel:
        """One kernel computing `outputs` from `inputs` over consecutive `nodes` (all this
        engine's); engines without `caps.multi_node` get steps of one node."""
        if len(nodes) != 1:
            raise NotImplementedError(f"engine {self.name!r} runs one node per step")
        return self.build(nodes[0], ctx, choices[nodes[0].name].kernel)

    def activate(self, threads: int) -> None:
        """Make this engine's process-wide settings those of a model about to run on
        `threads` threads (a thread pool's size). Called before every run of a compiled model
        that uses the engine, so two models with different thread counts in one process each
        run with their own; it must cost next to nothing when nothing changes. Engines whose
        kernels own their threads (an ONNX Runtime session) have nothing to do."""

    def rest_hook(self) -> Callable[[], None] | None:
        """A call that sends this engine's spinning workers to sleep at once, made before the
        steps of engines with `own_threads` (None: nothing spins)."""
        return None

    def artifact_meta(self) -> dict:
        """What a saved plan records of this engine, to be checked when it is loaded
        (`incompatibility`): e.g. the compiler version its native kernels were built with."""
        return {}

    def incompatibility(self, meta: dict) -> str | None:
        """Why a plan whose `artifact_meta` was `meta` cannot run here, or None."""
        return None

    def save_artifacts(self, directory: Path, graph: Graph, choices: Choices,
                       steps: list[StepIO], source: Path | None = None) -> dict:
        """Write into the plan folder `directory` what this engine's `steps` need to be built
        again without compiling (and without the compiler's packages); `source` is the plan
        folder the plan was loaded from (its artifacts are there), None for a plan compiled in
        this process. Returns this engine's section of plan.json (`artifact_meta` included)."""
        return self.artifact_meta()

    def load_artifacts(self, directory: Path, section: dict, choices: Choices) -> None:
        """Check what `save_artifacts` wrote (files present, sha256 as recorded); raise
        PlanError (one line) when something is missing, corrupt or edited."""

    def artifact_files(self, section: dict) -> list[str]:
        """The files (relative to the plan folder) that `save_artifacts` wrote, as its
        `section` of plan.json names them: a save over an older plan removes the others."""
        return []


def full_inputs(node: Node, constants: list | None = None) -> Callable[[Sequence], list]:
    """A function merging run-time inputs with the node's bound constants, in input order.
    `constants` (one entry per input) replaces the numpy data, e.g. with torch tensors."""
    template = constants if constants is not None else \
        [None if v is None else v.data for v in node.inputs]
    slots = runtime_positions(node)

    def merge(args: Sequence) -> list:
        out = list(template)
        for i, a in zip(slots, args):
            out[i] = a
        return out

    return merge


NUMERIC = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                     "uint16", "uint32", "uint64", "bool"})
