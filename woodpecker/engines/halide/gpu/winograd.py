"""Winograd 3×3 convolution F(m×m, 3×3), NHWC, on a GPU: three kernels — the input
transform, the (m+2)² batched products, the output transform with the bias and the fused
epilogue — in one Halide pipeline.

Algorithm (conv_winograd.py's, Lavin & Gray 2016, the CPU template's matrices and row
helper): with t numbering the m×m output tiles of every image,
  V[ci, t, a, b] = (Bᵀ d_t B)[a, b]                  tile t's input window, transformed
  M[co, t, a, b] = Σ_ci U[co, ci, a, b] · V[ci, t, a, b]   one product per (a, b)
  out[co, x, y, n] = act(bias[co] + (Aᵀ M_t A)[y % m, x % m] + residual)
(a along x, b along y). U = G g Gᵀ is computed once, at plan build (numpy,
float64, stored in the plan's float type as numpy (b, a, C, K): output channels innermost, so
threads along them read consecutive weights) — `transforms` names it (tasks/transforms.py),
so a tuning batch's remote runner computes the same U from its own inputs.

Schedule, mapped through a `Mapping` (mapping.py):
- V (materialised for the whole batch): one thread per (input channel, tile) computes the
  tile's (m+2)² values unrolled, both axes' sums inline (each window pixel one load the
  compiler reuses: a per-thread intermediate in registers needs bounds Halide 21 cannot
  prove inside a GPU kernel); threads along the channels read consecutive NHWC pixels
  (`v_threads` per block).
- M: the register-tiled product mapping.register_tiles makes for dense.py and conv.py,
  output channels × tiles, the (m+2)² products over the grid's third dimension.
- out: one thread per (output channel, tile) computes an m×m output tile unrolled,
  from M inline (`v_threads` per block), channels innermost for coalesced stores.
V and M live in device memory between the kernels; the plan runtime keeps Halide's device
allocations for reuse (cuda_glue.c), so a launch after the first allocates nothing.

Supported: ungrouped float 3×3 convs of stride 1 and dilation 1 on NHWC input (a stem conv
reading its NCHW input stays with conv.py), any prologue (applied as the input is read,
ConvInputs) and any epilogue the CPU templates fuse. A
non-finite input makes its whole tile non-finite here (the CPU template's direct fallback
is not carried over): GPU plans are checked on finite data, and this is written down.
"""

from __future__ import annotations

from woodpecker.engines.halide.conv_common import EPILOGUE_OPS, ConvInputs, own_shapes
from woodpecker.engines.halide.conv_winograd import _apply, tiles
from woodpecker.engines.halide.gpu.mapping import FLOATS, gpu_constraints, register_tiles
from woodpecker.engines.halide.template_parts import narrowed
from woodpecker.gpu.devices import GpuDevice
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace
from woodpecker.tasks.transforms import MATRICES, WINOGRAD_FILTER, Transform

KIND = "conv2d"

SEEDS = ({"m": 4, "threads_c": 16, "threads_t": 8, "reg_c": 4, "reg_t": 2, "v_threads": 128},
         {"m": 2, "threads_c": 16, "threads_t": 8, "reg_c": 4, "reg_t": 2, "v_threads": 128},
         {"m": 2, "threads_c": 8, "threads_t": 8, "reg_c": 2, "reg_t": 1, "v_threads": 64})


def supports(task: ConvTask) -> bool:
    return type(task) is ConvTask and task.dtype in FLOATS and task.groups == 1 \
        and (task.kh, task.kw) == (3, 3) and task.stride == (1, 1) \
        and task.dilation == (1, 1) and not task.reads_nchw \
        and all(step[0] in EPILOGUE_OPS for step in task.epilogue)


def _block(c: dict) -> tuple[int, int]:
    return c["threads_c"] * c["reg_c"], c["threads_t"] * c["reg_t"]


def space(task: ConvTask, device: GpuDevice) -> KnobSpace:
    knobs = [Knob("m", (2, 4)), Knob("threads_c", (8, 16, 32, 64)),
             Knob("threads_t", (1, 2, 4, 8, 16)), Knob("reg_c", (1, 2, 4)),
             Knob("reg_t", (1, 2, 4)), Knob("v_threads", (32, 64, 128, 256))]
    constraints = [
        *gpu_constraints(device, lambda c: max(c["threads_c"] * c["threads_t"],
                                               c["v_threads"]),
                         registers=lambda c: max(c["reg_c"] * c["reg_t"] + c["reg_c"]
                                                 + c["reg_t"], 2 * (c["m"] + 2) ** 2)),
        Constraint("the product's block within the output channels and the tiles",
                   lambda c: _block(c)[0] <= task.k and
                   _block(c)[1] <= tiles(task, c["m"])[2]),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


def views(task: ConvTask) -> list:
    return own_shapes(task)


def transforms(task: ConvTask, config: dict) -> dict[int, Transform]:
    """The weights (argument 1) as U = G g Gᵀ (tasks/transforms.py), computed once."""
    return {1: Transform(WINOGRAD_FILTER, config["m"])}


def define(hl, task: ConvTask, config: dict, mapping):
    m = config["m"]
    bt, _, at = MATRICES[m]
    ntx, nty, total = tiles(task, m)
    io = ConvInputs(hl, task, reads_inside=False)
    ci, t, a, b = hl.Var("ci"), hl.Var("t"), hl.Var("a"), hl.Var("b")
    top, left = task.pads[0], task.pads[1]

    def window(c, jx, jy):
        return io.padded[c, (t % ntx) * m + jx - left, ((t / ntx) % nty) * m + jy - top,
                         t / (ntx * nty)]

    # both axes inline: a thread's (m+2)² values are unrolled, so each window pixel is one
    # load the compiler reuses (a per-thread intermediate needs bounds Halide 21 cannot prove
    # inside a GPU kernel)
    v = hl.Func("V")
    v[ci, t, a, b] = _apply(hl, bt, b, lambda i: _apply(hl, bt, a, lambda k: window(ci, k, i)))

    co = hl.Var("co")
    r = hl.RDom([(0, task.c)], "r")
    acc, gemm = hl.Func("acc"), hl.Func("M")
    acc[co, t, a, b] = hl.f32(0.0)
    acc[co, t, a, b] += io.w[co, r.x, a, b] * v[r.x, t, a, b]
    gemm[co, t, a, b] = acc[co, t, a, b]

    x, y, n = hl.Var("x"), hl.Var("y"), hl.Var("n")
    tile = x / m + ntx * (y / m + nty * n)
    value = io.bias(co) + _apply(hl, at, x % m, lambda i: _apply(
        hl, at, y % m, lambda k: gemm[co, tile, i, k]))
    out = narrowed(hl, io.output(value, (co, x, y, n)), task.dtype)
    _schedule(hl, config, mapping, (out, gemm, acc, v), (co, x, y, n), (ci, t, a, b),
              total, task.k)
    return out, io.params


def _schedule(hl, config, mapping, funcs, out_vars, vars_, total: int, k: int) -> None:
    out, gemm, acc, v = funcs
    co, x, y, n = out_vars
    ci, t, a, b = vars_
    m, threads = config["m"], config["v_threads"]
    e = m + 2
    guard = hl.TailStrategy.GuardWithIf
    # the input transform: a thread per (channel, tile), its (m+2)² values unrolled
    v.compute_root().bound(a, 0, e).bound(b, 0, e).bound(t, 0, total)
    ct, cto, cti = hl.Var("ct"), hl.Var("cto"), hl.Var("cti")
    v.reorder(a, b, ci, t).fuse(ci, t, ct).split(ct, cto, cti, threads, guard)
    v.unroll(a).unroll(b)
    mapping.blocks(v, cto)
    mapping.threads(v, cti)
    # the (m+2)² products, register-tiled
    gemm.compute_root().bound(co, 0, k).bound(t, 0, total).bound(a, 0, e).bound(b, 0, e)
    register_tiles(hl, mapping, gemm, acc, (co, t, a, b), _block(config),
                   (config["reg_c"], config["reg_t"]), lambda upd: None)
    # the output transform: a thread per (channel, tile column), an m×m tile unrolled
    xo, xi, yo, yi = hl.Var("xo"), hl.Var("xi"), hl.Var("yo"), hl.Var("yi")
    cx, cxo, cxi = hl.Var("cx"), hl.Var("cxo"), hl.Var("cxi")
    out.split(x, xo, xi, m, guard).split(y, yo, yi, m, guard)
    out.reorder(xi, yi, co, xo, yo, n).fuse(co, xo, cx).fuse(yo, n, yo)
    out.split(cx, cxo, cxi, threads, guard)
    out.unroll(xi).unroll(yi)
    mapping.blocks(out, cxo, yo)
    mapping.threads(out, cxi)
