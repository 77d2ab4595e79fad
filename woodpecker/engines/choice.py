"""Per-node decisions: which engine runs a node, with which generated kernel, and why.

Contract: a plan holds one `Choice` per node, keyed by node name (`Choices`), serialized in
plan.json apart from the node's ONNX attributes. Selection (selection/) writes them, assembly
(assembly/) reads and extends them (inserted layout conversions), engines build from them. A
`KernelSpec` names a generated kernel by what it computes (task), how (template and config)
and the file its compiled object is stored in (the kernel cache while compiling, the plan's
own folder once saved); `finalists` lives only during selection (selection/in_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class KernelSpec:
    template: str          # the template's identity, e.g. conv_direct (halide/templates.py)
    kind: str              # the task kind (woodpecker/tasks)
    config: dict[str, Any]
    task: dict[str, Any]   # the task as JSON (Task.to_json)
    file: str              # the compiled shared object's file name

    def to_json(self) -> dict[str, Any]:
        return {"template": self.template, "kind": self.kind, "config": self.config,
                "task": self.task, "file": self.file}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "KernelSpec":
        """A plan's kernel; an older plan's template module path read as its identity, an
        unknown template one PlanError line."""
        from woodpecker.engines.halide.templates import template_name

        return cls(template_name(str(d["template"])), str(d["kind"]), dict(d["config"]),
                   dict(d["task"]), str(d["file"]))


@dataclass
class Choice:
    """`engine` runs the node; `kernel` is its tuned kernel (set on a node that lost to a
    library too, while selection may still try it); `why` says in a few words how the choice
    was made."""

    engine: str
    kernel: KernelSpec | None = None
    why: str = ""
    finalists: dict[str, KernelSpec] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"engine": self.engine, "why": self.why}
        if self.kernel is not None:
            d["kernel"] = self.kernel.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Choice":
        kernel = d.get("kernel")
        return cls(str(d["engine"]), None if kernel is None else KernelSpec.from_json(kernel),
                   str(d.get("why", "")))


Choices = dict[str, Choice]   # node name -> its choice


def engines_of(nodes, choices: Choices) -> list[str]:
    """The engine of each of `nodes`, in order."""
    return [choices[n.name].engine for n in nodes]
