"""One-node builds of the library engines that read ONNX (ONNX Runtime, OpenVINO): how they
answer "do you run this node?" by asking the library itself.

Contract: `NodeBuilds(build, reason)` keeps an engine's one-node builds while compiling.
`why_not(node, ctx)` is None where the library runs the node, else its reason in one line;
`built(node, ctx)` is the library's object for the node (a session, a compiled model) or None
where it refused, built now if the node was only answered. A node's build is kept while the
node lives (its step's kernel while compiling uses it). The answer is also kept per node
*signature* (`signature`: op, attributes, element types, shapes, layouts, which inputs are the
same value, small constants' values), so an identical node elsewhere — a transformer's
repeated blocks, the copies of the graph selection makes — is answered without a build.
Choice written down: a constant of more than `SMALL` elements enters the signature by type and
shape only; a library's answer depends on a weight's shape, not its values (the values of
small constants — shapes, axes, indices — can decide it).

Measured (2-vCPU Zen 4): torchvision's MaxViT-T's library-first comparison asked ONNX Runtime
about 1276 nodes by building a session for each, 17 s of its 34 s.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from woodpecker.engines.base import BuildContext
from woodpecker.engines.onnx_step import node_io, onnx_bytes
from woodpecker.ir.graph import Node

SMALL = 4096          # constants up to this many elements enter the signature by value
_MAX_ANSWERS = 50_000  # answers kept per engine (a few MB of keys); all dropped beyond


def signature(node: Node, ctx: BuildContext) -> bytes:
    """What the library's answer about `node` can depend on, hashed (module docstring)."""
    h = hashlib.blake2b(digest_size=20)
    attrs = sorted((k, repr(v)) for k, v in node.attrs.items())
    h.update(repr((node.op, attrs, *_key(ctx))).encode())
    ids: dict[int, int] = {}
    inputs, outputs = node_io(node)
    for tag, values in ((b"i", inputs), (b"o", outputs)):
        h.update(tag)
        for v in values:
            h.update(repr((ids.setdefault(id(v), len(ids)), str(v.dtype), v.shape,
                           v.layout)).encode())
    for v in node.inputs:    # the constants the one-node model carries
        if v is not None and v.data is not None:
            h.update(repr((str(v.data.dtype), v.data.shape)).encode())
            if v.data.size <= SMALL:
                h.update(np.ascontiguousarray(v.data).tobytes())
    return h.digest()


class NodeBuilds:
    """An engine's one-node builds (module docstring); `build(model_bytes, ctx)` makes
    the library's object or raises, `reason(error)` says why in one line, `refuse(node)` is
    a reason to decline without asking the library (None: ask)."""

    def __init__(self, build: Callable[[bytes, BuildContext], Any],
                 reason: Callable[[BaseException], str],
                 refuse: Callable[[Node], str | None] = lambda node: None) -> None:
        self._build, self._reason, self._refuse = build, reason, refuse
        # node -> ((threads, opset, precision), its build or None, why not)
        self._nodes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._answers: dict[bytes, str] = {}    # signature -> why not ("" : it runs)

    def why_not(self, node: Node, ctx: BuildContext) -> str | None:
        entry = self._nodes.get(node)
        if entry is not None and entry[0] == _key(ctx):
            return entry[2] or None
        why = self._refuse(node)
        if why is not None:
            return why
        key = signature(node, ctx)
        if key not in self._answers:
            self._make(node, ctx, key)
        return self._answers[key] or None

    def built(self, node: Node, ctx: BuildContext) -> Any:
        entry = self._nodes.get(node)
        if entry is None or entry[0] != _key(ctx):
            why = self._refuse(node)
            entry = (None, None, why) if why is not None else self._make(node, ctx)
        return entry[1]

    def _make(self, node: Node, ctx: BuildContext, key: bytes | None = None) -> tuple:
        try:
            thing, why = self._build(onnx_bytes([node], *node_io(node), ctx.opset), ctx), ""
        except Exception as e:  # noqa: BLE001 - the libraries raise their own types
            thing, why = None, self._reason(e) or "refused the node"
        entry = (_key(ctx), thing, why)
        self._nodes[node] = entry
        if len(self._answers) >= _MAX_ANSWERS:
            self._answers.clear()
        self._answers[key or signature(node, ctx)] = why
        return entry


def _key(ctx: BuildContext) -> tuple:
    """What a one-node build depends on besides the node."""
    return ctx.threads, ctx.opset, ctx.precision
