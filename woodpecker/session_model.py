"""Reading a model as ONNX Runtime does, for `woodpecker.InferenceSession`.

Contract: `read_model(path or bytes)` gives the bytes, the folder its external data lies in
(beside a model file; the working directory for bytes) and how to name it, or one error line
of ORT's type (NoSuchFile, InvalidProtobuf, Fail); `parse` the ModelProto (InvalidProtobuf /
InvalidArgument); `external_digests` the sha256 of every external data file the model names,
each a file inside that folder that holds the bytes its tensors claim (else Fail);
`inlined` a copy with that data read in from the very bytes digested (a file rewritten since
is one Fail line); `replaced` a copy whose initializers hold the values given (the session
options' `add_initializer` / `add_external_initializers`); `without` a copy without
the graph outputs named (a graph input that is also an output: the session copies it)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

from woodpecker.errors import first_line
from woodpecker.files import sha256_file
from woodpecker.session_api import InvalidModel, InvalidProtobuf, LoadFailure, NoSuchFile


def read_model(path_or_bytes: "str | os.PathLike | bytes") -> tuple[bytes, Path, str]:
    """The model's bytes, the folder its external data lies in, and how to name it."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes), Path.cwd(), "the model bytes"
    path = Path(path_or_bytes)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NoSuchFile(f"model file not found: {path}") from None
    except IsADirectoryError:
        raise InvalidProtobuf(f"{path} is a folder, not an ONNX model file") from None
    except OSError as e:
        raise LoadFailure(f"cannot read the model file {path}: {e.strerror}") from None
    return data, path.absolute().parent, str(path)


def parse(data: bytes, where: str) -> onnx.ModelProto:
    try:
        proto = onnx.load_from_string(data)
    except Exception as e:   # protobuf raises DecodeError, and other types for some garbage
        raise InvalidProtobuf(f"{where} is not an ONNX model: protobuf parsing failed "
                              f"({first_line(e)})") from None
    if not proto.HasField("graph"):
        raise InvalidModel(f"{where} holds no graph (is it an ONNX model?)")
    return proto


def _external_tensors(proto: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [t for t in _get_all_tensors(proto) if uses_external_data(t)]


def _external_file(base: Path, info: ExternalDataInfo, tensor: str, where: str) -> Path:
    """Where a tensor's external data lies: a relative name inside `base`, links resolved."""
    path = base / (info.location or "\0")
    if not info.location or "\0" in info.location or Path(info.location).is_absolute() or \
            not path.resolve().is_relative_to(base.resolve()):
        raise LoadFailure(f"{where}: the external data of {tensor!r} is named "
                          f"{info.location!r}, not a file inside the model's folder {base}")
    if not path.is_file():
        raise LoadFailure(f"{where}: the external data file {info.location!r} of "
                          f"{tensor!r} does not exist in {base}")
    return path


def external_digests(proto: onnx.ModelProto, base: Path, where: str) -> dict[str, str]:
    """{location: sha256} of every external data file the model names, each checked to hold
    the bytes its tensors claim."""
    sizes: dict[str, int] = {}
    for t in _external_tensors(proto):
        info = ExternalDataInfo(t)
        path = _external_file(base, info, t.name, where)
        size = sizes.setdefault(info.location, path.stat().st_size)
        end = (info.offset or 0) + (info.length or 0)
        if end > size:
            raise LoadFailure(f"{where}: the external data of {t.name!r} ends at byte "
                              f"{end} of {info.location!r}, which holds {size}")
    return {loc: sha256_file(base / loc) for loc in sorted(sizes)}


def inlined(proto: onnx.ModelProto, base: Path, digests: dict[str, str],
             where: str) -> onnx.ModelProto:
    """A copy of `proto` with its external data read in from the very bytes whose sha256 the
    session's key holds (a file rewritten since is one error line, never a plan saved under
    the old key)."""
    if not digests:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    blobs: dict[str, bytes] = {}
    for t in _external_tensors(out):
        info = ExternalDataInfo(t)
        if info.location not in blobs:
            blob = _external_file(base, info, t.name, where).read_bytes()
            if hashlib.sha256(blob).hexdigest() != digests.get(info.location):
                raise LoadFailure(f"{where}: the external data file {info.location!r} "
                                  "changed after the session read it; open it again")
            blobs[info.location] = blob
        start = info.offset or 0     # (in the file: its size was checked, its digest is)
        t.raw_data = blobs[info.location][start:start + info.length if info.length else None]
        t.data_location = onnx.TensorProto.DEFAULT
        del t.external_data[:]
    return out


def replaced(proto: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `proto` whose initializers named in `values` hold those values, inline."""
    if not values:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for t in out.graph.initializer:
        if t.name in values:
            t.CopyFrom(onnx.numpy_helper.from_array(values[t.name], t.name))
    return out


def without(proto: onnx.ModelProto, outputs: set[str]) -> onnx.ModelProto:
    """`proto` without these graph outputs."""
    if not outputs:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    kept = [vi for vi in out.graph.output if vi.name not in outputs]
    del out.graph.output[:]
    out.graph.output.extend(kept)
    return out
