"""ONNX Runtime as the reference for which models run: `ort_refusal(proto)` is ONNX Runtime's
own one-line reason for refusing to build a CPU session of the user's file as given (with its
graph optimisations and without them), or None where it builds one or where the refusal is one
of its own gaps; `OnnxRuntimeRefusal` carries that line where library-first
(selection/library_first.py) refuses the model with it.

Issue 76: run what ONNX Runtime runs, refuse what it refuses. Where ONNX Runtime is allowed and
installed and cannot build a session of the whole graph, a session of the user's file as given
is tried, and where that fails too the model is refused with ONNX Runtime's own line rather
than run on another library — an opset newer than ONNX Runtime supports, an integer division
by a constant zero, two nodes of one name, … Choice written down here: two refusals are ONNX
Runtime's gaps, not the model's faults, and do not stand — that its CPU build has no kernel of
a node (`NotImplemented`, "Could not find an implementation": DequantizeLinear of opset 28 in
ONNX Runtime 1.32, a contrib op only another execution provider has), and that it knows no op
of a domain other than ONNX's own (`STANDARD_DOMAINS`: onnxruntime-extensions' ops without
their library registered, OpenVINO's own). There Woodpecker's own plan or another library
(OpenVINO) may still run the model, as before — checked against no ONNX Runtime reference
(library_first._check_outputs: the first plan's). An op ONNX's own domains do not define at all
is the model's fault.
"""

from __future__ import annotations

import re

import onnx

from woodpecker.engines.ort_engine import new_session
from woodpecker.errors import ModelError, first_line


class OnnxRuntimeRefusal(ModelError):
    """ONNX Runtime, the reference, refuses to build a session of the model (its own line)."""


# the domains of ONNX's own ops: an op of these ONNX Runtime has no kernel of is the model's
# fault (or beyond what Woodpecker promises); an op of another domain is ONNX Runtime's gap
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})


def ort_refusal(proto: onnx.ModelProto, threads: int = 1) -> str | None:
    """ONNX Runtime's reason (`ort_said`) for refusing to build a CPU session of `proto` as
    given, with its graph optimisations and without them, or None where it builds one —
    a fault of its own optimiser (a fusion that names two nodes alike) is not the model's —
    or where the refusal is one of its gaps (`_ort_gap`; the module says why)."""
    try:
        data, said, gap = proto.SerializeToString(), None, False
    except ValueError:    # over protobuf's 2 GiB: not a session of bytes, nothing to check
        return None
    for optimize in (True, False):
        try:
            new_session(data, threads, optimize=optimize)
            return None
        except Exception as e:  # noqa: BLE001 - ONNX Runtime raises its own types
            if said is None:
                said, gap = ort_said(e), _ort_gap(proto, e)
    return None if gap else said


def _ort_gap(proto: onnx.ModelProto, e: BaseException) -> bool:
    """Whether ONNX Runtime's refusal `e` is a gap of its own rather than the model's fault:
    no kernel of a node ("Could not find an implementation for DequantizeLinear(28) node"),
    or an op of `proto` (its subgraphs included) from a domain other than ONNX's own that no
    model-local function defines ("custom:Foo(-1) is not a registered function/op")."""
    said = first_line(e)
    if type(e).__name__ == "NotImplemented" or "Could not find an implementation" in said:
        return True
    local = {(f.domain, f.name) for f in proto.functions}

    def ops(g: onnx.GraphProto):
        for n in g.node:
            yield n
            for a in n.attribute:
                for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                    yield from ops(sub)

    foreign = {f"{n.domain}:{n.op_type}" for n in ops(proto.graph)
               if n.domain not in STANDARD_DOMAINS and (n.domain, n.op_type) not in local}
    return any(f"{op}(" in said for op in foreign)


def ort_said(e: BaseException) -> str:
    """The line of an ONNX Runtime exception that says what is wrong: its status heading
    ("[ONNXRuntimeError] : 1 : FAIL : ") and the source file and C++ signature it quotes
    dropped."""
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", first_line(e))
    at = re.search(r"/\S+\.(?:h|cc|cpp|hpp):\d+ ", text)
    if at is None:
        return text.strip()
    rest, depth = text[at.end():], 0
    for k, ch in enumerate(rest):   # the signature: up to its parameter list's closing ")"
        depth += (ch == "(") - (ch == ")")
        if ch == ")" and depth == 0:
            rest = re.sub(r"^\s*\[with [^\]]*\]", "", rest[k + 1:])
            break
    return (text[:at.start()] + rest.strip()).strip()
