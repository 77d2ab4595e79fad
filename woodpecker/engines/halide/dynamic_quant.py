"""What the qdense templates (qdense_vnni, qdense_amx; tasks/qdense.py) share: their arguments,
the per-call quantization of the float activations, and the float epilogue.

Quantization (ONNX's DynamicQuantizeLinear, exact): per column the minimum and maximum over the
rows (vectorised along the row), then over the columns; lo = min(0, ·), hi = max(0, ·), scale =
(hi − lo) / 255 (1 where equal), zp = round(clamp(−lo / scale, 0, 255)), q = clamp(round(x /
scale) + zp, 0, 255) — `strict_float`, so the division is a division and each rounding is the
reference's (half to even). `q` is materialised once per call (M·K bytes) with `channels`
columns a row, those past K zero (they meet zero-padded weights).

Epilogue: y[n, m] = float32(acc − zp·Σw[n]) · (scale · σ[n]) + β[n], then the task's fused
steps (conv_common.epilogue_expr; residuals (M, N) arguments after β).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from woodpecker.engines.halide.conv_common import EPILOGUE_OPS, epilogue_expr
from woodpecker.tasks.qdense import QDenseTask

LEVELS = 255.0


@dataclass
class Params:
    """The kernel's arguments (QDenseTask.kernel_arguments' order): x (M, K) float32, the
    packed weights (`weight_dims` dimensions), Σw, σ and β per column, the residuals."""

    x: object
    w: object
    colsum: object
    sigma: object
    beta: object
    residuals: list = field(default_factory=list)

    def all(self) -> list:
        return [self.x, self.w, self.colsum, self.sigma, self.beta, *self.residuals]


def supported(task: QDenseTask) -> bool:
    """The task's epilogue steps are ones the templates compute."""
    return all(step[0] in EPILOGUE_OPS for step in task.epilogue)


def arguments(task: QDenseTask, config: dict, inputs: list, weights) -> list:
    """The node's inputs → the kernel's (QDenseTask.kernel_arguments), the weights packed by
    the template's `weights(task, config, w)`."""
    args = task.kernel_arguments(inputs)
    return [args[0], weights(task, config, args[1]), *args[2:]]


def views(task: QDenseTask) -> list:
    """x seen as (M, K) — the node's leading dimensions flattened —, the residuals as (M, N),
    the rest as they are."""
    return [(task.m, task.k)] + [None] * 4 + [(task.m, task.n)] * task.residuals + [None]


def params(hl, task: QDenseTask, weight_dims: int) -> Params:
    f32 = hl.Float(32)
    return Params(hl.ImageParam(f32, 2, "x"), hl.ImageParam(hl.Int(8), weight_dims, "w"),
                  hl.ImageParam(hl.Int(32), 1, "colsum"), hl.ImageParam(f32, 1, "sigma"),
                  hl.ImageParam(f32, 1, "beta"),
                  [hl.ImageParam(f32, 2, f"residual{i}") for i in range(task.residuals)])


@dataclass
class Quantized:
    q: object          # Func (channel, row) → uint8
    scale: object      # Func () → float32
    zp: object         # Func () → float32 (a whole number in [0, 255])


def quantized(hl, task: QDenseTask, x, channels: int) -> Quantized:
    """x's dynamic quantization, scheduled: the column extrema, the scalars and `q` each
    computed once per call (`q` with `channels` ≥ K columns a row, parallel over rows)."""
    c, p = hl.Var("c"), hl.Var("p")
    rows = hl.RDom([(0, task.m)], "rows")
    cols = hl.RDom([(0, task.k)], "cols")
    col_lo, col_hi = hl.Func("col_lo"), hl.Func("col_hi")
    col_lo[c] = hl.minimum(x[c, rows.x])
    col_hi[c] = hl.maximum(x[c, rows.x])
    lo, hi, scale, zp = (hl.Func(n) for n in ("lo", "hi", "scale", "zp"))
    lo[()] = hl.min(hl.f32(0), hl.minimum(col_lo[cols.x]))
    hi[()] = hl.max(hl.f32(0), hl.maximum(col_hi[cols.x]))
    scale[()] = hl.select(hi[()] == lo[()], hl.f32(1),
                          hl.strict_float((hi[()] - lo[()]) / hl.f32(LEVELS)))
    zp[()] = hl.round(hl.clamp(hl.strict_float(hl.f32(0) - lo[()] / scale[()]),
                               hl.f32(0), hl.f32(LEVELS)))
    q = hl.Func("q")
    value = hl.strict_float(hl.round(x[hl.min(c, task.k - 1), p] / scale[()]) + zp[()])
    q[c, p] = hl.select(c < task.k, hl.u8(hl.clamp(value, hl.f32(0), hl.f32(LEVELS))),
                        hl.u8(0))
    for f in (col_lo, col_hi):          # vectors within the K columns (shifted inwards)
        f.compute_root().vectorize(c, min(16, task.k))
    for f in (lo, hi, scale, zp):
        f.compute_root()
    q.bound(c, 0, channels).compute_root().vectorize(c, min(16, channels)).parallel(p)
    return Quantized(q, scale, zp)


def output(hl, task: QDenseTask, acc, co, p, prm: Params, quant: Quantized):
    """The output at column `co` of row `p` from the integer sum `acc` (Σ q·w, int32)."""
    total = acc - hl.i32(quant.zp[()]) * prm.colsum[co]
    y = hl.f32(total) * (quant.scale[()] * prm.sigma[co]) + prm.beta[co]
    return epilogue_expr(hl, y, task.epilogue, prm.residuals, (co, p))
