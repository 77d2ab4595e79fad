"""The schedule templates and how a template's kernel is called.

Every template module offers `KIND` (the task kind it computes; `KINDS`, where it computes
several: the int8 conv templates also compute qmatmul tasks, 1×1 convs), `supports(task)`,
`space(task, vector_registers)`, `views(task)`, `build(task, config, threads)` and optionally
`weights(task, config, w)` (argument 1 turned into the layout the kernel reads) or, for a
kernel with several weight arguments, `arguments(task, config, inputs)` (every argument).
Every template that supports a task is tuned for it and the fastest measured config wins
(Woodpecker-DL §2.2: several schedule templates per operator)."""

from __future__ import annotations

import functools
import importlib
import os

from woodpecker.errors import PlanError

# A template's identity is its short name, stored in tuning logs and plans; where its code
# lives is this table's business alone (a module moved or renamed changes its entry here, and
# every log and plan written before still loads). Logs and plans written before identities
# were short name the module path `LEGACY_PREFIX` + name: read as that name.
MODULES: dict[str, str] = {name: f"woodpecker.engines.halide.{name}" for name in (
    "conv_direct", "conv_gemm", "conv_winograd", "conv_depthwise", "conv_separable",
    "conv_chain", "dense", "pool", "rows", "elementwise", "attention", "resize",
    "conv_transpose", "qconv_gemm", "qconv_amx", "qconv_depthwise", "qdense_vnni", "qdense_amx",
    "dense_bf16")}
TEMPLATES = tuple(MODULES)
LEGACY_PREFIX = "woodpecker.engines.halide."
# Templates of one's own, beside these (tried by name, not tuned for every task): `name=module`
# pairs, comma-separated — the tests' deliberately faulty template, a template being developed.
# Read at each look-up, so the tuner's worker processes see what their parent set.
EXTRA_ENV = "WOODPECKER_TEMPLATES"


def _modules() -> dict[str, str]:
    return _table(os.environ.get(EXTRA_ENV, ""))


@functools.cache
def _table(extra: str) -> dict[str, str]:
    """`MODULES` and the templates `extra` names (parsed once per value: a tuning log's every
    record is looked up)."""
    pairs = [p.split("=", 1) for p in extra.split(",") if "=" in p]
    return {**{k.strip(): v.strip() for k, v in pairs}, **MODULES}


def known_template(name: str) -> str | None:
    """The identity `name` stands for (a short name, or the module path an older log or plan
    wrote), or None where this Woodpecker has no such template."""
    short = name[len(LEGACY_PREFIX):] if name.startswith(LEGACY_PREFIX) else name
    return short if short in _modules() else None


def template_name(name: str) -> str:
    """`known_template`, or one PlanError line naming the unknown template."""
    short = known_template(name)
    if short is None:
        raise PlanError(f"unknown kernel template {name!r} (this Woodpecker has: "
                        f"{', '.join(_modules())})")
    return short


def template_module(name: str):
    """The module of template `name` (`template_name`): only modules of this table (and of
    `EXTRA_ENV`) are imported, never a string read from a file."""
    return importlib.import_module(_modules()[template_name(name)])


def templates_for(task) -> tuple[str, ...]:
    """The templates that can compute `task`: of its kind, computing in its `compute` type (a
    module's `COMPUTE`, float32 where it names none) and supporting it."""
    modules = {t: template_module(t) for t in TEMPLATES}
    compute = getattr(task, "compute", "float32")
    return tuple(t for t, m in modules.items() if task.kind in getattr(m, "KINDS", (m.KIND,))
                 and compute in getattr(m, "COMPUTE", ("float32",)) and m.supports(task))


def weight_expanding() -> frozenset[str]:
    """The templates whose kernels keep more bytes of weights than the model's own
    (`EXPANDS_WEIGHTS`: Winograd's transformed filters), which a memory plan goes without."""
    return frozenset(t for t in TEMPLATES
                     if getattr(template_module(t), "EXPANDS_WEIGHTS", False))


def kernel_arguments(template, task, config: dict, inputs: list) -> list:
    """The task's arguments (`random_inputs` order, argument 1 in the task's own layout) →
    those of `template`'s kernel built with `config`: the weights in the layout the kernel
    reads, computed once per kernel, never per call. A None (an argument that arrives at run
    time) is left as it is (a template's `arguments` does the same)."""
    arguments = getattr(template, "arguments", None)
    if arguments is not None:
        return arguments(task, config, list(inputs))
    weights = getattr(template, "weights", None)
    if weights is None or len(inputs) < 2 or inputs[1] is None:
        return list(inputs)
    return [inputs[0], weights(task, config, inputs[1]), *inputs[2:]]
