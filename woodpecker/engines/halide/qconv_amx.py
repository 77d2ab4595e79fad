"""Int8 convolution on AMX tiles (tasks/qconv.py), NHWC: each step one `tdpbusd` — a 16 × 16
int32 tile of (pixels × output channels) += a 16 × 64 tile of u8 inputs times a 64 × 16 tile of
s8 weights — then requantised to 8 bits as `qconv_gemm` does.

Algorithm: acc[lane, p] = Σ_{chunk, kx, ky} Σ_{k<K} u8(xp[chunk·K + k, s·p + kx·dx + ky·dy·Wp])
· w[k mod 4, lane, k / 4 …] with K = 4·min(16, ⌈C/4⌉) input channels per step; out[co, ox, oy]
= saturate(round(float32(acc + β[co]) · μ[co]) + y_zp). `xp` is the input, offset to uint8 and
padded with its zero point, materialised (a tile load reads memory with one row stride).

Halide reaches AMX through its tile-matmul pattern (ExtractTileOperations, with the target
feature AVX512_SapphireRapids and the accumulator `store_in(MemoryType.AMXTile)`; the Python
bindings do not name that memory type, `MemoryType(8)` is it). The pinned Halide 21 recognises
the pattern only in a narrow form, each point measured here: the tile must be square (16 pixels
× 16 channels: its check compares the pixel count of the input tile with the channel count of
the weight tile); the weights must be indexed as (k mod 4, lane + offset, k / 4) — an offset on
the `k / 4` axis is never matched (its pattern holds a scalar where the index has a vector) —,
so they are packed with the step index k / 4 outermost and every other offset (channel tile,
tap, chunk) carried on the lane axis (`weights`; a view with overlapping strides did the same
without the copy, but the tuner copies arguments to time them cold, and a copy loses such
strides); the input's pixel stride must differ from K (else the load simplifies to one dense
ramp the matcher does not take: a 4-byte skew is added) and the accumulator's copy must not be
dense (`bound_storage` 20 lanes).

The input is copied (knob `input`: `copy`) unless a row walk can read it in place (`direct`:
uint8, no padding, channels a whole number of steps — 1×1 convs mostly) or is worth unfolding
(`unfold`, `_unfolded`: the copy holds, per output column, the kw input columns its window
reads, side by side as kw·C' channels, so the tiles compute a conv with a 1-wide window and
kw times deeper steps — a stem's 3 channels use 28 of a step's 64 bytes instead of 4).

Two walks over the output pixels (knob `walk`): `rows` — tiles of 16 pixels along an output row,
shifted inwards at its end (needs 16 pixels a row); `flat` — the padded image as one row of
Wp-wide lines, the output at p = oy·Wp + ox with ox < Wp, so every tile has 16 pixels whatever
the width, at the cost of computing the Wp − OW pixels past each row's end (stride 2 computes
twice the pixels it keeps). On the flat walk the parallel loop (knob `parallel`) is the
output rows, each computing its pixel tiles one channel tile after another (`pixels`), or the
channel tiles, each computing every pixel tile (`channels`): at 7² or 14² the former launched
the thread pool twice per 16 channels, which cost more than the tiles (ResNet-50's 1×1
512→2048 at 7² 0.525 ms against 0.112, 3×3 512→512 at 7² 0.286 against 0.173).

One accumulator tile at a time: Halide 21's lowering (ExtractTileOperations) takes one tile per
AMX allocation and refuses a nested one ("Already in AMX allocation"), so the 2 × 2 blocks of
accumulators that reuse each loaded input and weight tile twice (oneDNN's brgemm) cannot be
written here; upstream Halide split allocations into several tiles after the 21.0 release (its
MultiRamp sub-tiles), which PyPI does not carry yet.

Measured on Emerald Rapids (2 threads, exact against the reference): 3×3 64→64 at 56²
0.157 ms (1472 GOP/s) in one session, 0.27 ms in another (OpenVINO's AMX conv: 0.15 in its
plan), against `qconv_gemm`'s 0.595 ms (389 GOP/s, VNNI); 3×3/2 128→128 at 56²
0.154 ms against 0.500; 1×1 256→64 at 56² 0.160 ms against 0.245 (the input copy dominates);
ResNet's 7×7/2 stem 3→64 at 224² 0.44 ms unfolded against 0.86 copied (rows) and 3.0 (flat).

Linux grants a process the AMX tile state only on request (`aot.request_amx`, done before any
kernel is loaded).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.conv_common import program_output, program_params, requantised
from woodpecker.engines.halide.host import host_has_amx
from woodpecker.engines.halide.template_parts import compiled, halide_type, padded_channels
from woodpecker.tasks.qconv import QConvTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace

KIND = "qconv2d"
KINDS = (KIND, "qmatmul")     # a static int8 MatMul is a 1×1 conv (tasks/qconv.QMatMulTask)
TILE = 16           # pixels per tile = output channels per tile (one 16 × 16 int32 tile)
GROUP = 4           # bytes one int32 lane sums
MAX_STEPS = 16      # rows of a weight tile: 16 × 4 = 64 input channels per tdpbusd
AMX_TILE = 8        # Halide's MemoryType::AMXTile (not exported to Python)

SEEDS = ({"walk": "rows", "channels": "inner", "input": "copy", "parallel": "pixels"},
         {"walk": "flat", "channels": "outer", "input": "copy", "parallel": "channels"},
         {"walk": "rows", "channels": "outer", "input": "copy", "parallel": "pixels"},
         {"walk": "rows", "channels": "outer", "input": "direct", "parallel": "pixels"},
         {"walk": "rows", "channels": "inner", "input": "unfold", "parallel": "pixels"},
         {"walk": "flat", "channels": "outer", "input": "copy", "parallel": "pixels"})


def supports(task) -> bool:
    """One stride in both directions, more than 4 input channels a
    step or a window wider than 1×1 (Halide 21 matches no tile for a 1×1 conv over ≤ 4
    channels: "Store to AMX tile allocation of a non-tile value"), and a host with AMX."""
    return (isinstance(task, QConvTask) and task.groups == 1
            and task.stride[0] == task.stride[1]
            and (task.c > GROUP or task.kh * task.kw > 1) and host_has_amx())


def geometry(task: QConvTask) -> tuple[int, int, int, int, int]:
    """(K channels per step, steps per tap, padded channels, padded width, channel stride)."""
    q = -(-task.c // GROUP)
    kq = min(MAX_STEPS, q)
    chunks = -(-q // kq)
    cp = chunks * kq * GROUP
    s = task.stride[1]
    wp = -(-(task.w + task.pads[1] + task.pads[3]) // s) * s
    stride = cp + (GROUP if cp * s == GROUP * kq else 0)   # see the module docstring
    return GROUP * kq, chunks, cp, wp, stride


def _in_place(task: QConvTask) -> bool:
    """The input itself is what the tiles read: uint8, no padding, channels a whole number of
    steps (and its pixel stride, a run-time value, never simplifies to a dense load)."""
    return task.x_dtype == "uint8" and not any(task.pads) and geometry(task)[2] == task.c


def _unfolded(task: QConvTask) -> QConvTask:
    """The conv the tiles compute with `input: unfold`: the window's columns moved into the
    channels — kw·C' channels (C' = C rounded up to 4), a 1-wide window, one column per output
    column — so a stem's 3 channels fill 7·4 = 28 bytes of each step instead of 4."""
    c4 = -(-task.c // GROUP) * GROUP
    return replace(task, c=task.kw * c4, w=task.out_w, kw=1, stride=(task.stride[0], 1),
                   pads=(task.pads[0], 0, task.pads[2], 0), dilation=(task.dilation[0], 1))


def _flat_pixels(task: QConvTask) -> int:
    return (task.out_h - 1) * geometry(task)[3] + task.out_w


def space(task: QConvTask, vector_registers: int = 32) -> KnobSpace:
    knobs = [Knob("walk", ("rows", "flat")), Knob("channels", ("inner", "outer")),
             Knob("input", ("copy", "direct", "unfold")), Knob("parallel", ("pixels", "channels"))]
    constraints = [
        Constraint("a row of 16 pixels per tile",
                   lambda c: c["walk"] != "rows" or task.out_w >= TILE),
        Constraint("16 pixels in the flattened image",
                   lambda c: c["walk"] != "flat" or _flat_pixels(task) >= TILE),
        Constraint("the flat walk computes a channel tile over every pixel",
                   lambda c: c["walk"] != "flat" or c["channels"] == "outer"),
        Constraint("channel tiles in parallel: the flat walk",
                   lambda c: c["parallel"] != "channels" or c["walk"] == "flat"),
        Constraint("the input read in place: a row walk over uint8 input without padding "
                   "whose channels fill the steps",
                   lambda c: c["input"] != "direct" or (c["walk"] == "rows" and _in_place(task))),
        Constraint("the window's columns unfolded into one step of channels: a row walk over "
                   "a window wider than 1",
                   lambda c: c["input"] != "unfold" or (c["walk"] == "rows" and task.kw > 1 and
                                                        _unfolded(task).c <= GROUP * MAX_STEPS)),
    ]
    return KnobSpace(knobs, constraints, SEEDS)


def arguments(task: QConvTask, config: dict, inputs: list) -> list:
    """The node's inputs → x, the weights as the kernel reads them (`weights`), β, μ and the
    zero points (`QConvTask.kernel_arguments`)."""
    args = task.kernel_arguments(inputs)
    return [args[0], weights(task, config, args[1]), *padded_channels(args[2:4], task.k, TILE),
            *args[4:]]


def views(task: QConvTask) -> list:
    """The input and a fused program's other inputs as the task sees them (`x_view`,
    `extra_view`), every other argument in its own shape."""
    return [task.x_view] + [None] * 5 + [task.extra_view] * len(task.extra) + \
        [None] * (1 + bool(task.consts))


def weights(task: QConvTask, config: dict, w: np.ndarray) -> np.ndarray:
    """HWIO int8 → (steps, groups · 16, 4) int8, input channels zero-padded to whole steps
    and output channels to whole tiles: for group g = (channel tile · kh·kw + tap) · chunks +
    chunk, element [k / 4, 16·g + lane, k mod 4] is the weight of input channel chunk·K + k
    to output channel tile·16 + lane at that tap. A weight tile is then (k mod 4, lane + 16·g,
    k / 4), rows 16·groups·4 bytes apart — the only form of offset Halide 21's matcher takes
    (module docstring)."""
    if config.get("input") == "unfold":      # (kh, kw, C, K) → (kh, 1, kw·C', K)
        kh, kw, c, k = w.shape
        c4 = _unfolded(task).c // kw
        w = np.pad(w, ((0, 0), (0, 0), (0, c4 - c), (0, 0))).reshape(kh, 1, kw * c4, k)
        task = _unfolded(task)
    kk, chunks, cp, _, _ = geometry(task)
    kh, kw, c, k = w.shape
    tiles = -(-k // TILE)
    padded = np.zeros((kh, kw, cp, tiles * TILE), np.int8)
    padded[:, :, :c, :k] = w
    steps = kk // GROUP
    blocks = padded.reshape(kh * kw, chunks, steps, GROUP, tiles, TILE)
    return np.ascontiguousarray(blocks.transpose(2, 4, 0, 1, 5, 3)).reshape(steps, -1, GROUP)


def build(task: QConvTask, config: dict, threads: int = 2) -> AotKernel:
    hl = halide_module()
    unfold = config.get("input") == "unfold"
    tiled = _unfolded(task) if unfold else task      # the conv the tiles compute
    kk, chunks, cp, wp, cstride = geometry(tiled)
    (sy, sx), (dy, dx), (pt, pl) = tiled.stride, tiled.dilation, task.pads[:2]
    x = hl.ImageParam(halide_type(hl, task.x_dtype), 4, "x")
    w = hl.ImageParam(hl.Int(8), 3, "w")       # [k mod 4, lane + 16·group, k / 4]
    beta = hl.ImageParam(hl.Int(32), 1, "beta")
    mu = hl.ImageParam(hl.Float(32), 1, "mu")
    x_zp = hl.ImageParam(hl.UInt(8), 1, "x_zp")
    y_zp = hl.ImageParam(hl.Int(32), 1, "y_zp")
    w.dim(0).set_min(0).set_stride(1).set_extent(GROUP)
    w.dim(1).set_min(0).set_stride(GROUP)
    w.dim(2).set_min(0).set_extent(kk // GROUP)
    c, px, py, n, f = (hl.Var(v) for v in ("c", "px", "py", "n", "f"))
    u = hl.Func("u")             # the input as uint8 (int8 offset by 128)
    u[c, px, py, n] = x[c, px, py, n] if task.x_dtype == "uint8" else \
        hl.u8(hl.i16(x[c, px, py, n]) + 128)

    def padded_at(ch, col, row, batch):
        inside = (ch < task.c) & (col >= pl) & (col < task.w + pl) & \
            (row >= pt) & (row < task.h + pt)
        return hl.select(inside, u[hl.min(ch, task.c - 1), hl.clamp(col - pl, 0, task.w - 1),
                                   hl.clamp(row - pt, 0, task.h - 1), batch], x_zp[0])

    lane, p, oy, tile, co, ox = (hl.Var(v) for v in ("lane", "p", "oy", "tile", "co", "ox"))
    r = hl.RDom([(0, kk), (0, chunks), (0, tiled.kw), (0, task.kh)], "r")
    ch = r[1] * kk + r[0]
    column = lane + TILE * ((tile * task.kh * tiled.kw + r[3] * tiled.kw + r[2]) * chunks + r[1])
    weight = w[r[0] % GROUP, column, r[0] / GROUP]
    acc = hl.Func("acc")
    xp = hl.Func("xp")
    flat, direct = config["walk"] == "flat", config.get("input") == "direct"
    if flat:
        xp[c, f, n] = padded_at(c, f % wp, f / wp, n)
        acc[lane, p, n, tile] = hl.i32(0)
        acc[lane, p, n, tile] += hl.i32(xp[ch, sx * p + r[2] * dx + r[3] * dy * wp, n]) * weight
        pixel = (lane, p)
    else:
        if unfold:      # channel (kx, c') of output column px: input column px·s + kx·d
            c4 = tiled.c // task.kw
            xp[c, px, py, n] = padded_at(c % c4, px * task.stride[1] + c / c4 * task.dilation[1],
                                         py, n)
        else:
            xp[c, px, py, n] = padded_at(c, px, py, n)
        source = x if direct else xp
        acc[lane, ox, oy, n, tile] = hl.i32(0)
        acc[lane, ox, oy, n, tile] += hl.i32(
            source[ch, ox * sx + r[2] * dx, oy * sy + r[3] * dy, n]) * weight
        pixel = (lane, ox)
    accm = acc.in_()
    total = (accm[co % TILE, oy * wp + ox, n, co // TILE] if flat else
             accm[co % TILE, ox, oy, n, co // TILE]) + beta[co]
    out = hl.Func("out")
    extra = program_params(hl, task, 4)
    out[co, ox, oy, n] = program_output(hl, task, requantised(hl, task, total, mu[co], y_zp),
                                        (co, ox, oy, n), co, extra)

    oco, oci = hl.Var("oco"), hl.Var("oci")
    out.output_buffer().dim(0).set_min(0)
    out.split(co, oco, oci, TILE, hl.TailStrategy.RoundUp if task.k % TILE == 0
              else hl.TailStrategy.GuardWithIf).vectorize(oci)
    if not direct:
        xp.bound(c, 0, cstride).vectorize(c, min(cstride, 16))
    li, pi = hl.Var("li"), hl.Var("pi")
    accm.bound(lane, 0, TILE).bound_storage(lane, TILE + GROUP)
    accm.tile(*pixel, li, pi, TILE, TILE, hl.TailStrategy.ShiftInwards) \
        .vectorize(li).vectorize(pi)
    if flat:
        xp.bound(f, 0, (task.h + pt + task.pads[2] + sy) * wp)
        xp.compute_root().parallel(f, wp)
        out.reorder(oci, ox, oy, oco, n)
        if config.get("parallel") == "channels":
            out.parallel(oco)
            accm.compute_at(out, oco)
        else:
            out.parallel(oy)
            accm.compute_at(out, oco).parallel(p)
        acc.compute_at(accm, p)
    else:
        xo, xi = hl.Var("xo"), hl.Var("xi")
        if not direct:
            xp.compute_root().parallel(py)
        out.split(ox, xo, xi, TILE, hl.TailStrategy.ShiftInwards)
        order = (oci, xi, oco, xo) if config["channels"] == "inner" else (oci, xi, xo, oco)
        out.reorder(*order, oy, n)
        # one output row (a MatMul's rows, tasks/qconv.QMatMulTask): the outer tile loop in
        # parallel instead, or the kernel runs on one thread
        out.parallel(order[3] if task.out_h * task.n == 1 else oy)
        accm.compute_at(out, order[2])
        acc.compute_at(accm, lane)
    acc.store_in(hl.MemoryType(AMX_TILE)).vectorize(pixel[0]).vectorize(pixel[1])
    acc.update().reorder(r[0], *pixel, r[1], r[2], r[3]).atomic() \
        .vectorize(r[0]).vectorize(pixel[0]).vectorize(pixel[1])
    return compiled(__name__, task, config, threads, out,
                    [x, w, beta, mu, x_zp, y_zp, *extra], views(task))


def schedule_rows(hl, out, acc, accm, co, p, lane, r, channels: str, pad: int) -> None:
    """The schedule of a product over one row of pixels (qdense_amx, dense_bf16): `out[co, p]`
    in 16 × 16 tiles — the column tiles inside each row tile (`channels` "inner") or outside
    ("outer"), the outer loop parallel —, each tile's accumulator `acc[lane, p, tile]` (AMX
    tile storage, reduction `r` = (step values, steps)) copied into `accm`, whose storage is
    `pad` lanes wider than a tile (a dense copy is not matched: module docstring)."""
    oco, oci, xo, xi, li, pi = (hl.Var(v) for v in ("oco", "oci", "xo", "xi", "li", "pi"))
    out.output_buffer().dim(0).set_min(0)
    out.split(co, oco, oci, TILE, hl.TailStrategy.RoundUp).vectorize(oci)
    out.split(p, xo, xi, TILE, hl.TailStrategy.ShiftInwards)
    order = (oci, xi, oco, xo) if channels == "inner" else (oci, xi, xo, oco)
    out.reorder(*order).parallel(order[3])
    accm.bound(lane, 0, TILE).bound_storage(lane, TILE + pad)
    accm.tile(lane, p, li, pi, TILE, TILE, hl.TailStrategy.ShiftInwards) \
        .vectorize(li).vectorize(pi)
    accm.compute_at(out, order[2])
    acc.compute_at(accm, lane)
    acc.store_in(hl.MemoryType(AMX_TILE)).vectorize(lane).vectorize(p)
    acc.update().reorder(r[0], lane, p, r[1]).atomic() \
        .vectorize(r[0]).vectorize(lane).vectorize(p)
