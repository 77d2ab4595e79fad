"""The value classes of ONNX Runtime's session API as `woodpecker.InferenceSession` answers
them: its exception types, `NodeArg`, `ModelMetadata`, the graph-assignment records, the CPU
memory info and `IOBinding` over numpy buffers.

Contract: each error class is both a Woodpecker error (`ModelError`, `InputError` …) and the
exception ONNX Runtime raises for that mistake (`onnxruntime.capi.onnxruntime_pybind11_state`),
so an ORT program's `except` clauses catch it. `args(values)` describes graph inputs/outputs as
ORT's NodeArg does: `type` "tensor(float)", "seq(tensor(float))", "optional(tensor(int64))",
"map(string,tensor(float))"; `shape` a list (a symbolic dimension as its name, an unknown one
None; [] for a value that is no tensor). `IOBinding` binds CPU inputs (numpy arrays, OrtValues,
or a pointer to host memory with its type and shape) and outputs (by name: the session
allocates; or into a host buffer / OrtValue the caller allocated, which must have the output's
shape and type), and gives `copy_outputs_to_cpu()` (numpy) and `get_outputs()` (OrtValues)
after `session.run_with_iobinding(binding)`; a device other than the CPU is one
InvalidArgument line.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnxruntime.capi import onnxruntime_pybind11_state as _ort

from woodpecker.errors import InputError, ModelError, RunError, WoodpeckerError


# -- errors: Woodpecker's and ONNX Runtime's types at once ---------------------------------
class NoSuchFile(ModelError, _ort.NoSuchFile):
    """The model file does not exist (ORT: NoSuchFile)."""


class InvalidProtobuf(ModelError, _ort.InvalidProtobuf):
    """The file or bytes are no ONNX model: garbage, truncated, a folder (ORT: InvalidProtobuf)."""


class InvalidModel(ModelError, _ort.InvalidArgument):
    """The bytes parse but hold no graph (ORT: InvalidArgument)."""


class LoadFailure(ModelError, _ort.Fail):
    """The model file cannot be read, or an external data file is missing, too short or
    outside the model's folder; or ONNX Runtime refuses the session options (ORT: Fail)."""


class ModelConfigError(ModelError, RuntimeError):
    """The model's `ort_config` metadata, read with ORT_LOAD_CONFIG_FROM_MODEL=1, is not JSON
    or sets an option to a value of another type or range (ORT: RuntimeError)."""


class InvalidArgument(InputError, _ort.InvalidArgument):
    """An unknown input or output name, a feed of the wrong dtype or shape (ORT:
    InvalidArgument)."""


class MissingInput(InputError, ValueError):
    """A model input not in the feed (ORT: ValueError)."""


class InvalidFeed(InputError, RuntimeError):
    """A feed no array of the input's type can be made of (ORT: RuntimeError)."""


class RunFailure(RunError, _ort.Fail):
    """A run stopped: `run_options.terminate` set (ORT: Fail)."""


class UnknownProvider(InputError, RuntimeError):
    """`set_providers` given a name no ONNX Runtime build knows (ORT: RuntimeError)."""


class NotRecorded(WoodpeckerError, _ort.Fail):
    """`get_provider_graph_assignment_info` without the session config entry that records it
    (ORT: Fail)."""


@dataclass(frozen=True)
class NodeArg:
    """An input or output as ONNX Runtime describes it."""

    name: str
    shape: list[int | str | None]
    type: str


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]


@dataclass(frozen=True)
class AssignedNode:
    """A node of the model, as `get_provider_graph_assignment_info` lists it."""

    name: str
    op_type: str
    domain: str = ""


@dataclass(frozen=True)
class AssignedSubgraph:
    """The nodes one engine runs as one step (ORT: OrtEpAssignedSubgraph)."""

    ep_name: str
    nodes: tuple[AssignedNode, ...] = field(default=())

    def get_nodes(self) -> list[AssignedNode]:
        return list(self.nodes)


def type_string(t: onnx.TypeProto) -> str:
    """ORT's name of a value type: "tensor(float)", "seq(tensor(int64))" …"""
    kind = t.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = onnx.TensorProto.DataType.Name(getattr(t, kind).elem_type).lower()
        return f"{'sparse_tensor' if kind == 'sparse_tensor_type' else 'tensor'}({elem})"
    if kind == "sequence_type":
        return f"seq({type_string(t.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_string(t.optional_type.elem_type)})"
    if kind == "map_type":
        key = onnx.TensorProto.DataType.Name(t.map_type.key_type).lower()
        return f"map({key},{type_string(t.map_type.value_type)})"
    return "undefined"


def np_dtype(vi: onnx.ValueInfoProto) -> "np.dtype | None":
    """The numpy dtype of an input's declared element type (None: none numpy has)."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    except (KeyError, TypeError, ValueError):
        return None


def string_array(v: np.ndarray) -> np.ndarray:
    """A str, bytes (UTF-8) or void array as the str objects ORT makes of it (bytes that are
    no UTF-8: ORT's UnicodeDecodeError)."""
    if v.dtype.kind == "V":
        v = v.view(f"S{v.dtype.itemsize}") if v.dtype.itemsize else v.astype("S")
    return np.char.decode(v, "utf-8").astype(object) if v.dtype.kind == "S" else \
        v.astype(object)


def args(values: list[onnx.ValueInfoProto]) -> list[NodeArg]:
    out = []
    for vi in values:
        shape: list[int | str | None] = []
        if vi.type.WhichOneof("value") == "tensor_type":
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                     for d in vi.type.tensor_type.shape.dim]
        out.append(NodeArg(vi.name, shape, type_string(vi.type)))
    return out


def cpu_memory_info() -> Any:
    """The memory info of a CPU input or output, as ORT's CPU session gives it."""
    return onnxruntime.OrtMemoryInfo("Cpu", onnxruntime.OrtAllocatorType.ORT_ARENA_ALLOCATOR,
                                     0, onnxruntime.OrtMemType.DEFAULT)


def cpu_ep_device() -> Any:
    """The OrtEpDevice ORT's CPU session gives for each input (None where this ORT lists
    none)."""
    devices = getattr(onnxruntime, "get_ep_devices", list)()
    return next((d for d in devices if d.ep_name == "CPUExecutionProvider"), None)


def _cpu(device_type: Any, what: str) -> None:
    name = str(getattr(device_type, "name", device_type)).lower()
    if name not in ("cpu", "0"):
        raise InvalidArgument(f"{what}: Woodpecker runs on the CPU; device {device_type!r} "
                              "cannot be bound")


def _host_array(ptr: int, element_type: Any, shape: Any) -> np.ndarray:
    """A numpy view of host memory at `ptr` holding `shape` elements of `element_type`."""
    dtype = np.dtype(element_type)
    count = int(np.prod(shape)) if len(shape) else 1
    buf = (ctypes.c_char * (count * dtype.itemsize)).from_address(int(ptr))
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(tuple(shape))


class IOBinding:
    """ONNX Runtime's IOBinding over CPU memory (see the module's docstring)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, np.ndarray | None] = {}   # None: the session allocates
        self._results: list[np.ndarray] = []

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        self._inputs[name] = arr_on_cpu

    def bind_input(self, name: str, device_type: Any, device_id: int, element_type: Any,
                   shape: Any, buffer_ptr: int) -> None:
        _cpu(device_type, f"input {name!r}")
        self._inputs[name] = _host_array(buffer_ptr, element_type, shape).copy()

    def bind_ortvalue_input(self, name: str, ortvalue: Any) -> None:
        _cpu(ortvalue.device_name(), f"input {name!r}")
        self._inputs[name] = ortvalue.numpy()

    def bind_output(self, name: str, device_type: Any = "cpu", device_id: int = 0,
                    element_type: Any = None, shape: Any = None,
                    buffer_ptr: int | None = None) -> None:
        _cpu(device_type, f"output {name!r}")
        self._outputs[name] = None if buffer_ptr is None else \
            _host_array(buffer_ptr, element_type, shape)

    def bind_ortvalue_output(self, name: str, ortvalue: Any) -> None:
        _cpu(ortvalue.device_name(), f"output {name!r}")
        self._outputs[name] = _host_array(ortvalue.data_ptr(), ortvalue.numpy().dtype,
                                          ortvalue.shape())

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def synchronize_inputs(self) -> None:
        """(CPU memory: nothing to wait for.)"""

    def synchronize_outputs(self) -> None:
        """(CPU memory: nothing to wait for.)"""

    def _run(self, run_options: Any) -> None:
        names = list(self._outputs)
        results = self._session.run(names, self._inputs, run_options) if names else []
        for name, result in zip(names, results):
            into = self._outputs[name]
            if into is not None:
                if into.shape != result.shape or into.dtype != result.dtype:
                    raise InvalidArgument(
                        f"output {name!r} is {result.dtype} {list(result.shape)}; the buffer "
                        f"bound for it is {into.dtype} {list(into.shape)}")
                np.copyto(into, result)
        self._results = results

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [np.array(r) for r in self._results]

    def get_outputs(self) -> list[Any]:
        return [onnxruntime.OrtValue.ortvalue_from_numpy(r) for r in self._results]
