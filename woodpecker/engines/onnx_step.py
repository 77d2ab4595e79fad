"""A step as a small ONNX model: what the library engines that read ONNX (ONNX Runtime,
OpenVINO) build their kernels from, and what they keep of each step in a saved plan.

Contract: `node_io(node)` is a node's run-time inputs (as the executor passes them) and its
outputs; `onnx_bytes(nodes, inputs, outputs, opset)` the serialized model computing `outputs`
from `inputs` over consecutive `nodes` (frontend/onnx_export.py; imported only when a model is
made, so a loaded plan never imports onnx). `StepModels` is an engine's step models in plan folders:
`save` writes each step's model under the engine's folder with its sha256 (the model a loaded
plan came with, else one made from the nodes) and returns the engine's `models` section;
`load` checks a loaded plan's files (one-line PlanErrors); `model` is a step's model to
build — its checked file for a loaded plan, bytes made while compiling (`step_bytes`).

A region of several nodes runs the user's own nodes for its part of the graph
(`original_region`: the nodes of the model file that compute the region's outputs from its
inputs, found by name), not Woodpecker's rewrite of them, so the library keeps its own fusions
and layout choices over what the user wrote (issue 50: ONNX Runtime ran Woodpecker's rewritten
graph 0.83× as fast as the exporter's on an Intel machine); where the walk cannot show that
the file's nodes are the very step (see `original_region`), the step is made from
Woodpecker's nodes (frontend/onnx_export.py) as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from woodpecker.engines.base import BuildContext
from woodpecker.errors import PlanError, WoodpeckerError, first_line
from woodpecker.files import inside, sealed_file, sha256_file, verified, verified_bytes, write_bytes
from woodpecker.ir.graph import Graph, Node, Value, runtime_positions
from woodpecker.ir.steps import StepIO


def node_io(node: Node) -> tuple[list[Value], list[Value]]:
    """A node's run-time inputs (as the executor passes them) and its outputs."""
    return [node.inputs[i] for i in runtime_positions(node)], list(node.outputs)


def onnx_bytes(nodes: list[Node], inputs: list[Value], outputs: list[Value], opset: int) -> bytes:
    """The step as an ONNX model; a value read twice (a conv whose residual is its own input)
    is one graph input."""
    from woodpecker.frontend.onnx_export import nodes_model

    return nodes_model(nodes, list(dict.fromkeys(inputs)), outputs, opset).SerializeToString()


def step_bytes(nodes: list[Node], inputs: list[Value], outputs: list[Value], opset: int,
               source=None) -> bytes:
    """A step's model: for a region of several nodes of a graph imported from `source` (the
    user's ONNX model), the user's own nodes computing its outputs from its inputs where
    `original_region` finds them; else made from Woodpecker's nodes."""
    if source is not None and len(nodes) > 1:
        original = original_region(source, inputs, outputs)
        if original is not None:
            return original
    return onnx_bytes(nodes, inputs, outputs, opset)


def original_region(source, inputs: list[Value], outputs: list[Value]) -> bytes | None:
    """The nodes of `source` (a ModelProto) that compute `outputs` from `inputs` (values of
    the same names; initializers taken along), as a model whose inputs have the plan's static
    shapes — or None where that is not the very step: a value in another layout than the
    file's, a value the walk back from the outputs reaches that is neither an input, an
    initializer nor made by a node (a graph input the plan bound to a constant, a name
    Woodpecker's passes made), a node with a subgraph (its outer-scope names are not walked),
    or outputs whose element type, rank or a dimension ONNX's inference (strict, with data
    propagation) finds other than the plan's (a dimension it leaves open is taken: the values
    are the file's own, computed from inputs of the plan's shapes)."""
    import onnx
    from onnx import helper

    if any(v.layout for v in (*inputs, *outputs)):
        return None
    ins = list(dict.fromkeys(v.name for v in inputs))
    g = source.graph
    made = {o: n for n in g.node for o in n.output if o}
    inits = {t.name: t for t in g.initializer}
    taken, used, todo = set(), set(), [v.name for v in outputs]
    if set(todo) & set(ins):
        return None
    while todo:
        name = todo.pop()
        if not name or name in ins or name in used:
            continue
        if name in inits:
            used.add(name)
            continue
        node = made.get(name)
        if node is None or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                               for a in node.attribute):
            return None
        if id(node) not in taken:
            taken.add(id(node))
            todo.extend(node.input)

    def info(v: Value, shape=True):
        return helper.make_tensor_value_info(v.name, helper.np_dtype_to_tensor_dtype(v.dtype),
                                             list(v.shape) if shape else None)

    by_name = {v.name: v for v in inputs}
    graph = helper.make_graph([n for n in g.node if id(n) in taken], f"{g.name}_region",
                              [info(by_name[n]) for n in ins],
                              [info(v, shape=False) for v in outputs],
                              [inits[n] for n in sorted(used)])
    model = helper.make_model(graph, opset_imports=source.opset_import,
                              ir_version=source.ir_version, functions=source.functions)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx raises its own types for a model it rejects
        return None
    for v, o in zip(outputs, inferred.graph.output):
        t = o.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if t.elem_type != helper.np_dtype_to_tensor_dtype(v.dtype) or \
                not t.HasField("shape") or len(dims) != len(v.shape) or \
                any(d is not None and d != w for d, w in zip(dims, v.shape)):
            return None
    return model.SerializeToString()


class StepModels:
    """One engine's step models: written under `folder` of a plan folder, named `what` in
    errors ("ONNX Runtime model"); per loaded plan folder, each step's checked file (and its
    sha256) by the name of the step's first node. A library builds a loaded step from a
    sealed private copy of the file, checked again as it is copied (files.sealed_file): the
    bytes it reads are the bytes checked, whatever happens to the folder meanwhile."""

    def __init__(self, folder: str, what: str) -> None:
        self.folder = folder
        self.what = what
        self._loaded: dict[Path, dict[str, tuple[Path, str]]] = {}

    @contextlib.contextmanager
    def model(self, nodes: list[Node], inputs: list[Value], outputs: list[Value],
              ctx: BuildContext) -> "Iterator[bytes | Path]":
        """The model of a step, for the block: a sealed copy of the saved plan's file, or
        the bytes made from the nodes."""
        if ctx.artifacts is None:
            yield step_bytes(nodes, inputs, outputs, ctx.opset, ctx.source)
            return
        saved = self._loaded.get(ctx.artifacts.resolve(), {})
        if nodes[0].name not in saved:
            raise PlanError(f"plan has no {self.what} for the step at node {nodes[0].name!r}")
        path, sha = saved[nodes[0].name]
        with sealed_file(path, sha, self.what) as copy:
            try:
                yield copy
            except WoodpeckerError:
                raise
            except Exception as e:  # noqa: BLE001 - the libraries raise their own types
                # a saved step the library will not build (external data pointing out of
                # the folder, an edited model): the plan's fault, one line
                raise PlanError(f"plan's {self.what} for the step at node {nodes[0].name!r} "
                                f"does not build: {first_line(e)}") from None

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
                data = verified_bytes(*loaded[first], self.what)
            else:
                data = step_bytes(step.nodes, step.inputs, step.outputs, graph.opset,
                                  graph.source)
            path = write_bytes(directory / name, data, root=directory)
            models[first] = {"file": name, "sha256": sha256_file(path)}
        return models

    def load(self, directory: Path, models: dict) -> None:
        """Check each model file `save` recorded (inside the folder, present, its sha256)."""
        self._loaded[directory.resolve()] = {
            first: (verified(inside(directory, m["file"], self.what), m["sha256"], self.what),
                    m["sha256"]) for first, m in models.items()}
