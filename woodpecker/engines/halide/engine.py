"""The Halide engine: runs Conv/FusedConv nodes with the tuned kernel that system-level
selection attached to them (WPK §2.5).

A node it runs carries `attrs["halide"] = {"template", "config", "task", "kernel"}`: the task
(NHWC shapes), the template and tuned config, and the compiled kernel's path (the kernel cache,
or the plan's own copy; a loaded plan also names its copy of the Halide runtime, `runtime`).
Its data input, residuals and output are NHWC (`Value.layout`); the layout pass inserts the
conversions. Weights are turned to the template's layout once, when the kernel is built.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from woodpecker.engines.base import BuildContext, Engine, Kernel
from woodpecker.ir.graph import Node

NHWC = "NHWC"


class HalideEngine(Engine):
    name = "halide"
    ops = frozenset({"Conv", "FusedConv"})
    dtypes = frozenset({"float32"})
    layouts = frozenset({"", NHWC})

    def available(self) -> bool:
        try:
            import halide  # noqa: F401
        except ImportError:
            return False
        return True

    def accepts(self, node: Node, ctx: BuildContext) -> bool:
        return "halide" in node.attrs

    def build(self, node: Node, ctx: BuildContext) -> Kernel:
        from woodpecker.engines.halide.aot import AotKernel
        from woodpecker.engines.halide.conv_common import kernel_arguments
        from woodpecker.tune.extract import template_module
        from woodpecker.tune.task import ConvTask

        spec = node.attrs["halide"]
        task = ConvTask.from_json(spec["task"])
        template = template_module(spec["template"])
        n_in = 2 + task.has_bias + sum(1 for s in task.epilogue if s[0] == "Add")
        runtime = spec.get("runtime")
        run = AotKernel(spec["kernel"], n_in, (task.n, task.out_h, task.out_w, task.k),
                        ctx.threads, Path(runtime) if runtime else None, template.views(task))
        hwio = np.ascontiguousarray(node.inputs[1].data.transpose(2, 3, 1, 0))
        bias = [node.inputs[2].data] if task.has_bias else []
        params = kernel_arguments(template, task, spec["config"], [None, hwio, *bias])[1:]

        def kernel(x, *residuals):
            return [run(np.ascontiguousarray(x), *params,
                        *map(np.ascontiguousarray, residuals))]

        def into(outs, x, *residuals):
            run(np.ascontiguousarray(x), *params, *map(np.ascontiguousarray, residuals),
                out=outs[0].reshape(run.out_shape))

        kernel.into = into
        return kernel
