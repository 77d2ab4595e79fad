"""The schedule templates and how a template's kernel is called.

Every template module offers `KIND` (the task kind it computes), `supports(task)`,
`space(task, vector_registers)`, `views(task)`, `build(task, config, threads)` and optionally
`weights(task, config, w)` (argument 1 turned into the layout the kernel reads) or, for a
kernel with several weight arguments, `arguments(task, config, inputs)` (every argument).
Every template that supports a task is tuned for it and the fastest measured config wins
(Woodpecker-DL §2.2: several schedule templates per operator)."""

from __future__ import annotations

import importlib

TEMPLATES = tuple(f"woodpecker.engines.halide.{name}" for name in (
    "conv_direct", "conv_gemm", "conv_winograd", "conv_depthwise", "conv_separable",
    "conv_chain", "dense", "pool", "rows", "elementwise", "attention", "resize",
    "conv_transpose"))


def template_module(name: str):
    return importlib.import_module(name)


def templates_for(task) -> tuple[str, ...]:
    """The templates that can compute `task`."""
    modules = {t: template_module(t) for t in TEMPLATES}
    return tuple(t for t, m in modules.items() if m.KIND == task.kind and m.supports(task))


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
