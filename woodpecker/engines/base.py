"""What an engine is: a capability declaration plus a builder of callable kernels.

Thesis ch. 5 (Yin-Yang/XLVM): each engine describes which ops, dtypes and layouts it can run;
the selector maps each node to an engine that declares it. A `Kernel` is called with the node's
non-constant inputs (constants are bound when it is built) and returns one array per output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from woodpecker.ir.graph import Node, runtime_positions

Kernel = Callable[..., Sequence[np.ndarray]]


@dataclass(frozen=True)
class BuildContext:
    """What a kernel builder may need beyond the node: thread count and the model's opset."""

    threads: int = 2
    opset: int = 17


class Engine:
    name = ""
    ops: frozenset[str] = frozenset()
    dtypes: frozenset[str] = frozenset()
    layouts: frozenset[str] = frozenset({""})
    # Kernels can write outputs through strides (schedule/aliases.py): true where `into` takes
    # any numpy view, or where the executor copies a new result in.
    writes_strided = True
    own_threads = False   # runs worker threads of its own (runtime/compiled.py stops Halide's)

    def available(self) -> bool:
        return True

    def supports(self, node: Node, ctx: BuildContext) -> bool:
        """The declared capability, refined by `accepts` for op variants."""
        if node.op not in self.ops:
            return False
        for v in list(node.inputs) + list(node.outputs):
            if v is not None and (v.dtype is None or v.dtype.name not in self.dtypes):
                return False
            if v is not None and v.layout not in self.layouts:
                return False
        return self.accepts(node, ctx)

    def accepts(self, node: Node, ctx: BuildContext) -> bool:
        """Variant-level capability beyond op and dtype (pads, attributes, library support)."""
        return True

    def build(self, node: Node, ctx: BuildContext) -> Kernel:
        raise NotImplementedError

    def activate(self, threads: int) -> None:
        """Make this engine's process-wide settings those of a model about to run on
        `threads` threads (a thread pool's size). Called before every run of a compiled model
        that uses the engine, so two models with different thread counts in one process each
        run with their own; it must cost next to nothing when nothing changes. Engines whose
        kernels own their threads (an ONNX Runtime session) have nothing to do."""

    def artifact_meta(self) -> dict:
        """What a saved plan records of this engine, to be checked when it is loaded
        (`incompatibility`): e.g. the compiler version its native kernels were built with."""
        return {}

    def incompatibility(self, meta: dict) -> str | None:
        """Why a plan whose `artifact_meta` was `meta` cannot run here, or None."""
        return None


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
