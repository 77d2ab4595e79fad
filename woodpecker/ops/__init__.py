"""Op definitions: importing this package registers every op in `registry.OPS`."""

from woodpecker.ops import (  # noqa: F401
    attention,
    chain,
    conv,
    elementwise,
    fused,
    matmul,
    norm,
    pool,
    separable,
    shape,
)
from woodpecker.ops.registry import OPS, OpDef, run_reference

SUPPORTED = sorted(name for name in OPS if not name.startswith("Fused"))

__all__ = ["OPS", "OpDef", "SUPPORTED", "run_reference"]
