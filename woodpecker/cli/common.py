"""Helpers the `woodpecker` commands share: input shapes, plan-or-model arguments, the ONNX
model a plan came from."""

from __future__ import annotations

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
