"""Winograd 3×3 convolution F(m×m, 3×3), NHWC, with the fused epilogue in the output transform.

Why a third conv template: on this machine the libraries' direct kernels already run 3×3
convolutions near the FMA peak inside a model (ONNX Runtime's blocked NCHWc kernels), so a
schedule of the same arithmetic cannot beat them by much. Winograd's minimal filtering
(Lavin & Gray 2016, "Fast Algorithms for Convolutional Neural Networks") does fewer
multiplications: an (m+2)² input tile and a 3×3 filter give an m×m output tile with (m+2)²
products instead of 9m², i.e. 2.25× fewer at m = 2 and 4× fewer at m = 4. Neither oneDNN (no
AVX2 Winograd) nor MLAS use it for float32 on this CPU.

Algorithm (Halide's innermost-first order; t numbers the m×m output tiles of all images):
  V[ci, t, a, b]        = (Bᵀ d_t B)[a, b]          input transform of tile t's window d_t
  M[co, t, a, b]        = Σ_ci U[co, ci, a, b] · V[ci, t, a, b]   one GEMM per (a, b)
  out[co, x, y, n]      = act(bias[co] + (Aᵀ M_t A)[y % m, x % m] + residual)
with U = G g Gᵀ, the filter transform, computed once per kernel in float64 by `weights` (packed
per output-channel tile, like conv_gemm; the raw weights follow it in the same array). Every
transform is separable and applied one axis at a time through a small stage computed per
tile. The matrices are Lavin & Gray's for the
points (0, ±1) at m = 2 and (0, ±1, ±2) at m = 4; measured against the direct reference, m = 4
stays within 1e-5 of the output's scale on the zoo's shapes, under the tuner's 1e-4 check.

Schedule, choices made here: V and M are materialised for the whole image. M's (m+2)² GEMMs
are independent, and each reads one (K × C) slice of U that stays in cache while it sweeps all
tiles — the batched-GEMM structure of the Winograd kernels in TVM and NNPACK. The GEMM is
register-blocked like the direct template: (co_block vectors × t_block tiles) of accumulators,
the reduction over input channels computed into them.

Non-finite input: the transforms mix every input of a tile into every output of it, so one
NaN or inf would make the whole tile non-finite where a direct convolution (and ONNX Runtime)
keeps the other outputs finite. The kernel sums its input's rows (vectorised over channels) and,
only when a sum is NaN or inf, recomputes the output directly from the raw
3×3 weights, which `weights` packs after U; for a finite input the update's loop is a test
per vector. Measured paired against the kernel without it: resnet18's 3×3 layers 0.88 (56²,
the new weight layout), 1.02 (28²) and 0.98 (14²) of its time; DenseNet's (128 → 32 channels,
where the input is 4× the output) 1.05-1.07.

Knobs: `m` (output tile: 2 or 4), `vec` lanes, `co_block` vectors of output channels and
`t_block` tiles per register tile, `parallel` — `e` (the (m+2)² GEMMs in parallel) or `co`
(output-channel tiles in parallel).
"""

from __future__ import annotations

import numpy as np

from woodpecker.engines.halide import ieee
from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import (
    EPILOGUE_OPS,
    ConvInputs,
    epilogue_expr,
    fits_registers,
    own_shapes,
    whole_channel_tiles,
)
from woodpecker.engines.halide.template_parts import aligned_channel_tiles, compiled, pad_input
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace
from woodpecker.tasks.transforms import MATRICES

KIND = "conv2d"
# U holds (m+2)² values per 3×3 filter (16 at m = 2, 36 at m = 4) and the raw 9 follow it: 2.8
# or 5 times the model's weights (resnet18's 13 Winograd layers: 164 MiB against 45 MiB raw),
# so a memory plan (templates.weight_expanding) does without this template.
EXPANDS_WEIGHTS = True

def supports(task: ConvTask) -> bool:
    return task.groups == 1 and task.dtype == "float32" and (task.kh, task.kw) == (3, 3) \
        and task.stride == (1, 1) and task.dilation == (1, 1) and task.k % 4 == 0 \
        and all(step[0] in EPILOGUE_OPS for step in task.epilogue)


def tiles(task: ConvTask, m: int) -> tuple[int, int, int]:
    """(tiles across, tiles down, all tiles of the batch) for output tile size m."""
    tx, ty = -(-task.out_w // m), -(-task.out_h // m)
    return tx, ty, tx * ty * task.n


# The genetic search's first candidates: timed interleaved on resnet18's four 3×3 shapes, these
# three were within 10-20 % of the best of a hand-picked set on each (145-180 GFLOP/s
# effective at 56² to 14², ~115 at 7²; m = 4 wins on large images, m = 2 at 7×7).
SEEDS = ({"m": 4, "vec": 16, "co_block": 1, "t_block": 6, "parallel": "e"},
         {"m": 4, "vec": 16, "co_block": 1, "t_block": 4, "parallel": "co"},
         {"m": 2, "vec": 16, "co_block": 1, "t_block": 6, "parallel": "e"})


def space(task: ConvTask, vector_registers: int = 16) -> KnobSpace:
    knobs = [Knob("m", (2, 4)), Knob("vec", (4, 8, 16)), Knob("co_block", (1, 2, 3, 4)),
             Knob("t_block", (1, 2, 3, 4, 5, 6, 7, 8)), Knob("parallel", ("e", "co"))]
    constraints = [
        fits_registers(vector_registers, "co_block", 1, pixels="t_block"),
        whole_channel_tiles(task),
        Constraint("tile block within the tiles",
                   lambda c: c["t_block"] <= tiles(task, c["m"])[2]),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


def weights(task: ConvTask, config: dict, w):
    """HWIO weights → U = G g Gᵀ per (input, output) channel, packed per channel tile T:
    numpy (K/T, m+2, m+2, C, T), i.e. Halide (lane, ci, b, a, tile); the raw 3×3 weights
    follow in the same array (numpy [:, ky, m+2+kx], for the direct fallback of `build`)."""
    _, g, _ = MATRICES[config["m"]]
    tile = config["vec"] * config["co_block"]
    a, (_, _, c, k) = g.shape[0], w.shape
    packed = np.zeros((k // tile, a, a + 3, c, tile), np.float32)
    # a few channel tiles at a time: the float64 transform of a whole layer (resnet18's last
    # 3×3 convs: 75 MB) was the peak of a loaded plan's memory
    step = max(1, (1 << 20) // max(1, a * a * c * tile))
    for t0 in range(0, k // tile, step):
        part = w[..., t0 * tile:(t0 + step) * tile].astype(np.float64)
        u = np.einsum("au,bv,uvck->abck", g, g, part)
        n = u.shape[3] // tile
        packed[t0:t0 + n, :, :a] = u.reshape(a, a, c, n, tile).transpose(3, 0, 1, 2, 4)
        packed[t0:t0 + n, :3, a:] = part.reshape(3, 3, c, n, tile).transpose(3, 0, 1, 2, 4)
    return packed


views = own_shapes


def _apply(hl, matrix: np.ndarray, row, term):
    """Σ_j matrix[row, j] · term(j), as a `mux` over the (unrolled, so constant) `row`; zero
    coefficients are left out and ±1 need no multiply."""
    rows = []
    for coeffs in matrix:
        e = None
        for j, c in enumerate(coeffs):
            if c == 0:
                continue
            v = term(j) if c == 1 else -term(j) if c == -1 else float(c) * term(j)
            e = v if e is None else e + v
        rows.append(e)
    return hl.mux(row, rows)


def build(task: ConvTask, config: dict, threads: int = 2) -> AotKernel:
    """Compile `task` with `config`; run(*arrays) takes `kernel_arguments`' order: x (NHWC),
    the transformed weights (see `weights`), bias when the task has one, then one residual
    per Add step."""
    hl = halide_module()
    m, vec = config["m"], config["vec"]
    tile = vec * config["co_block"]
    bt, _, at = MATRICES[m]
    ntx, nty, _ = tiles(task, m)
    io = ConvInputs(hl, task, weight_dims=5, reads_inside=False)
    ci, t, a, b, j = hl.Var("ci"), hl.Var("t"), hl.Var("a"), hl.Var("b"), hl.Var("j")
    top, left = task.pads[0], task.pads[1]

    def window(c, jx, jy):      # tile t's input window, pixel (jx, jy)
        return io.padded[c, (t % ntx) * m + jx - left, ((t / ntx) % nty) * m + jy - top,
                         t / (ntx * nty)]

    # Input transform, one axis at a time: along x into `vx`, then along y into V.
    vx = hl.Func("vx")
    vx[ci, t, a, j] = _apply(hl, bt, a, lambda i: window(ci, i, j))
    v = hl.Func("V")
    v[ci, t, a, b] = _apply(hl, bt, b, lambda i: vx[ci, t, a, i])

    # One GEMM per (a, b), accumulated in (co_block × t_block) register tiles.
    r = hl.RDom([(0, task.c)])
    cl, cot = hl.Var("cl"), hl.Var("cot")
    acc, gemm = hl.Func("acc"), hl.Func("M")
    acc[cl, t, a, b, cot] = hl.f32(0.0)
    acc[cl, t, a, b, cot] += io.w[cl, r.x, a, b, cot] * v[r.x, t, a, b]
    gemm[cl, t, a, b, cot] = acc[cl, t, a, b, cot]
    gemm.bound(cl, 0, tile)

    # Output transform: along y into `my`, then along x, with the bias and epilogue.
    co, x, y, n = hl.Var("co"), hl.Var("x"), hl.Var("y"), hl.Var("n")
    # `my` is per tile column (tx), not per pixel: every x of a tile shares it.
    my, tx = hl.Func("my"), hl.Var("tx")
    my[co, tx, a, y, n] = _apply(hl, at, y % m, lambda i: gemm[co % tile,
                                                                tx + ntx * (y / m + nty * n),
                                                                a, i, co / tile])
    value = io.bias(co) + _apply(hl, at, x % m, lambda i: my[co, x / m, i, y, n])
    out = io.output(value, (co, x, y, n))
    _direct_fallback(hl, task, io, out, (co, x, y, n), m + 2, tile)

    _schedule(hl, config, (out, my, gemm, acc, v, vx), (co, x, y, n), (ci, t, a, b, j, cl, cot),
              r, tile, m)
    pad_input(io.padded, "root")
    return compiled(__name__, task, config, threads, out, io.params)


def _direct_fallback(hl, task: ConvTask, io: ConvInputs, out, args, a: int, tile: int):
    """NaN and infinity as a direct convolution gives them: the transforms mix every input of
    a tile into every output of it (inf · 0 is NaN), so one non-finite input would make its
    whole tile non-finite. When the input holds any NaN or inf (found by summing it), an
    update recomputes the output directly from the raw weights packed after U
    (`weights`); for a finite input the update is a test per vector of output channels."""
    co, x, y, n = args
    # Σ over each row per input channel (vectorised: NHWC keeps channels adjacent; a strict
    # add, so the sum is NaN or inf exactly when a summand is, or when it overflows, which only
    # sends a finite input down the exact direct path), then a bit test per row, rows in
    # parallel: one add per input value
    c, r = hl.Var("fc"), hl.RDom([(0, task.w)], "scan")
    lanes = hl.Func("row_sums")
    lanes[c, y, n] = hl.f32(0.0)
    lanes[c, y, n] = hl.strict_float(lanes[c, y, n] + io.padded[c, r.x, y, n])
    channels = hl.RDom([(0, task.c)], "channels")
    row = hl.Func("nonfinite_rows")
    row[y, n] = hl.maximum(hl.select(ieee.is_nonfinite(hl, lanes[channels.x, y, n]),
                                     hl.u8(1), hl.u8(0)))
    rows = hl.RDom([(0, task.h), (0, task.n)], "rows")
    flag = hl.Func("nonfinite")
    flag[()] = hl.maximum(row[rows.x, rows.y])
    lanes.compute_at(row, y).vectorize(c, 8, hl.TailStrategy.GuardWithIf)
    lanes.update().vectorize(c, 8, hl.TailStrategy.GuardWithIf)
    row.compute_root().parallel(y, 4)
    flag.compute_root()
    top, left = task.pads[0], task.pads[1]
    k = hl.RDom([(0, task.c), (0, 3), (0, 3)], "k")
    direct = io.bias(co) + hl.sum(io.w[co % tile, k.x, a + k.y, k.z, co / tile] *
                                  io.padded[k.x, x + k.y - left, y + k.z - top, n])
    # one pass over the output, taken only where the flag is set (an RDom's bounds may not
    # read a Func, its predicate may); `0 · once.x` ties the update to that RDom
    once = hl.RDom([(0, 1)], "once")
    once.where(flag[()] > 0)
    out[co, x, y, n] = epilogue_expr(hl, direct + hl.f32(0.0) * once.x, task.epilogue,
                                     io.residuals, (co, x, y, n))
    # a finite input runs only the test, once per vector of output channels
    out.update().reorder(co, x, y, n, once.x).vectorize(co, 16, hl.TailStrategy.GuardWithIf)


def _schedule(hl, config, funcs, out_vars, vars_, r, tile, m) -> None:
    out, my, gemm, acc, v, vx = funcs
    co, x, y, n = out_vars
    ci, t, a, b, j, cl, cot = vars_
    vec, guard = config["vec"], hl.TailStrategy.GuardWithIf
    # Output: m×m pixel tiles (guarded at the image's edge, so x % m and y % m stay constant
    # in the unrolled loops), channel tiles vectorised, rows of tiles in parallel.
    oco, oci = hl.Var("oco"), hl.Var("oci")
    xo, xi, yo, yi = hl.Var("xo"), hl.Var("xi"), hl.Var("yo"), hl.Var("yi")
    aligned_channel_tiles(hl, out, co, oco, oci, tile)
    out.split(x, xo, xi, m, guard).split(y, yo, yi, m, guard)
    out.reorder(oci, xi, yi, oco, xo, yo, n).vectorize(oci, vec).unroll(yi).unroll(xi)
    out.fuse(yo, n, yo).parallel(yo)
    my.compute_at(out, oco).vectorize(co, vec).unroll(a).unroll(y)
    # The GEMMs.
    to, ti = hl.Var("to"), hl.Var("ti")
    gemm.compute_root().split(t, to, ti, config["t_block"], hl.TailStrategy.ShiftInwards)
    gemm.vectorize(cl, vec).unroll(cl).unroll(ti)
    if config["parallel"] == "e":
        gemm.reorder(cl, ti, to, cot, a, b).fuse(a, b, b).parallel(b)
    else:
        gemm.reorder(cl, ti, to, a, b, cot).parallel(cot)
    acc.compute_at(gemm, to).vectorize(cl, vec).unroll(cl).unroll(t)
    acc.update().reorder(cl, t, r.x).vectorize(cl, vec).unroll(cl).unroll(t)
    # The input transform, per tile, channels vectorised.
    v.compute_root().reorder(ci, a, b, t).vectorize(ci, 8, guard).unroll(a).unroll(b) \
        .parallel(t, 8)
    vx.compute_at(v, t).vectorize(ci, 8, guard).unroll(a).unroll(j)
