"""Reading a model as ONNX Runtime does, for `woodpecker.InferenceSession`.

Contract: `read_model(path or bytes)` gives the bytes, the folder its external data lies in
(beside a model file; the working directory for bytes) and how to name it, or one error line
of ORT's type (NoSuchFile, InvalidProtobuf, Fail); `parse` the ModelProto (InvalidProtobuf /
InvalidArgument); `external_digests` the sha256 of every external data file the model names,
each a file inside that folder that holds the bytes its tensors claim (else Fail);
`inlined` a copy with that data read in from the very bytes digested (a file rewritten since
is one Fail line); `replaced` a copy whose initializers hold the values given (the session
options' `add_initializer` / `add_external_initializers`); `without` a copy without
the graph outputs named (a graph input that is also an output: the session copies it);
`model_config(options, proto, where)` the session options with the model's own `ort_config`
metadata applied where ORT_LOAD_CONFIG_FROM_MODEL=1 in the environment, as ORT applies it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

from woodpecker.errors import first_line
from woodpecker.files import sha256_file
from woodpecker.session_api import (
    InvalidModel,
    InvalidProtobuf,
    LoadFailure,
    ModelConfigError,
    NoSuchFile,
)


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


ORT_CONFIG_ENV = "ORT_LOAD_CONFIG_FROM_MODEL"
# ORT's `ort_config` session options (inference_session_utils): key -> SessionOptions field
_MODEL_CONFIG = {"intra_op_num_threads": "intra_op_num_threads",
                 "inter_op_num_threads": "inter_op_num_threads",
                 "execution_mode": "execution_mode",
                 "graph_optimization_level": "graph_optimization_level",
                 "enable_profiling": "enable_profiling"}
_LEVELS = {0: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
           1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
           2: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
           99: ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def model_config(so: Any, proto: onnx.ModelProto, where: str) -> Any:
    """The session options with the model's own `ort_config` metadata applied, as ORT applies
    it when the environment sets ORT_LOAD_CONFIG_FROM_MODEL=1: its `session_options` entries
    intra_op_num_threads, inter_op_num_threads, execution_mode, graph_optimization_level and
    enable_profiling override the options given (others ignored, as ORT ignores them); a
    value of another type or range is ORT's RuntimeError. The options object given is the
    one changed (ORT changes its own copy); a new one where none was given."""
    if os.environ.get(ORT_CONFIG_ENV) != "1":
        return so
    text = next((m.value for m in proto.metadata_props if m.key == "ort_config"), None)
    if text is None:
        return so
    try:
        entries = json.loads(text).get("session_options", {})
    except (ValueError, AttributeError) as e:
        raise ModelConfigError(f"{where}: Json stored in the `ort_config` key cannot be parsed: "
                          f"{first_line(e)}") from None
    so = so if so is not None else ort.SessionOptions()
    for key, value in entries.items():
        if key not in _MODEL_CONFIG:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise ModelConfigError(f"{where}: {key} option in the model file must be an integer")
        ok = {"execution_mode": value in (0, 1), "enable_profiling": value in (0, 1),
              "graph_optimization_level": value in _LEVELS}.get(key, value >= 0)
        if not ok:
            raise ModelConfigError(f"{where}: Unsupported value for {key} in ORT config: {value}")
        setattr(so, _MODEL_CONFIG[key],
                _LEVELS[value] if key == "graph_optimization_level" else
                ort.ExecutionMode(value) if key == "execution_mode" else
                bool(value) if key == "enable_profiling" else value)
    return so
