"""Algorithm pieces shared by the conv templates (the dense and pool templates reuse the
epilogue, register bound and window space): the kernel's parameters (input, weights, optional
bias, one residual per epilogue Add, the prologue's per-channel vectors), the zero-padded input
with the prologue applied, and the fused epilogue."""

from __future__ import annotations

import numpy as np

from woodpecker.engines.halide import ieee
from woodpecker.engines.halide.template_parts import PARALLEL, TILE_PAD, halide_type, stored
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

EPILOGUE_OPS = {"Add", "Mul", "Relu", "Clip", "Sigmoid", "HardSigmoid", "Tanh", "HardSwish",
                "Silu", "Gelu"}


class ConvInputs:
    """Parameters in `ConvTask.random_inputs` order: x (NHWC), w, bias if any, residuals, the
    prologue's per-channel vectors (NHWC (N, 1, 1, C)).
    `prefix` starts their names (a kernel computing two convs has two sets)."""

    def __init__(self, hl, task: ConvTask, weight_dims: int = 4,
                 reads_inside: bool = True, out_dims: int = 4, prefix: str = "",
                 scale_weights: bool = False) -> None:
        """`scale_weights` (the `scale` knob, see `scale_knob`): a channel-scale prologue is
        folded into the weights (`weights`) instead of applied to the input."""
        self.hl, self.task = hl, task
        self.folded = scale_weights and channel_scale(task)
        # float32, or a GPU plan's float16 storage: each argument's parameter, and what the
        # algorithm reads (x, w, b, residuals, vectors: the parameter, or it widened)
        dtype = "float16" if getattr(task, "dtype", "") == "float16" else "float32"
        params, self.x = stored(hl, dtype, 4, prefix + "x")
        params = [params]
        w, self.w = stored(hl, dtype, weight_dims, prefix + "w")
        params.append(w)
        self.b = None
        if task.has_bias:
            b, self.b = stored(hl, dtype, 1, prefix + "b")
            params.append(b)
        # Residuals are indexed like the output: 3-D for flattened-pixel templates.
        self.residuals, self.vectors = [], []
        for i in range(sum(1 for s in task.epilogue if s[0] == "Add")):
            r, read = stored(hl, dtype, out_dims, f"{prefix}r{i}")
            params.append(r)
            self.residuals.append(read)
        for i in range(task.vectors):
            v, read = stored(hl, dtype, 4, f"{prefix}v{i}")
            params.append(v)
            self.vectors.append(read)
        self.params = params
        # Unpadded layers (1×1 and valid convs) read only inside the image unless the schedule
        # rounds pixel tiles up (`reads_inside` false): bounds-check just the channels then,
        # which a skewed materialised input reads past.
        spatial = any(task.pads) or not reads_inside
        bounds = [(0, task.c)] + ([(0, task.w), (0, task.h), (0, task.n)] if spatial else [])
        self.padded = hl.BoundaryConditions.constant_exterior(self._nhwc(), 0.0, bounds)

    def _nhwc(self):
        """The input as the algorithm indexes it, [c, x, y, n]: the parameter itself, or an
        NCHW parameter read across (a model input's few channels, `ConvTask.x_layout`), with
        the task's prologue applied (before the zero padding, as the conv pads its input)."""
        prologue = () if self.folded else self.task.prologue
        if not self.task.reads_nchw and not prologue:
            return self.x
        hl = self.hl
        c, x, y, n = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n")
        f = hl.Func("x_nchw" if self.task.reads_nchw else "x_prologue")
        value = self.x[x, y, c, n] if self.task.reads_nchw else self.x[c, x, y, n]
        vectors = [v[c, 0, 0, n] for v in self.vectors]
        f[c, x, y, n] = program_expr(
            hl, prologue, lambda ref: value if ref[1] == 0 else vectors[ref[1] - 1]) \
            if prologue else value
        return f

    def weights(self, channel_of, lanes: int):
        """The weights as the reduction reads them: the parameter, or with the channel scale
        folded in (`scale_weights`) a Func of the same dimensions computed once per call,
        w · s[input channel] — exact, as a conv is linear in each input channel, and K·kh·kw
        products per input channel instead of one per input pixel. `channel_of(args)`: the
        input channel of a weight coordinate; `lanes`: vector width over dimension 0."""
        if not self.folded:
            return self.w
        hl = self.hl
        args = [hl.Var(f"w{i}") for i in range(self.w.dimensions())]
        f = hl.Func("w_scaled")
        f[args] = self.w[args] * self.vectors[0][channel_of(args), 0, 0, 0]
        f.compute_root().vectorize(args[0], lanes, hl.TailStrategy.GuardWithIf)
        return f

    def bias(self, c):
        return self.b[c] if self.b is not None else self.hl.f32(0.0)

    def output(self, value, args):
        """The output Func at `args`: the fused epilogue applied to expression `value`."""
        out = self.hl.Func("out")
        out[args] = epilogue_expr(self.hl, value, self.task.epilogue, self.residuals, args)
        return out


def channel_scale(task: ConvTask) -> bool:
    """The prologue is only x · s[c], one run-time per-channel vector (squeeze-and-excitation's
    scale), at batch 1 (one vector for the whole call), on an ungrouped conv (a weight's
    input channel is then its channel index)."""
    p = task.prologue
    return task.n == 1 and task.groups == 1 and task.vectors == 1 and len(p) == 1 and \
        p[0][0] == "Mul" and \
        sorted(tuple(a) for a in p[0][1]) == [("in", 0), ("in", 1)]


def scale_knob(task: ConvTask, knobs: list[Knob], seeds: tuple[dict, ...]) -> tuple:
    """A channel-scale task's `scale` knob — apply the scale to the input as it is read
    (`input`), or fold it into the weights once per call (`weights`, see
    ConvInputs.weights): the second costs K·kh·kw products per input channel, the first one
    per input pixel read, so which wins depends on the layer (EfficientNet's projections run
    at 112² down to 7²). Returns the knobs and the seeds: each seed with `input`, the first two
    also with `weights`. Other tasks: unchanged."""
    if not channel_scale(task):
        return knobs, seeds
    return knobs + [Knob("scale", ("input", "weights"))], \
        tuple(dict(s, scale="input") for s in seeds) + \
        tuple(dict(s, scale="weights") for s in seeds[:2])


def dense_conv(task: ConvTask) -> bool:
    """A float32 convolution of one group whose epilogue the templates compute: what the
    direct and GEMM-style templates support."""
    return task.groups == 1 and task.dtype == "float32" and \
        all(step[0] in EPILOGUE_OPS for step in task.epilogue)


def fits_registers(vector_registers: int, block: str, spare: int,
                   pixels: str = "x_block") -> Constraint:
    """The (`block` vectors × `pixels` pixels) accumulator tile fits the vector registers with
    `spare` left for operands: 32 registers means AVX-512, 16 float lanes to a register, else
    8 (AVX2)."""
    lanes = 16 if vector_registers >= 32 else 8
    return Constraint("accumulators fit the vector registers",
                      lambda c: c[block] * c[pixels] * max(1, c["vec"] // lanes)
                      <= vector_registers - spare)


def window_space(task, vector_registers: int, extra: tuple[Constraint, ...] = (),
                 seeds: tuple[dict, ...] = ()) -> KnobSpace:
    """The knobs of a per-channel window reduction (depthwise conv, pooling; `register_tile`'s
    schedule): `vec` lanes, `c_block` channel vectors and `x_block` pixels per register tile,
    `parallel`, `pad` (see schedule.pad_input), `unroll_k` (unroll the window), with the tile
    within the channels, the output row and the vector registers, plus the caller's `extra`
    constraints and `seeds` (see KnobSpace)."""
    knobs = [Knob("vec", (4, 8, 16)), Knob("c_block", (1, 2, 4)),
             Knob("x_block", (1, 2, 4, 7, 8)), Knob("parallel", PARALLEL),
             Knob("pad", ("root", "inline", TILE_PAD)), Knob("unroll_k", (False, True))]
    constraints = [
        Constraint("per-tile padding needs channel tiles in parallel",
                   lambda c: c["pad"] != TILE_PAD or c["parallel"] == "co"),
        fits_registers(vector_registers, "c_block", 2),
        Constraint("channel tile within the channels", lambda c: c["vec"] * c["c_block"] <= task.c),
        Constraint("pixel tile within the output row", lambda c: c["x_block"] <= task.out_w),
        *extra,
    ]
    return KnobSpace(knobs, constraints, seeds)


def whole_channel_tiles(task: ConvTask) -> Constraint:
    """Packed weights and channel-blocked accumulators need tiles that divide K."""
    return Constraint("packed weights: the channel tile divides the output channels",
                      lambda c: not c.get("pack", True)
                      or task.k % (c["vec"] * c["co_block"]) == 0)


def whole_tiles(k: int, tile: int) -> int:
    """`k` channels rounded up to whole tiles of `tile`."""
    return -(-k // tile) * tile


def packable(k: int, tile: int, lanes: int) -> bool:
    """Whether `k` channels may be packed in tiles of `tile` (`lanes` to a vector): zero-padded
    to whole tiles by less than a vector or a third of the channels."""
    return whole_tiles(k, tile) - k < max(lanes, k / 3)


def packed_weights(w, tile: int):
    """HWIO weights (numpy) as (⌈K/T⌉, kh·kw·C, T) for channel tile T, zero-padded to whole
    tiles: a tile's weights for its whole reduction in the order a register-tiled reduction
    reads them, one contiguous stream per tile (Halide sees [lane, (ky·kw + kx)·C + ci,
    tile])."""
    kh, kw, c, k = w.shape
    w = np.pad(w.reshape(kh * kw * c, k), ((0, 0), (0, whole_tiles(k, tile) - k)))
    return np.ascontiguousarray(w.reshape(kh * kw * c, -1, tile).transpose(1, 0, 2))


def own_shapes(task: ConvTask) -> None:
    """`views` of templates whose kernel reads every argument in its own (NHWC, 4-D) shape."""
    return None


def flat_views(task: ConvTask) -> list:
    """Per kernel argument (then the output), the shape Halide sees it as: None keeps the
    array's own shape; NHWC residuals and the output become (N, H·W, K) for templates that
    flatten the output pixels into one axis (free views of C-contiguous arrays)."""
    pixels = (task.n, task.out_h * task.out_w, task.k)
    residuals = sum(1 for s in task.epilogue if s[0] == "Add")
    return [None, None] + [None] * task.has_bias + [pixels] * residuals + [None] * task.vectors \
        + [pixels]


def epilogue_expr(hl, e, epilogue, residuals, args):
    """The fused epilogue on expression `e` at `args`; Add steps read `residuals` in order."""
    res = iter(residuals)
    for step in epilogue:
        e = e + next(res)[args] if step[0] == "Add" else activation(hl, e, step)
    return e


def step_expr(hl, op: str, args: list, attrs: dict):
    """One element-wise program step (ops/fused.py) as a Halide expression of its argument
    expressions (None for an omitted optional one)."""
    if op in ("Add", "Sub", "Mul", "Div"):
        a, b = args
        return a + b if op == "Add" else a - b if op == "Sub" else a * b if op == "Mul" \
            else a / b
    if op == "Clip":
        x, lo, hi = (args + [None, None])[:3]
        return ieee.clamp(hl, x, lo, hi)
    if op == "HardSigmoid":
        return activation(hl, args[0], (op, attrs.get("alpha", 0.2), attrs.get("beta", 0.5)))
    if op == "LeakyRelu":
        return hl.select(args[0] < 0, args[0] * hl.f32(attrs.get("alpha", 0.01)), args[0])
    if op == "DequantizeLinear":      # (x − zp) · scale in float32, as ops/quant.py
        x, scale, zp = args
        return (hl.f32(x) - zp) * scale
    if op == "QuantizeLinear":        # saturate(round_half_even(x / scale) + zp), kept in float
        x, scale, zp = args
        info = np.iinfo(attrs["dtype"])
        # marked `reciprocal` where that is exact (ops/fused.with_reciprocals)
        q = x * (hl.f32(1.0) / scale) if attrs.get("reciprocal") else x / scale
        return hl.clamp(round_to_8_bits(hl, q) + zp, float(info.min), float(info.max))
    return activation(hl, args[0], (op,))


def program_expr(hl, program: tuple, value_of):
    """The last step's expression of an element-wise program ((op, args, attrs) steps, as
    tasks hold it); `value_of(ref)` gives an ("in", i), ("const", j) or ("channel", j)
    argument's expression."""
    values: list = []
    for op, args, attrs in program:
        exprs = [None if a is None else values[a[1]] if a[0] == "step" else value_of(a)
                 for a in args]
        values.append(step_expr(hl, op, exprs, dict(attrs)))
    return values[-1]


# 1.5 · 2^23: (x + ROUNDER) − ROUNDER is x rounded half to even for |x| < 2^22 (the sum's
# last mantissa bit is the ones' place) and within 2 of x beyond
ROUNDER = 12582912.0


def round_to_8_bits(hl, x):
    """x rounded half to even wherever an 8-bit bound does not saturate it: exact for
    |x| < 2^22, within 2 of x beyond (so past every 8-bit bound still), NaN and ±inf kept —
    one add and one subtract of a 16-lane vector (strict_float, or LLVM would fold them),
    where Halide 21's `round` splits it into two 8-lane `vroundps` and a shuffle."""
    return hl.strict_float(x + hl.f32(ROUNDER) - hl.f32(ROUNDER))


def requantised(hl, task, total, mu, y_zp):
    """An int8 conv's output value as int32 within its 8-bit type's range:
    saturate(round_half_even(float32(total) · μ) + y_zp), `total` its int32 sum with β and
    `mu` its channel's μ (tasks/qconv.py), `y_zp` the kernel's zero-point parameter."""
    info = np.iinfo(task.y_dtype)
    return hl.clamp(hl.i32(round_to_8_bits(hl, hl.f32(total) * mu)) + y_zp[0],
                    int(info.min), int(info.max))


def program_params(hl, task, dims: int) -> list:
    """An int8 conv's fused program's arguments (tasks/qconv.py): its other run-time inputs
    (`dims`-d, as the output is indexed) and its constant vector if any."""
    others = [hl.ImageParam(halide_type(hl, t), dims, f"e{i}") for i, t in enumerate(task.extra)]
    return others + ([hl.ImageParam(hl.Float(32), 1, "k")] if task.consts else [])


def program_output(hl, task, value, at: tuple, co, params: list):
    """The int8 conv's output at `at` (channel `co`): its requantised `value` (int32 within
    the 8-bit range, `requantised`) in its 8-bit type, or through the task's fused program
    if any (run-time input 0 is `value` — as int32, sparing a round trip through 8 bits —,
    the others `params` read at `at`), under strict_float as the element-wise kernels
    (bit-exact with the references)."""
    if not task.program:
        return hl.cast(halide_type(hl, task.y_dtype), value)
    others, k = params[:len(task.extra)], params[len(task.extra):]
    if task.tabled:      # the program's table (tasks/qconv.py)
        offset = 128 if task.y_dtype == "int8" else 0
        return hl.cast(halide_type(hl, task.out_dtype.name), k[0][value + offset])

    def value_of(ref):
        kind, i = ref
        if kind == "in":
            return value if i == 0 else others[i - 1][at]
        return k[0][i] if kind == "const" else k[0][i + co]

    return hl.cast(halide_type(hl, task.out_dtype.name),
                   hl.strict_float(program_expr(hl, task.program, value_of)))


def activation(hl, e, step):
    """Expression `e` through the operand-less epilogue `step` ((op, *params), as tasks hold
    it): an activation or a scalar Mul."""
    kind = step[0]
    if kind == "Relu":
        return ieee.clamp(hl, e, hl.f32(0.0))
    if kind == "Mul":
        return e * hl.f32(step[1])
    if kind == "Clip":
        lo, hi = step[1], step[2]
        return ieee.clamp(hl, e, None if lo is None else hl.f32(lo),
                          None if hi is None else hl.f32(hi))
    if kind == "HardSigmoid":
        return ieee.clamp(hl, e * hl.f32(step[1]) + hl.f32(step[2]), hl.f32(0.0), hl.f32(1.0))
    if kind == "Sigmoid":
        return 1.0 / (1.0 + ieee.exp(hl, -e))
    if kind == "Tanh":
        return ieee.tanh(hl, e)
    if kind == "HardSwish":
        return e * ieee.clamp(hl, e / 6.0 + 0.5, hl.f32(0.0), hl.f32(1.0))
    if kind == "Silu":
        return e * (1.0 / (1.0 + ieee.exp(hl, -e)))
    if kind == "Gelu":
        if step[1] == "tanh":
            inner = ieee.tanh(hl, hl.f32(0.7978845608028654) * (e + hl.f32(0.044715) * e * e * e))
        else:
            inner = ieee.erf(hl, e * hl.f32(0.7071067811865476))
        return hl.f32(0.5) * e * (1.0 + inner)
    raise ValueError(f"unsupported epilogue step {kind}")
