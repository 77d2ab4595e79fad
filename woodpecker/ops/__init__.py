"""Op definitions: importing this package registers every op in `registry.OPS`."""

from woodpecker.ops import (  # noqa: F401
    attention,
    chain,
    conv,
    conv_integer,
    conv_transpose,
    elementwise,
    fused,
    indexing,
    logic,
    matmul,
    norm,
    opaque,
    pool,
    quant,
    quant_conv,
    quant_dense,
    quant_matmul,
    resize,
    separable,
    shape,
)
from woodpecker.ops.registry import OPS, OpDef, run_reference

# AGO's intensive fusions (passes/fuse_chain.py, passes/fuse_attention.py): selection weighs
# each against its parts on their own kernels (selection/fusion.py)
INTENSIVE = frozenset({chain.OP, attention.OP})
# Woodpecker's own ops (made by passes, never read from a model)
INTERNAL = frozenset({"StridedView", opaque.OP, quant_matmul.OP, quant_dense.OP})
SUPPORTED = sorted(name for name in OPS if not name.startswith("Fused") and name not in INTERNAL)

__all__ = ["INTENSIVE", "OPS", "OpDef", "SUPPORTED", "run_reference"]
