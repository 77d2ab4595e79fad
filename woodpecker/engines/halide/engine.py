"""The Halide engine: runs the nodes that system-level selection gave a tuned kernel
(WPK §2.5) — convolutions, dense products, pools, softmax and layer normalisation.

A node it runs carries `attrs["halide"] = {"template", "kind", "config", "task", "kernel"}`:
the task, the template and tuned config, and the compiled kernel's path (the kernel cache, or
the plan's own copy; a loaded plan also names its copy of the Halide runtime, `runtime`).
An NHWC task's activations and output are NHWC (`Value.layout`; the layout pass inserts the
conversions); a dense task reads the node's own arrays. Constant inputs are turned to the
kernel's layout once, when the kernel is built.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from woodpecker.engines.base import BuildContext, Engine, Kernel
from woodpecker.ir.graph import Node
from woodpecker.tasks import NHWC, task_kinds


class HalideEngine(Engine):
    name = "halide"
    ops = frozenset().union(*(kind.ops for kind in task_kinds().values()))
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

    def artifact_meta(self) -> dict:
        from woodpecker.engines.halide.aot import halide_version, target_string

        return {"halide_version": halide_version(), "target": target_string()}

    def incompatibility(self, meta: dict) -> str | None:
        """Kernels built with another Halide release may not link against this one's runtime
        (its ABI is not stable across releases)."""
        from woodpecker.engines.halide.aot import halide_version

        built, here = meta.get("halide_version"), halide_version()
        if built != here:
            return (f"its Halide kernels were built with Halide {built}, this host has Halide "
                    f"{here}: recompile the model here")
        return None

    def activate(self, threads: int) -> None:
        from woodpecker.engines.halide.aot import use_threads

        use_threads(threads)

    def build(self, node: Node, ctx: BuildContext) -> Kernel:
        from woodpecker.engines.halide.aot import AotKernel
        from woodpecker.engines.halide.templates import kernel_arguments, template_module
        from woodpecker.tasks import spec_task

        spec = node.attrs["halide"]
        task = spec_task(spec)
        template = template_module(spec["template"])
        present = [i for i, v in enumerate(node.inputs) if v is not None]
        constants = [None if node.inputs[i].data is None else task.constant(node, i)
                     for i in present]
        args = kernel_arguments(template, task, spec["config"], constants)
        slots = [j for j, a in enumerate(args) if a is None]
        runtime = spec.get("runtime")
        run = AotKernel(spec["kernel"], len(args), task.out_shape, ctx.threads,
                        Path(runtime) if runtime else None, template.views(task))
        shape = tuple(node.outputs[0].shape)

        def arguments(arrays) -> list:
            full = list(args)
            for j, a in zip(slots, arrays):
                full[j] = a if _innermost_dense(a) else np.ascontiguousarray(a)
            return full

        def kernel(*arrays):
            return [run(*arguments(arrays)).reshape(shape)]

        def output(outs):
            out = outs[0]
            return out if out.shape == run.out_shape else out.reshape(run.out_shape)

        def into(outs, *arrays):
            # The same arena view every run (AotKernel caches its buffer).
            run(*arguments(arrays), out=output(outs))

        def bind(outs, *arrays):
            if not all(_innermost_dense(a) for a in arrays):
                return None   # `arguments` would bind a copy
            return run.bind(*arguments(arrays), out=output(outs))

        kernel.into, kernel.bind = into, bind
        return kernel


def _innermost_dense(a: np.ndarray) -> bool:
    """Halide kernels read any strides but a unit innermost one: an NHWC channel slice (a slice
    view, schedule/aliases.py) is read where it lies. Templates that see an activation in
    another shape (`views`) reshape it, which fails loudly for such a slice (aot._viewed)."""
    return a.ndim == 0 or a.strides[-1] == a.itemsize or a.shape[-1] == 1
