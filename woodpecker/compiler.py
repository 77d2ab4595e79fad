"""The compile pipeline: frontend → passes → engine per node → plan (DESIGN.md)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from typing import Any

import onnx

from woodpecker.engines.base import BuildContext
from woodpecker.engines.registry import choose, parse_engines
from woodpecker.frontend.onnx_import import import_onnx, load_model_proto
from woodpecker.passes import DEFAULT, optimize
from woodpecker.runtime.compiled import CompiledModel
from woodpecker.runtime.plan import Plan
from woodpecker.target import Target


def compile(model: Any, target: "str | Target" = "cpu", *,
            engines: "str | Iterable[str] | None" = None,
            input_shapes: Mapping[str, tuple[int, ...]] | None = None,
            input_values: Mapping[str, Any] | None = None,
            threads: int | None = None, passes: tuple[str, ...] = DEFAULT,
            example_inputs: Any = None) -> CompiledModel:
    """Compile an ONNX model (path, bytes or ModelProto) or a torch.nn.Module.

    A torch module needs `example_inputs` (a tensor or tuple of tensors) to be exported.
    `engines` restricts the engines used (default: every installed one). `input_values` binds
    inputs to fixed values, specialising the model to them.
    """
    if _is_torch_module(model):
        from woodpecker.frontend.torch_import import export_module
        model = export_module(model, example_inputs)
    proto = load_model_proto(model)
    tgt = Target.parse(target, threads)
    allowed = parse_engines(engines)
    graph = import_onnx(proto, input_shapes, input_values)
    stats = optimize(graph, passes)
    ctx = BuildContext(tgt.threads, graph.opset)
    chosen = [choose(n, allowed, ctx) for n in graph.nodes]
    meta = {"source_sha256": hashlib.sha256(proto.SerializeToString()).hexdigest(),
            "passes": stats, "engines_allowed": allowed}
    if isinstance(model, (str, os.PathLike)):
        meta["source"] = os.path.basename(os.fspath(model))
    zoo = {p.key: p.value for p in proto.metadata_props if p.key.startswith("woodpecker.")}
    if zoo:
        meta["metadata"] = zoo
    return CompiledModel(Plan(graph, chosen, tgt, meta))


def _is_torch_module(model: Any) -> bool:
    if isinstance(model, (str, bytes, os.PathLike, onnx.ModelProto)):
        return False
    try:
        import torch
    except ImportError:
        return False
    return isinstance(model, torch.nn.Module)
