"""The Halide engine: runs the nodes that system-level selection gave a tuned kernel
(WPK §2.5) — convolutions (float32, and int8 QLinearConv), dense products, pools, softmax,
layer and RMS normalisation and fused element-wise groups.

A node it runs has a `Choice.kernel` (engines/choice.py): the task, the template and tuned
config, and the file name of the compiled kernel — in the kernel cache while compiling, in the
plan's `kernels/` folder once saved (this engine's artifacts, with a copy of the Halide
runtime, each checked by sha256 on load). A loaded plan's kernels and runtime are mapped from
sealed private copies of the very bytes whose sha256 was checked (files.sealed_copy), each
named by a plain file name inside `kernels/`: never from a path a racing writer could swap,
or one leading out of the plan folder. An NHWC task's activations and output are NHWC
(`Value.layout`; assembly inserts the conversions); a dense task reads the node's own arrays.
Constant inputs are turned to the kernel's layout once, when the kernel is built.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from woodpecker.engines import names
from woodpecker.engines.base import Bound, BuildContext, Capabilities, Engine, Kernel
from woodpecker.engines.choice import Choices, KernelSpec
from woodpecker.errors import EngineError, PlanError
from woodpecker.files import inside, install, plain_name, sealed_copy, sha256_file, verified_bytes
from woodpecker.ir.graph import Graph, Node
from woodpecker.ir.steps import StepIO
from woodpecker.tasks import NHWC, spec_task, task_from_node, task_kinds

KERNELS_DIR = names.KERNELS_DIR   # a saved plan's compiled kernels and Halide runtime


class HalideEngine(Engine):
    name = names.HALIDE
    ops = frozenset().union(*(kind.ops for kind in task_kinds().values()))
    dtypes = frozenset({"float32"})
    layouts = frozenset({"", NHWC})
    caps = Capabilities(generated=True)

    # integer convolutions and static int8 MatMuls (tasks/qconv.py): 8-bit activations and
    # weights, int32 biases, float32 scales; dynamically quantized MatMuls (tasks/qdense.py);
    # element-wise groups with Q/DQ steps; max pools over 8-bit tensors
    INTEGER_OPS = frozenset({"QLinearConv", "FusedElementwise", "MaxPool",
                             "DynamicQuantizeMatMul", "FusedDynamicQuantizeMatMul",
                             "FusedQLinearConv", "QLinearDense", "FusedQLinearDense"})
    INTEGER_DTYPES = frozenset({"uint8", "int8", "int32", "float32"})

    def __init__(self) -> None:
        # per loaded plan folder: each kernel's (and the runtime's) sealed checked copy
        self._loaded: dict[Path, dict[str, Path]] = {}

    def available(self) -> bool:
        return importlib.util.find_spec("halide") is not None

    def dtypes_for(self, node: Node) -> frozenset[str]:
        return self.INTEGER_DTYPES if node.op in self.INTEGER_OPS else self.dtypes

    def accepts(self, node: Node, ctx: BuildContext) -> bool:
        """A task kind computes the node (whether a tuned kernel exists is selection's call)."""
        return task_from_node(node) is not None

    def build(self, node: Node, ctx: BuildContext, kernel: KernelSpec | None = None) -> Kernel:
        from woodpecker.engines.halide.aot import RUNTIME_NAME, AotKernel, cached_kernel
        from woodpecker.engines.halide.templates import kernel_arguments, template_module

        if kernel is None:
            raise EngineError(f"node {node.name!r} has no tuned Halide kernel to run")
        task = spec_task(kernel.to_json())
        template = template_module(kernel.template)
        present = [i for i, v in enumerate(node.inputs) if v is not None]
        constants = [None if node.inputs[i].data is None else task.constant(node, i)
                     for i in present]
        args = kernel_arguments(template, task, kernel.config, constants)
        slots = [j for j, a in enumerate(args) if a is None]
        if ctx.artifacts is not None:
            saved = self._loaded.get(ctx.artifacts.resolve(), {})
            if kernel.file not in saved:
                raise PlanError(f"plan has no checked Halide kernel {kernel.file!r} for node "
                                f"{node.name!r}")
            path, runtime = saved[kernel.file], saved[RUNTIME_NAME]
        else:
            path, runtime = cached_kernel(kernel.file), None
        run = AotKernel(path, len(args), task.out_shape, ctx.threads, runtime,
                        template.views(task), getattr(task, "out_dtype", np.float32),
                        name=kernel.file)
        shape = tuple(node.outputs[0].shape)

        def arguments(arrays) -> list:
            full = list(args)
            for j, a in zip(slots, arrays):
                full[j] = a if _innermost_dense(a) else np.ascontiguousarray(a)
            return full

        def output(outs):
            out = outs[0]
            return out if out.shape == run.out_shape else out.reshape(run.out_shape)

        def call(*arrays):
            return [run(*arguments(arrays)).reshape(shape)]

        def into(outs, *arrays):
            # The same arena view every run (AotKernel caches its buffer).
            run(*arguments(arrays), out=output(outs))

        def bind(outs, *arrays) -> Bound | None:
            if not all(_innermost_dense(a) for a in arrays):
                return None   # `arguments` would bind a copy
            bound = run.bind(*arguments(arrays), out=output(outs))
            return Bound(bound, _join if bound.chainable else None, bound, _together)

        return Kernel(call, into, bind)

    def activate(self, threads: int) -> None:
        from woodpecker.engines.halide.aot import use_threads

        use_threads(threads)

    def rest_hook(self):
        """Woodpecker's pool stops spinning before a library with its own threads runs
        (aot.resting_hook)."""
        from woodpecker.engines.halide.aot import resting_hook

        return resting_hook()

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

    def save_artifacts(self, directory: Path, graph: Graph, choices: Choices,
                       steps: list[StepIO], source: Path | None = None) -> dict:
        """Copy each step's compiled kernel and the Halide runtime into `kernels/` (from the
        kernel cache, or from the plan folder the plan was loaded from)."""
        from woodpecker.engines.halide.aot import RUNTIME_NAME, cached_kernel, runtime_path

        loaded = self._loaded.get(source.resolve(), {}) if source is not None else {}

        def origin(file: str) -> Path:
            # a loaded plan's checked copies, not its folder's files as they are now
            return cached_kernel(file) if source is None else loaded[file]

        files = {}
        for step in steps:
            spec = choices[step.nodes[0].name].kernel
            if spec is not None and spec.file not in files:
                dst = install(origin(spec.file), directory / KERNELS_DIR / spec.file,
                              root=directory)
                files[spec.file] = sha256_file(dst)
        runtime = install(runtime_path() if source is None else origin(RUNTIME_NAME),
                          directory / KERNELS_DIR / RUNTIME_NAME, root=directory)
        return {**self.artifact_meta(), "runtime_sha256": sha256_file(runtime),
                "kernels": files}

    def artifact_files(self, section: dict) -> list[str]:
        from woodpecker.engines.halide.aot import RUNTIME_NAME

        return [f"{KERNELS_DIR}/{f}" for f in (*section.get("kernels", {}), RUNTIME_NAME)]

    def load_artifacts(self, directory: Path, section: dict, choices: Choices) -> None:
        from woodpecker.engines.halide.aot import RUNTIME_NAME, prefer_runtime

        files = section["kernels"]
        for name, choice in choices.items():
            if choice.engine == self.name:
                if choice.kernel is None or choice.kernel.file not in files:
                    raise PlanError(f"plan.json: Halide node {name!r} names no saved kernel")
        checked = {}
        for file, sha in {**files, RUNTIME_NAME: section["runtime_sha256"]}.items():
            what = "Halide runtime" if file == RUNTIME_NAME else "kernel"
            path = inside(directory, f"{KERNELS_DIR}/{plain_name(file, what)}", what)
            checked[file] = sealed_copy(verified_bytes(path, sha, what), file)
        self._loaded[directory.resolve()] = checked
        prefer_runtime(checked[RUNTIME_NAME])


def _join(bounds: list[Bound]):
    """Consecutive bound Halide calls as one foreign call (aot.BoundCall.chain)."""
    from woodpecker.engines.halide.aot import BoundCall

    return BoundCall.chain([b.handle for b in bounds])


def _together(bounds: list[Bound]) -> Bound | None:
    """Independent bound Halide calls run at the same time on the pool, one thread each
    (aot.BoundCall.stage), as one bound call that chains with the steps around it."""
    from woodpecker.engines.halide.aot import BoundCall

    stage = BoundCall.stage([b.handle for b in bounds])
    return None if stage is None else Bound(stage, _join if stage.chainable else None, stage)


def _innermost_dense(a: np.ndarray) -> bool:
    """Halide kernels read any strides but a unit innermost one: an NHWC channel slice (a slice
    view, assembly/inplace.py) is read where it lies. Templates that see an activation in
    another shape (`views`) reshape it, which fails loudly for such a slice (aot._viewed)."""
    return a.ndim == 0 or a.strides[-1] == a.itemsize or a.shape[-1] == 1
