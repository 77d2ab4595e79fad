"""NaN and infinity in generated kernels as ONNX Runtime (and the numpy reference) treat them.

Contract: an expression built with these helpers gives NaN wherever its input is NaN, and the
IEEE result for ±inf (exp(+inf) = inf, exp(-inf) = 0, clamp(±inf) = the bound), so a NaN in a
model's input is never turned into a plausible number by whichever engine a node ran on.

Why they are needed: Halide compiles floating point with fast-math assumptions (no NaNs, no
infinities) unless a whole pipeline is `strict_float`, which would also forbid the fused
multiply-adds the convolutions live on. Under those assumptions `max(x, 0)`, `min` and
`clamp` return the other operand for a NaN (Relu(NaN) = 0), and Halide's polynomial `exp`
returns 0 for +inf and for finite arguments beyond about 1e10 (`fast_exp`: NaN). Halide's own
`is_nan` does not help on a computed value: LLVM takes the fast-math flags of the instruction
that produced it (a conv's accumulating add) as a promise that it is never NaN and folds the
test away (a dense kernel's Clip still gave 6 for NaN with `select(is_nan(x), x, clamp(x))`).
So: clamps and max are `strict_float` selects written in the order that keeps NaN, which x86
compiles to one max or min each (testing the bits instead cost a depthwise conv 35 %); the
transcendental functions test the float's bits (`is_nan`), which no float flag speaks for.
Probe over the 64 template test cases (tests/engines/test_nonfinite.py's cases): 45 turned
NaN or inf inputs into other outputs than the reference's before these helpers. Winograd
(conv_winograd.py), whose transforms spread a non-finite input over its output tile, falls
back to a direct computation for such inputs.
"""

from __future__ import annotations

# exp of anything above this overflows float32 (ln(FLT_MAX) = 88.72), of anything below the
# lower bound underflows to 0 even as a denormal (ln(2^-149) = -103.3); clamping the argument
# there keeps Halide's polynomial in the range it is right in
EXP_HI, EXP_LO = 89.0, -104.0


INF_BITS = 0x7F800000   # float32 +inf: exponent all ones, mantissa zero


def _magnitude(hl, x):
    """x's bits without the sign."""
    return hl.reinterpret(hl.UInt(32), x) & 0x7FFFFFFF


def is_nan(hl, x):
    """x is NaN, tested on its bits: exponent all ones, mantissa not zero."""
    return _magnitude(hl, x) > INF_BITS


def is_nonfinite(hl, x):
    """x is NaN or ±inf, tested on its bits: exponent all ones."""
    return _magnitude(hl, x) >= INF_BITS


def keep_nan(hl, x, e):
    """`e`, or NaN where `x` is NaN."""
    return hl.select(is_nan(hl, x), x, e)


def _expr(hl, v):
    """`v` as an Expr (a select of two Func references would be a Tuple select)."""
    return hl.Expr(v) if isinstance(v, hl.FuncRef) else v


def clamp(hl, x, lo=None, hi=None):
    """x clamped to [lo, hi] (either bound may be None), NaN kept: strict selects, which
    x86 compiles to one max and one min with the operands in the order that keeps NaN."""
    x = _expr(hl, x)
    e = x if lo is None else hl.select(x < lo, lo, x)
    e = e if hi is None else hl.select(e > hi, hi, e)
    return e if lo is None and hi is None else hl.strict_float(e)


def fmax(hl, a, b):
    """The larger of a and b, a NaN passed over unless both are NaN (C's fmax, np.fmax)."""
    a, b = _expr(hl, a), _expr(hl, b)
    return hl.strict_float(hl.select((b > a) | (a != a), b, a))


def exp(hl, x, fast: bool = False):
    """e^x: inf above EXP_HI, 0 below EXP_LO, NaN kept (`fast`: Halide's fast_exp inside)."""
    inner = (hl.fast_exp if fast else hl.exp)(hl.clamp(x, EXP_LO, EXP_HI))
    return keep_nan(hl, x, inner)


# tanh and erf reach ±1 in float32 well before these (tanh(9) and erf(4) round to 1); Halide's
# versions of them are not right for infinite arguments
TANH_LIMIT, ERF_LIMIT = 9.0, 4.0


def tanh(hl, x):
    """tanh(x), ±1 for ±inf, NaN kept."""
    return keep_nan(hl, x, hl.tanh(hl.clamp(x, -TANH_LIMIT, TANH_LIMIT)))


def erf(hl, x):
    """erf(x), ±1 for ±inf, NaN kept."""
    return keep_nan(hl, x, hl.erf(hl.clamp(x, -ERF_LIMIT, ERF_LIMIT)))
