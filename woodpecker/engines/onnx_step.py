"""A step as a small ONNX model: what the library engines that read ONNX (ONNX Runtime,
OpenVINO) build their kernels from, and what they keep of each step in a saved plan.

Contract: `node_io(node)` is a node's run-time inputs (as the executor passes them) and its
outputs; `onnx_bytes(nodes, inputs, outputs, opset)` the serialized model computing `outputs`
from `inputs` over consecutive `nodes` (ops/to_onnx.py; imported only when a model is made, so
a loaded plan never imports onnx). `StepModels` is an engine's step models in plan folders:
`save` writes each step's model under the engine's folder with its sha256 (the model a loaded
plan came with, else one made from the nodes) and returns the engine's `models` section;
`load` checks a loaded plan's files (one-line PlanErrors); `model` is a step's model to
build — its checked file for a loaded plan, bytes made from its nodes while compiling.
"""

from __future__ import annotations

from pathlib import Path

from woodpecker.engines.base import BuildContext
from woodpecker.errors import PlanError
from woodpecker.files import inside, sha256_file, verified, write_bytes
from woodpecker.ir.graph import Graph, Node, StepIO, Value, runtime_positions


def node_io(node: Node) -> tuple[list[Value], list[Value]]:
    """A node's run-time inputs (as the executor passes them) and its outputs."""
    return [node.inputs[i] for i in runtime_positions(node)], list(node.outputs)


def onnx_bytes(nodes: list[Node], inputs: list[Value], outputs: list[Value], opset: int) -> bytes:
    """The step as an ONNX model; a value read twice (a conv whose residual is its own input)
    is one graph input."""
    from woodpecker.ops.to_onnx import nodes_model

    return nodes_model(nodes, list(dict.fromkeys(inputs)), outputs, opset).SerializeToString()


class StepModels:
    """One engine's step models: written under `folder` of a plan folder, named `what` in
    errors ("ONNX Runtime model"); per loaded plan folder, each step's checked file by the
    name of the step's first node."""

    def __init__(self, folder: str, what: str) -> None:
        self.folder = folder
        self.what = what
        self._loaded: dict[Path, dict[str, Path]] = {}

    def model(self, nodes: list[Node], inputs: list[Value], outputs: list[Value],
              ctx: BuildContext) -> "bytes | Path":
        """The model of a step: the saved plan's file (checked when the plan was loaded), or
        made from the nodes."""
        if ctx.artifacts is None:
            return onnx_bytes(nodes, inputs, outputs, ctx.opset)
        saved = self._loaded.get(ctx.artifacts.resolve(), {})
        if nodes[0].name not in saved:
            raise PlanError(f"plan has no {self.what} for the step at node {nodes[0].name!r}")
        return saved[nodes[0].name]

    def save(self, directory: Path, graph: Graph, steps: list[StepIO],
             source: Path | None = None) -> dict:
        """Write each step's model into the plan folder `directory`: for a plan loaded from
        `source`, the model it was loaded with (no onnx package needed). Returns the
        `models` section: first node → file and sha256."""
        loaded = self._loaded.get(source.resolve(), {}) if source is not None else {}
        models = {}
        for k, step in enumerate(steps):
            name = f"{self.folder}/step{k}.onnx"
            first = step.nodes[0].name
            if first in loaded:
                data = loaded[first].read_bytes()
            else:
                data = onnx_bytes(step.nodes, step.inputs, step.outputs, graph.opset)
            path = write_bytes(directory / name, data)
            models[first] = {"file": name, "sha256": sha256_file(path)}
        return models

    def load(self, directory: Path, models: dict) -> None:
        """Check each model file `save` recorded (inside the folder, present, its sha256)."""
        self._loaded[directory.resolve()] = {
            first: verified(inside(directory, m["file"], self.what), m["sha256"], self.what)
            for first, m in models.items()}
