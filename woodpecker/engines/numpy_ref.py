"""The numpy engine: runs each op's reference. Always available, every op and dtype."""

from __future__ import annotations

from woodpecker.engines.base import NUMERIC, BuildContext, Engine, Kernel, full_inputs
from woodpecker.ir.graph import Node
from woodpecker.ops import OPS, run_reference


class NumpyEngine(Engine):
    name = "numpy"
    ops = frozenset(OPS)
    dtypes = NUMERIC

    def build(self, node: Node, ctx: BuildContext) -> Kernel:
        merge = full_inputs(node)

        def kernel(*args):
            return run_reference(node, merge(args))

        return kernel
