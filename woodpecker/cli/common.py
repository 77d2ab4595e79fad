"""Helpers the `woodpecker` commands share: input shapes, plan-or-model arguments, the ONNX
model a plan came from.

`run` and `bench` on an .onnx take the plan `woodpecker.InferenceSession` builds for it
(`_session`), so they share its plan cache (cache.py; session.py builds the key: the model's
and its external data's bytes, the options, the target, Woodpecker's and the engines'
versions): the first call compiles and saves the plan, later ones load it, and an edited model
(or other options) is compiled again. Each says which on stderr (`_said_cache`). A precision
other than fp32 or forced threads, which the session does not take, compile without the
cache, as does `bench` of a model whose dynamic dimensions no --input-shape fixes."""

from __future__ import annotations

import sys
from pathlib import Path

from woodpecker.errors import WoodpeckerError


def _shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    from woodpecker.ir.types import parse_shape

    out = {}
    for item in items or []:
        name, sep, text = item.rpartition("=")
        if not sep or not name:
            raise WoodpeckerError(f"--input-shape {item!r}: expected NAME=1x3x224x224")
        try:
            out[name] = parse_shape(text)
        except ValueError as e:
            raise WoodpeckerError(f"--input-shape: {e}") from None
    return out


def _is_plan(path: str) -> bool:
    return Path(path).is_dir()


def _load_or_compile(args, library_first: bool | None = None):
    """The plan `args.model` names, or the model compiled (untuned; `library_first` as
    CompileOptions takes it: False for the node-level graph tuning reads its tasks from)."""
    import woodpecker

    if _is_plan(args.model):
        return woodpecker.load(args.model, digest=getattr(args, "digest", None),
                               trust=getattr(args, "trust", False))
    return woodpecker.compile(args.model, engines=getattr(args, "engines", None),
                              input_shapes=_shapes(getattr(args, "input_shape", None)),
                              threads=getattr(args, "threads", None),
                              force_threads=getattr(args, "force_threads", False),
                              library_first=library_first,
                              precision=getattr(args, "precision", "fp32"))


def _reference_onnx(model, given: str | None, source: str) -> bytes:
    """The ONNX model a plan was compiled from: given (checked to be an ONNX model), the
    source file, or re-exported zoo."""
    if given:
        from woodpecker.frontend.onnx_import import load_model_proto

        load_model_proto(given)
        return Path(given).read_bytes()
    if not _is_plan(source):
        return Path(source).read_bytes()
    meta = model.plan.meta.get("metadata", {})
    if "woodpecker.zoo" in meta:
        import hashlib

        from woodpecker import zoo

        data = zoo.export(meta["woodpecker.zoo"], seed=int(meta.get("woodpecker.zoo.seed", 0)))
        data = Path(data).read_bytes()
        if hashlib.sha256(data).hexdigest() == model.plan.meta.get("source_sha256"):
            return data
    raise WoodpeckerError("cannot find the ONNX model this plan came from; pass --onnx FILE")


def _session(args):
    """The `woodpecker.InferenceSession` of the .onnx `args.model` with the command's engines,
    threads and input shapes (its plan loaded from the sessions' cache or compiled and saved
    there), or None for a plan folder and for options the session does not take."""
    if _is_plan(args.model) or getattr(args, "precision", "fp32") != "fp32" or \
            getattr(args, "force_threads", False):
        return None
    import woodpecker

    return woodpecker.InferenceSession(args.model, engines=getattr(args, "engines", None),
                                       threads=getattr(args, "threads", None),
                                       input_shapes=_shapes(getattr(args, "input_shape", None))
                                       or None, progress=sys.stderr)


def _said_cache(session, model: str) -> None:
    """One stderr line: whether `session`'s plan was loaded from the cache or compiled."""
    said = "loaded from the plan cache" if session.loaded_from_cache else \
        "compiled (saved in the plan cache for the next call)"
    print(f"woodpecker: {model}: plan {said}", file=sys.stderr)


def cached_or_compiled(args):
    """The plan of `args.model` for `bench`: the session's cached plan of an .onnx where its
    shapes are fixed (`_session`), else `_load_or_compile`."""
    session = _session(args)
    model = session._fixed if session is not None else None   # (the plan of fixed shapes)
    if model is None:
        return _load_or_compile(args)
    _said_cache(session, args.model)
    return model


def run(args, feeds: dict) -> dict:
    """`args.model`'s outputs {name: array} for `feeds`: through the session's cached plan of
    an .onnx (compiled for the feeds' shapes where the file leaves dimensions open), else the
    plan `_load_or_compile` gives."""
    session = _session(args)
    if session is None:
        return _load_or_compile(args).run(feeds)
    outputs = session.run(None, feeds)
    _said_cache(session, args.model)
    return dict(zip((o.name for o in session.get_outputs()), outputs))
