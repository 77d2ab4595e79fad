"""`torch.compile(model, backend="woodpecker")`: each FX graph TorchDynamo captures is compiled
by Woodpecker and run as a plan; graph breaks stay with PyTorch, as for any backend.

    model = torch.compile(model, backend="woodpecker", options={"tune": "3m"})
    y = model(x)                   # first call: export, compile (and tune), then the plan

Registered through torch's `torch_dynamo_backends` entry point (pyproject.toml), so the name
works after `pip install` without importing woodpecker first.

Contract and choices:
- Import: the FX graph goes through torch's current ONNX exporter (frontend/torch_import.py)
  rather than a direct FX → Graph import, so there is one translation of aten ops to maintain —
  torch's — and the graph then takes Woodpecker's one frontend, its checks and passes. Dynamo
  lifts the module's parameters and buffers to graph inputs; they are bound as constants (the
  plan's weights: folding, fused epilogues, tuned kernels need them), and each call checks that
  none was replaced or modified in place (its storage and version counter): a changed weight
  compiles the graph again. Inference only: outputs carry no autograd history.
- Plans are InferenceSession's (woodpecker/session.py): cached by the exported model's sha256,
  shapes and options, so a second process (or a second `torch.compile`) loads the plan; tuning
  goes into the shared tuning log (or `tuning_log`), which later compiles reuse.
- A graph Woodpecker cannot take — an op it does not support, an exporter failure, inputs that
  are not tensors (dynamic shapes as SymInts), outputs that are not tensors — runs eagerly, with
  one line on stderr saying why.
- `options`: `tune` (a budget, e.g. "3m"), `tuning_log`, `engines`, `threads`, `cache`. A
  mistake in them (an unknown name, a value of the wrong type or range, an unknown engine) is
  the user's, not the graph's: one `OptionsError`/`EngineError` line, never a silent eager run.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from woodpecker.errors import OptionsError, WoodpeckerError, first_line

OPTIONS = ("tune", "tuning_log", "engines", "threads", "cache")


def woodpecker_backend(gm: Any, example_inputs: list, options: dict | None = None) -> Any:
    """The TorchDynamo backend: a callable standing for `gm` (its own forward where Woodpecker
    cannot compile the graph)."""
    if options is not None and not isinstance(options, Mapping):
        raise OptionsError(f"the woodpecker backend's options are a dict ({', '.join(OPTIONS)}), "
                           f"not a {type(options).__name__}")
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise OptionsError(f"unknown woodpecker backend option {unknown[0]!r}; known: "
                           f"{', '.join(OPTIONS)}")
    _check_options(opts)
    try:
        return _CompiledGraph(gm, example_inputs, opts)
    except OptionsError:    # (the tuning log a folder, …): the user's to fix, as above
        raise
    except Exception as e:  # noqa: BLE001 - any failure leaves the graph to PyTorch
        print(f"woodpecker: this graph runs in eager PyTorch: {first_line(e)}", file=sys.stderr)
        return gm.forward


def _check_options(opts: dict) -> None:
    """The backend's option values checked as the session will read them (threads 0 or None:
    the default), each mistake one line before any graph is captured."""
    from woodpecker.engines.registry import parse_engines
    from woodpecker.files import user_path
    from woodpecker.options import CompileOptions

    CompileOptions(engines=opts.get("engines"), threads=opts.get("threads") or None,
                   tune=opts.get("tune"), tuning_log=opts.get("tuning_log"))
    if opts.get("engines") is not None:
        parse_engines(opts["engines"])
    if opts.get("cache") is not None:
        user_path(opts["cache"], "the woodpecker backend's cache", OptionsError)


def _module_state(node: Any) -> bool:
    """Whether a placeholder is a module's parameter or buffer that Dynamo lifted."""
    source = getattr(node.meta.get("grapharg"), "source", None)
    kind = getattr(source, "guard_source", None)
    if kind is None:
        return False
    return any(getattr(kind, f, lambda: False)() for f in ("is_unspecialized_nn_module",
                                                          "is_specialized_nn_module"))


class _CompiledGraph:
    def __init__(self, gm: Any, example_inputs: list, options: dict) -> None:
        import torch

        self.gm, self.options = gm, options
        places = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(places) != len(example_inputs) or \
                not all(isinstance(t, torch.Tensor) for t in example_inputs):
            raise WoodpeckerError("the graph has inputs that are not tensors")
        outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        self.single = not isinstance(outs, (tuple, list))
        outs = [outs] if self.single else list(outs)
        if not all(hasattr(o, "op") and isinstance(o.meta.get("example_value"), torch.Tensor)
                   for o in outs):
            raise WoodpeckerError("the graph has outputs that are not tensors")
        self.state = [i for i, n in enumerate(places) if _module_state(n)]
        self.data = [i for i in range(len(places)) if i not in self.state]
        self._lock = threading.Lock()
        self._build(example_inputs)

    def _build(self, args: list) -> None:
        from woodpecker.frontend.torch_import import export_module
        from woodpecker.session import InferenceSession

        bound = _bind(self.gm, {i: args[i] for i in self.state}, len(args))
        onnx_bytes = export_module(bound, tuple(args[i] for i in self.data),
                                   input_names=[f"input{k}" for k in range(len(self.data))],
                                   exporters=("dynamo",))
        o = self.options
        self.session = InferenceSession(
            onnx_bytes, tune=o.get("tune"), tuning_log=o.get("tuning_log"),
            engines=o.get("engines"), threads=o.get("threads"), cache=o.get("cache"))
        self.names = [i.name for i in self.session.get_inputs()]
        self.marks = [_mark(args[i]) for i in self.state]
        self.digest = hashlib.sha256(onnx_bytes).hexdigest()

    def __call__(self, *args: Any) -> Any:
        import torch

        if [_mark(args[i]) for i in self.state] != self.marks:
            with self._lock:     # a weight changed: compile again
                if [_mark(args[i]) for i in self.state] != self.marks:
                    self._build(list(args))
        feeds = {name: np.ascontiguousarray(args[i].detach().cpu().numpy())
                 for name, i in zip(self.names, self.data)}
        outs = [torch.from_numpy(a) for a in self.session.run(None, feeds)]
        return outs[0] if self.single else tuple(outs)


def _mark(t: Any) -> tuple[int, int]:
    """A tensor's storage and in-place version: a different pair means other values."""
    return t.data_ptr(), t._version


def _bind(gm: Any, state: dict[int, Any], n: int) -> Any:
    """A module computing `gm` from its non-state inputs, the state held as buffers (so the
    exporter makes them initializers)."""
    import torch

    class Bound(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gm = gm
            self.slots = {}
            for k, (i, t) in enumerate(sorted(state.items())):
                self.register_buffer(f"state{k}", t.detach().clone())
                self.slots[i] = f"state{k}"

        def forward(self, *xs):
            it = iter(xs)
            return self.gm(*[getattr(self, self.slots[i]) if i in self.slots else next(it)
                             for i in range(n)])

    return Bound().eval()
