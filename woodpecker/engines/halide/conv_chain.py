"""Conv chain (ops/chain.py: convs each reading only the one before) as one kernel, NHWC, each
conv's epilogue fused — AGO's intensive fusion (AGO §III) for 1×1 → depthwise (→ 1×1) and
conv → 1×1 chains.

Algorithm: stage i computes conv i on stage i − 1's result (the input for stage 0), zero-padded
where conv i pads: a dense conv as a reduction over input channels and window into an
accumulator, a depthwise conv as its window's taps written out; each stage's epilogue applies
as the next stage reads it (the last's, with the residuals, on the output).

Schedule: the output (the last conv) is tiled like conv_direct's — `vec` lanes × `co_block`
vectors of channels by `x_block` pixels, `co_outer` putting channel tiles outside the pixel
tiles — in parallel strips of `rows` output rows. Each earlier stage i is computed (`s{i}_at`)
per strip (`strip`: the rows the strip's later stages read, a window's k − 1 extra rows
recomputed by the neighbouring strip — the price of keeping the intermediate in cache) or
whole before the output (`root`: separate kernels' memory traffic, less the calls), over
channels by `s{i}_vec` lanes, a dense stage accumulating `s{i}_cb` vectors × `s{i}_x` pixels in
registers. A 1×1 stage of stride 1 may run over flattened pixels (`s{i}_flat`: p = y·W + x,
register tiles across row ends as conv_gemm's, where 7- and 14-pixel rows leave part tiles)
with its weights packed per channel tile (`s{i}_pack`: a tile's reduction streams them
contiguously, not T floats every K); a last 1×1 conv always computes over flattened pixels
(`_flat_last`), packed by `pack`. The knobs, their constraints and seeds: chain_space.py.
Computing a stage inline in its reader — AGO's third place — is not offered: every reader here
is a conv reading each value k² or C times, so inlining would recompute it as often.
"""

from __future__ import annotations

from typing import NamedTuple

from woodpecker.config import CHAIN_CO_TASKS
from woodpecker.engines.halide.aot import AotKernel, halide_module
from woodpecker.engines.halide.chain_space import depthwise, pointwise
from woodpecker.engines.halide.chain_space import space as space  # the template's knob space
from woodpecker.engines.halide.conv_common import (
    EPILOGUE_OPS,
    ConvInputs,
    epilogue_expr,
    own_shapes,
    packed_weights,
    whole_tiles,
)
from woodpecker.engines.halide.template_parts import aligned_channel_tiles, compiled
from woodpecker.tasks.chain import ChainTask
from woodpecker.tasks.conv import ConvTask

KIND = "convchain"


class _Stage(NamedTuple):
    """One conv as Funcs: `func` the next stage reads (the output for the last), `acc` a dense
    conv's accumulator over `rvars`, `flat` a `_flat_stage`'s Func over flattened pixels."""

    func: object
    acc: object = None
    rvars: tuple = ()
    flat: object = None


def _packed_tile(task: ChainTask, config: dict, i: int) -> int:
    """Stage i's channel tile if its weights are packed (`s{i}_pack`, the last's `pack`), or 0."""
    if i == len(task.convs) - 1:
        return config["vec"] * config["co_block"] if config.get("pack") else 0
    return config[f"s{i}_vec"] * config.get(f"s{i}_cb", 1) if config.get(f"s{i}_pack") else 0


def arguments(task: ChainTask, config: dict, inputs: list) -> list:
    """The kernel's arguments (`ChainTask.random_inputs` order): each packed stage's HWIO
    weights as (⌈K/T⌉, C, T) for its tile T (`conv_common.packed_weights`: zero-padded to whole
    tiles), the rest as given."""
    out, at = list(inputs), 1
    for i, t in enumerate(task.convs):
        tile = _packed_tile(task, config, i)
        if tile and out[at] is not None:
            out[at] = packed_weights(out[at], tile)
        at += 1 + t.has_bias
    return out


def supports(task: ChainTask) -> bool:
    convs = task.convs
    return task.dtype == "float32" and len(convs) >= 2 \
        and all(c.groups == 1 or depthwise(c) for c in convs) \
        and all(s[0] in EPILOGUE_OPS for c in convs for s in c.epilogue) \
        and all(s[0] != "Add" for c in convs[:-1] for s in c.epilogue) \
        and not any(c.prologue for c in convs)


def views(task: ChainTask) -> list | None:
    """A chain ending in a 1×1 conv (`pointwise`) computes its output over flattened pixels
    (`_flat_last`): its residuals and output are then seen as (N, H·W, K), the other
    arguments in their own shapes."""
    last = task.convs[-1]
    if not pointwise(last):
        return own_shapes(task)
    pixels = (last.n, last.out_h * last.out_w, last.k)
    args = 1 + sum(1 + c.has_bias for c in task.convs)
    return [None] * args + [pixels] * sum(1 for s in last.epilogue if s[0] == "Add") + [pixels]


def _flat_stage(hl, t: ConvTask, io: ConvInputs, inp, name: str, tile: int):
    """An earlier 1×1 stage over flattened pixels p = y·W + x (`s{i}_flat`): its register
    tiles run across row ends like conv_gemm's, where a 7- or 14-pixel row otherwise leaves part
    tiles; the next stage reads it through a 2-D view. `tile`: see `_flat_acc`."""
    acc, r, value = _flat_acc(hl, t, io, inp, name + "_acc", tile)
    c, x, y, n, p = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n"), hl.Var("p")
    flat = hl.Func(name + "_flat")
    flat[c, p, n] = epilogue_expr(hl, value(c, p, n), t.epilogue, [], (c, p, n))
    f = hl.Func(name)
    f[c, x, y, n] = flat[c, y * t.out_w + x, n]
    return _Stage(f, acc, (r.x,), flat)


def _flat_last(hl, t: ConvTask, io: ConvInputs, inp, tile: int):
    """The last stage, a 1×1 conv, over flattened pixels p = y·W + x: the output Func is
    (c, p, n) (see `views`), so a strip is `rows`·W consecutive pixels and its register tiles
    run across row ends, as conv_gemm's. `tile`: see `_flat_acc`."""
    acc, r, value = _flat_acc(hl, t, io, inp, "out_acc", tile)
    c, p, n = hl.Var("c"), hl.Var("p"), hl.Var("n")
    return _Stage(io.output(value(c, p, n), (c, p, n)), acc, (r.x,))


def _flat_acc(hl, t: ConvTask, io: ConvInputs, inp, name: str, tile: int):
    """1×1 conv `t` of Func `inp` over flattened pixels (p = y·W + x): (the accumulator, its
    reduction over the input channels, value(c, p, n)). With `tile` > 0 the weights are packed
    ([lane, ci, tile], see `arguments`) and the accumulator blocked like them, acc[lane, p,
    tile, n] (c % T, c / T inside the reduction defeats dense vector loads)."""
    c, n, p = hl.Var("c"), hl.Var("n"), hl.Var("p")
    r = hl.RDom([(0, t.c)])
    acc = hl.Func(name)
    pixel = inp[r.x, p % t.out_w, p / t.out_w, n]
    if not tile:
        acc[c, p, n] = io.bias(c)
        acc[c, p, n] += io.w[c, r.x, 0, 0] * pixel
        return acc, r, lambda c, p, n: acc[c, p, n]
    cl, cot, whole = hl.Var("cl"), hl.Var("cot"), t.k % tile == 0
    # A padded last tile would read the bias past its end: add it to the value instead (an
    # intermediate is computed over the padded channels too, which no reader reads).
    acc[cl, p, cot, n] = io.bias(cot * tile + cl) if whole else hl.f32(0.0)
    acc[cl, p, cot, n] += io.w[cl, r.x, cot] * pixel
    acc.bound(cl, 0, tile)

    def value(c, p, n):
        v = acc[c % tile, p, c / tile, n]
        return v if whole else v + io.bias(hl.min(c, t.k - 1))
    return acc, r, value


def _stage(hl, t: ConvTask, io: ConvInputs, inp, name: str, last: bool):
    """Stage Funcs for conv `t` reading Func `inp` (zero-padded as needed), in rows."""
    c, x, y, n = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n")
    (sy, sx), (dy, dx) = t.stride, t.dilation
    top, left = t.pads[0], t.pads[1]
    if depthwise(t):
        e = io.bias(c)
        for ky in range(t.kh):
            for kx in range(t.kw):
                e = e + io.w[c, 0, kx, ky] * inp[c, x * sx + kx * dx - left,
                                                  y * sy + ky * dy - top, n]
        if last:
            return _Stage(io.output(e, (c, x, y, n)))
        f = hl.Func(name)
        f[c, x, y, n] = epilogue_expr(hl, e, t.epilogue, [], (c, x, y, n))
        return _Stage(f)
    r = hl.RDom([(0, t.c), (0, t.kw), (0, t.kh)])
    acc = hl.Func(name + "_acc")
    acc[c, x, y, n] = io.bias(c)
    acc[c, x, y, n] += io.w[c, r.x, r.y, r.z] * inp[r.x, x * sx + r.y * dx - left,
                                                     y * sy + r.z * dy - top, n]
    if last:
        return _Stage(io.output(acc[c, x, y, n], (c, x, y, n)), acc, (r.x, r.y, r.z))
    f = hl.Func(name)
    f[c, x, y, n] = epilogue_expr(hl, acc[c, x, y, n], t.epilogue, [], (c, x, y, n))
    return _Stage(f, acc, (r.x, r.y, r.z))


def _zero_exterior(hl, f, t: ConvTask):
    """Stage `f` (conv `t`'s output) read as zero outside its pixels, as the next conv pads
    it. Only the pixels are bounded: Halide's constant_exterior bounds the channels too, and
    its clamp on a vector of channels made the reader's loads gathers."""
    c, x, y, n = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n")
    inside = (x >= 0) & (x < t.out_w) & (y >= 0) & (y < t.out_h)
    g = hl.Func(f.name() + "_padded")
    g[c, x, y, n] = hl.select(inside, f[c, hl.clamp(x, 0, t.out_w - 1),
                                        hl.clamp(y, 0, t.out_h - 1), n], hl.f32(0.0))
    return g


def build(task: ChainTask, config: dict, threads: int = 2) -> AotKernel:
    """Compile `task` with `config`; run(*arrays) takes `ChainTask.random_inputs`' order."""
    hl = halide_module()
    convs = task.convs
    flat_last = pointwise(convs[-1])
    tiles = [_packed_tile(task, config, i) for i in range(len(convs))]
    ios = [ConvInputs(hl, t, prefix=f"s{i}", weight_dims=3 if tiles[i] else 4,
                      out_dims=3 if flat_last and i == len(convs) - 1 else 4)
           for i, t in enumerate(convs)]
    params = list(ios[0].params)
    for io in ios[1:]:
        params += io.params[1:]
    inp, stages = ios[0].padded, []
    for i, (t, io) in enumerate(zip(convs, ios)):
        last = i == len(convs) - 1
        if last and flat_last:
            stage = _flat_last(hl, t, io, inp, tiles[i])
        elif not last and config.get(f"s{i}_flat"):
            stage = _flat_stage(hl, t, io, inp, f"s{i}", tiles[i])
        else:
            stage = _stage(hl, t, io, inp, f"s{i}", last)
        stages.append(stage)
        f = stage.func
        inp = f if last or not any(convs[i + 1].pads) else _zero_exterior(hl, f, t)
    _schedule(hl, task, stages, config)
    return compiled(__name__, task, config, threads, stages[-1].func, params, views(task))


def _schedule(hl, task: ChainTask, stages, config: dict) -> None:
    out, acc, rvars, _ = stages[-1]
    channels = [t.k for t in task.convs]
    vec, cb = config["vec"], config["co_block"]
    tail = hl.TailStrategy.ShiftInwards
    co, ci, xo, xi, yo, yi = (hl.Var(v) for v in ("co", "ci", "xo", "xi", "yo", "yi"))
    if config.get("tile") == "channels":
        _channel_tiles(hl, stages, config, tuple(out.args()), (co, ci, xo, xi), channels)
        return
    if len(out.args()) == 3:         # flattened pixels (`_flat_last`): strips of rows·W
        c, p, n = out.args()
        if config.get("pack"):       # tiles aligned with the packed weights' blocks
            aligned_channel_tiles(hl, out, c, co, ci, vec * cb,
                                  whole=task.convs[-1].k % (vec * cb) == 0)
        else:
            out.split(c, co, ci, vec * cb, tail)
        out.split(p, yo, yi, config["rows"] * task.convs[-1].out_w, tail)
        out.split(yi, xo, xi, config["x_block"], tail)
        outer = (yo, n)
    else:
        c, x, y, n = out.args()
        out.split(c, co, ci, vec * cb, tail).split(x, xo, xi, config["x_block"], tail)
        out.split(y, yo, yi, config["rows"], tail)
        outer = (yi, yo, n)
    out.vectorize(ci, vec).unroll(ci).unroll(xi)
    if config["co_outer"]:
        out.reorder(ci, xi, xo, co, *outer)
        at = xo
    else:
        out.reorder(ci, xi, co, xo, *outer)
        at = co
    out.fuse(yo, n, yo).parallel(yo)
    if acc is not None:
        ac, ax = acc.args()[0], acc.args()[1]
        acc.compute_at(out, at).vectorize(ac, vec).unroll(ac).unroll(ax)
        acc.update().reorder(ac, ax, *rvars).vectorize(ac, vec).unroll(ac).unroll(ax)
    _earlier(hl, stages, config, lambda f: f.compute_at(out, yo), channels)


def _channel_tiles(hl, stages, config: dict, axes, tile_vars, channels: list[int]) -> None:
    """A depthwise last stage in parallel tiles of `ch_tile` channel vectors over the whole
    image, each earlier stage computed per tile (its channels over the whole image: a
    depthwise conv reads only its own channel, so no halo is recomputed)."""
    out = stages[-1].func
    c, x, y, n = axes
    co, ci, xo, xi = tile_vars
    vec, tail = config["vec"], hl.TailStrategy.ShiftInwards
    cv, width = hl.Var("cv"), vec * config["ch_tile"]
    if any(config.get(f"s{i}_pack") for i in range(len(stages) - 1)):
        aligned_channel_tiles(hl, out, c, co, ci, width)    # so are the packed stages' tiles
    else:
        out.split(c, co, ci, width, tail)
    out.split(ci, cv, ci, vec, tail)
    out.split(x, xo, xi, config["x_block"], tail)
    out.reorder(ci, xi, cv, xo, y, co, n).vectorize(ci).unroll(xi)
    out.fuse(co, n, co).parallel(co)
    _earlier(hl, stages, config, lambda f: f.compute_at(out, co), channels)


def _earlier(hl, stages, config: dict, per_strip, channels: list[int]) -> None:
    """Schedule the stages before the last: at the root (rows in parallel) or `per_strip`;
    vectorised over channels with a pixel tile, a dense stage's accumulator per tile."""
    tail = hl.TailStrategy.ShiftInwards
    for i, (f, facc, frv, flat) in enumerate(stages[:-1]):
        lanes, px = config[f"s{i}_vec"], config[f"s{i}_x"]
        if flat is not None:
            _flat_schedule(hl, flat, facc, frv, config, i, channels[i], per_strip)
            continue
        sc, sx, sy = f.args()[0], f.args()[1], f.args()[2]
        if config[f"s{i}_at"] == "root":
            f.compute_root().parallel(sy)
        else:
            per_strip(f)
        cb = config.get(f"s{i}_cb", 1)
        dc, dci, dxo, dxi = (hl.Var(v) for v in (f"s{i}c", f"s{i}ci", f"s{i}xo", f"s{i}xi"))
        f.split(sc, dc, dci, lanes * cb, tail).split(sx, dxo, dxi, px, tail)
        f.reorder(dci, dxi, dc, dxo, sy, f.args()[3]).vectorize(dci, lanes).unroll(dci) \
            .unroll(dxi)
        if facc is not None:
            fc, fx = facc.args()[0], facc.args()[1]
            facc.compute_at(f, dc).vectorize(fc, lanes).unroll(fc).unroll(fx)
            facc.update().reorder(fc, fx, *frv).vectorize(fc, lanes).unroll(fc).unroll(fx)


def _flat_schedule(hl, flat, acc, rvars, config: dict, i: int, channels: int,
                   per_strip) -> None:
    """Stage i over flattened pixels: tiles of `s{i}_cb` vectors × `s{i}_x` pixels, pixels
    across row ends; at the root, channel tiles in parallel when there are at least
    `config.CHAIN_CO_TASKS` of them (each tile's weights then stay in one core's cache, as
    conv_gemm's `co`), else pixel tiles."""
    tail = hl.TailStrategy.ShiftInwards
    lanes, cb, px = config[f"s{i}_vec"], config.get(f"s{i}_cb", 1), config[f"s{i}_x"]
    c, p, n = flat.args()
    co, ci, po, pi = (hl.Var(v) for v in (f"s{i}co", f"s{i}ci", f"s{i}po", f"s{i}pi"))
    if config.get(f"s{i}_pack"):
        # Tiles start at the weights' blocks, provably (else Halide computes two blocks per
        # tile): aligned output channel tiles (`_channel_tiles`), else all channels per strip.
        if config.get("tile") != "channels":
            flat.bound(c, 0, whole_tiles(channels, lanes * cb))
        flat.split(c, co, ci, lanes * cb, hl.TailStrategy.RoundUp)
    else:
        flat.split(c, co, ci, lanes * cb, tail)
    flat.split(p, po, pi, px, tail)
    flat.vectorize(ci, lanes).unroll(ci).unroll(pi)
    if config[f"s{i}_at"] == "root":
        flat.compute_root()
        if -(-channels // (lanes * cb)) >= CHAIN_CO_TASKS:
            flat.reorder(ci, pi, po, co, n).parallel(co)
            at = po
        else:
            flat.reorder(ci, pi, co, po, n).parallel(po)
            at = co
    else:
        per_strip(flat)
        flat.reorder(ci, pi, co, po, n)
        at = co
    ac, ap = acc.args()[0], acc.args()[1]
    acc.compute_at(flat, at).vectorize(ac, lanes).unroll(ac).unroll(ap)
    acc.update().reorder(ac, ap, *rvars).vectorize(ac, lanes).unroll(ac).unroll(ap)
