"""The conv chain template's knob space (engines/halide/conv_chain.py; AGO §III's intensive
fusion): the output's register tile and strips, and per earlier stage where it is computed
(`s{i}_at`), its lanes and tile, and for a 1×1 stage flattened pixels (`s{i}_flat`) and weights
packed per channel tile (`s{i}_pack`; the last 1×1 conv's `pack`).

Contract: `space(task, vector_registers)` → KnobSpace with seeds; `depthwise(t)`,
`pointwise(t)` classify a chain's convs. Packed stages follow conv_gemm's rule for padded
tiles (`conv_common.packable`).
"""

from __future__ import annotations

from woodpecker.engines.halide.conv_common import fits_registers, packable
from woodpecker.tasks.chain import ChainTask
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.space import Constraint, Knob, KnobSpace


def depthwise(t: ConvTask) -> bool:
    return t.groups == t.c == t.k > 1


def pointwise(t: ConvTask) -> bool:
    """A dense 1×1 conv of stride 1 without padding: its pixels can be flattened (`s{i}_flat`)."""
    return t.groups == 1 and t.kh == t.kw == 1 and t.stride == (1, 1) and not any(t.pads)


def _seeds(task: ChainTask) -> tuple[dict, ...]:
    """Register tiles of 16 or 24 channels by 4-6 pixels in strips of 2 or 4 rows, earlier
    stages per strip (16 or 8 lanes; 1×1s flattened, and packed where `packable`); 8 × 4
    tiles for narrow outputs; every earlier stage at the root; the first once more in rows."""
    earlier = range(len(task.convs) - 1)
    out = []
    for vec, cb, xb, rows, lanes, at in ((16, 1, 6, 2, 16, "strip"), (8, 2, 6, 2, 16, "strip"),
                                         (8, 3, 4, 4, 16, "strip"), (8, 2, 4, 4, 8, "strip"),
                                         (8, 1, 4, 2, 8, "strip"), (16, 1, 6, 1, 16, "root")):
        seed = {"vec": vec, "co_block": cb, "x_block": xb, "co_outer": False, "rows": rows}
        for i in earlier:
            seed.update({f"s{i}_at": at, f"s{i}_vec": lanes, f"s{i}_x": 4})
            if not depthwise(task.convs[i]):
                seed[f"s{i}_cb"] = 2 if lanes == 8 else 1
            if pointwise(task.convs[i]):
                seed[f"s{i}_flat"] = True
                seed[f"s{i}_pack"] = packable(task.convs[i].k, lanes * seed.get(f"s{i}_cb", 1),
                                              lanes)
        if depthwise(task.convs[-1]):
            seed.update(tile="rows", ch_tile=1, co_block=1)
        elif pointwise(task.convs[-1]):
            seed["pack"] = packable(task.convs[-1].k, vec * cb, vec)
        out.append(seed)
    if any(pointwise(t) for t in task.convs[:-1]):
        out.append({k: False if k.endswith(("_flat", "_pack")) else v
                    for k, v in out[0].items()})
    if depthwise(task.convs[-1]):      # channel tiles of 32 or 16: no halo recomputed
        for vec, ch in ((16, 2), (8, 2), (8, 4)):
            seed = {"vec": vec, "co_block": 1, "x_block": 4, "co_outer": False, "rows": 1,
                    "tile": "channels", "ch_tile": ch}
            for i in earlier:
                seed.update({f"s{i}_at": "strip", f"s{i}_vec": 8, f"s{i}_x": 4})
                if not depthwise(task.convs[i]):
                    seed[f"s{i}_cb"] = 2
                if pointwise(task.convs[i]):
                    seed[f"s{i}_flat"] = True
                    seed[f"s{i}_pack"] = task.convs[i].k % (8 * 2) == 0   # exact blocks
            out.insert(0, seed)
    return tuple(out)


def space(task: ChainTask, vector_registers: int = 16) -> KnobSpace:
    last = task.convs[-1]
    knobs = [Knob("vec", (4, 8, 16)), Knob("co_block", (1, 2, 3, 4)),
             Knob("x_block", (1, 2, 3, 4, 5, 6, 7, 8)), Knob("co_outer", (False, True)),
             Knob("rows", (1, 2, 4, 8, 16))]
    constraints = [
        fits_registers(vector_registers, "co_block", 1),
        Constraint("channel tile within the output channels",
                   lambda c: c["vec"] * c["co_block"] <= last.k),
        Constraint("pixel tile within the output row", lambda c: c["x_block"] <= last.out_w),
        Constraint("strip within the output rows", lambda c: c["rows"] <= last.out_h),
    ]
    if pointwise(last):
        knobs.append(Knob("pack", (False, True)))
        constraints.append(Constraint(
            "packed weights: channel tiles padded by less than a vector or a third",
            lambda c: not c["pack"] or packable(last.k, c["vec"] * c["co_block"], c["vec"])))
    if depthwise(last):
        knobs += [Knob("tile", ("rows", "channels")), Knob("ch_tile", (1, 2, 4, 8))]
        constraints += [
            Constraint("a depthwise output tile is one vector of channels",
                       lambda c: c["co_block"] == 1),
            Constraint("channel tiles within the channels",
                       lambda c: c["vec"] * c["ch_tile"] <= last.k),
            Constraint("channel tiles are the tasks, not strips",
                       lambda c: c["tile"] == "rows" and c["ch_tile"] == 1 or
                       c["tile"] == "channels" and c["rows"] == 1 and not c["co_outer"]
                       and all(c[f"s{i}_at"] == "strip" for i in range(len(task.convs) - 1))),
            Constraint("earlier stages' lanes within a channel tile",
                       lambda c: c["tile"] == "rows" or
                       all(c[f"s{i}_vec"] * c.get(f"s{i}_cb", 1) <= c["vec"] * c["ch_tile"]
                           for i in range(len(task.convs) - 1))),
            Constraint("packed stages' blocks tile the channel tiles, which tile the channels",
                       lambda c: c["tile"] == "rows" or all(
                           last.k % (c["vec"] * c["ch_tile"]) == 0 and
                           c["vec"] * c["ch_tile"] % (c[f"s{i}_vec"] * c[f"s{i}_cb"]) == 0
                           for i in range(len(task.convs) - 1) if c.get(f"s{i}_pack"))),
        ]
    lanes = 16 if vector_registers >= 32 else 8
    for i, t in enumerate(task.convs[:-1]):
        knobs += [Knob(f"s{i}_at", ("strip", "root")), Knob(f"s{i}_vec", (4, 8, 16)),
                  Knob(f"s{i}_x", (1, 2, 3, 4, 6, 8))]
        if pointwise(t):
            knobs += [Knob(f"s{i}_flat", (True, False)), Knob(f"s{i}_pack", (False, True))]
            constraints.append(Constraint(
                f"stage {i}'s weights packed only when flattened (tiles padded a little)",
                lambda c, i=i, t=t: not c[f"s{i}_pack"] or c[f"s{i}_flat"]
                and packable(t.k, c[f"s{i}_vec"] * c[f"s{i}_cb"], c[f"s{i}_vec"])))
            # (one-pixel flattened tiles per strip read past the image: a Halide bounds quirk)
            constraints.append(Constraint(
                f"stage {i} flattened in tiles of two pixels or more",
                lambda c, i=i: not c[f"s{i}_flat"] or c[f"s{i}_x"] > 1))
        if not depthwise(t):       # a dense stage's accumulator tile: cb vectors × x pixels
            knobs.append(Knob(f"s{i}_cb", (1, 2, 3, 4)))
            constraints.append(Constraint(
                f"stage {i}'s accumulators fit the vector registers",
                lambda c, i=i: c[f"s{i}_cb"] * c[f"s{i}_x"] * max(1, c[f"s{i}_vec"] // lanes)
                <= vector_registers - 1))
        constraints += [
            Constraint(f"stage {i}'s lanes within its channels",
                       lambda c, i=i, t=t: c[f"s{i}_vec"] * c.get(f"s{i}_cb", 1) <= t.k),
            Constraint(f"stage {i}'s pixels within its row",
                       lambda c, i=i, t=t: c[f"s{i}_x"] <= t.out_w),
        ]
    n = len(task.convs) - 1
    constraints.append(Constraint(
        "a stage per strip only before stages per strip (a root stage's inputs are whole)",
        lambda c: all(c[f"s{j}_at"] == "strip" for i in range(n) if c[f"s{i}_at"] == "strip"
                      for j in range(i + 1, n))))
    constraints.append(Constraint(
        "strips of one row when every earlier stage is at the root",
        lambda c: any(c[f"s{i}_at"] == "strip" for i in range(n)) or
        (c["rows"] == 1 and not c["co_outer"])))
    return KnobSpace(knobs, constraints, _seeds(task))
