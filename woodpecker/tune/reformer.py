"""AGO's reformer (AGO §V): divide-and-conquer tuning of a fused subgraph.

Contract: `split(task)` gives the mini-subgraphs of a conv chain (ops/chain.py) — AGO splits a
subgraph by Algorithm 1 into mini-subgraphs of at most one complex operator each; every conv of
a chain is complex, so they are its convs, each a conv2d task (the very task the unfused graph
would have). `join_seeds(task, space, part_configs)` composes the parts' best schedules into
configurations of the chain's template (engines/halide/conv_chain.py), the joined subgraph's
initial schedules: the last conv's register tile and parallel split become the output's tile
(a depthwise last conv's: one vector by the widest pixel tile dividing its row), each earlier
conv's lanes and tile become its stage's (a 1×1 stage's pixels flattened across rows when its
part's best kernel was conv_gemm's or its tile does not divide the row; its weights packed per
tile, as the part's were, where the space allows it), in strips of 4, 2 or 8 rows (a depthwise
last conv also in channel tiles), with the first stages whole and the rest per strip, and,
last, with every earlier stage at the root (the separate kernels' schedules, joined); a chain
ending in a depthwise conv first in channel tiles matched to the producing stage's tile
(`_matched_channel_tiles`). Invalid compositions are repaired knob by knob toward the space's
values, or dropped.

Attention (ops/attention.py) splits into its three complex operators' tasks — the scores'
product (with the scale and mask), the softmax rows, the product with V — the very tasks its
parts have when unfused (the strided views and the output transpose are no tasks). Its join
takes the scores' register tile (lanes, column vectors, rows) from the first product, the
output's from the second, the per-lane reductions and fast exp from the softmax, in row blocks
of 16, 32 and 8, with Kᵀ made once per call and per task. A mask the dense task cannot add (one
broadcast over some heads or rows but not all) leaves attention unsplit.

The tuner (tune/tuner.py, `tune_templates`) tunes a fused task's parts first with `SPLIT_SHARE`
of its time when the log has no valid record of them (a compile has tuned them already: they
are tasks of their own, tune/extract.py), then the fused task with these seeds first.
"""

from __future__ import annotations

from woodpecker.engines.halide.chain_space import depthwise
from woodpecker.engines.halide.conv_common import packable
from woodpecker.tasks import Task
from woodpecker.tasks.attention import AttentionTask
from woodpecker.tasks.chain import ChainTask
from woodpecker.tasks.dense import DenseTask
from woodpecker.tasks.rows import RowTask
from woodpecker.tasks.space import Config, KnobSpace


def split(task: ChainTask | AttentionTask) -> list[Task]:
    if isinstance(task, AttentionTask):
        return _attention_parts(task)
    return list(task.convs)


def _attention_parts(task: AttentionTask) -> list[Task]:
    full = "bmn" if task.batch > 1 else "mn"
    if any(a not in (full, "n") for a in task.masks):
        return []
    masks = tuple("full" if a == full else "row" for a in task.masks)
    return [DenseTask(task.batch, task.m, task.d, task.n, False, "", masks, task.scores,
                      task.dtype),
            RowTask(task.batch * task.m, task.n, "softmax", 0.0, False, task.dtype),
            DenseTask(task.batch, task.m, task.n, task.dv, False, "", (), (), task.dtype)]


def _nearest(values: tuple, v) -> object:
    """The value of `values` nearest `v` (numbers), or `v` itself when it is one of them."""
    if v in values:
        return v
    nums = [x for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)]
    if not nums or not isinstance(v, (int, float)):
        return values[0]
    return min(nums, key=lambda x: (abs(x - v), x))


def join_seeds(task: ChainTask | AttentionTask, space: KnobSpace,
               part_configs: list[Config | None]) -> list[Config]:
    """Configurations of the fused task composed from the parts' configurations (None: a part
    with no valid record; then nothing is composed)."""
    if any(c is None for c in part_configs) or len(part_configs) != len(split(task)) or \
            not part_configs:
        return []
    if isinstance(task, AttentionTask):
        return _join_attention(space, *part_configs)
    knobs = {k.name: k.values for k in space.knobs}
    last, lc = task.convs[-1], part_configs[-1]
    base: dict = {"vec": lc.get("vec", 8), "x_block": lc.get("x_block", 4),
                  "co_block": 1 if depthwise(last) else lc.get("co_block", 1),
                  "co_outer": lc.get("parallel") == "co" and not depthwise(last)}
    if "tile" in knobs:
        # a depthwise output tile is one vector by x_block pixels, not the part's c_block
        # vectors by x_block: the widest pixel tile that divides the row instead
        base.update(tile="rows", ch_tile=1,
                    x_block=_row_tile(knobs["x_block"], last.out_w, base["x_block"]))
    for i, c in enumerate(part_configs[:-1]):
        base[f"s{i}_vec"] = c.get("vec", 8)
        base[f"s{i}_x"] = c.get("x_block", 4)
        if f"s{i}_cb" in knobs:
            base[f"s{i}_cb"] = c.get("co_block", 1)
        if f"s{i}_flat" in knobs:
            # flattened where the part's kernel tiled flattened pixels (conv_gemm's), or where
            # the tile does not divide the row (tiles within it would overlap)
            base[f"s{i}_flat"] = "pack" not in c or task.convs[i].out_w % _nearest(
                knobs[f"s{i}_x"], base[f"s{i}_x"]) != 0
        if f"s{i}_pack" in knobs:       # packed as the part's kernel was (see `_packed`)
            base[f"s{i}_pack"] = base[f"s{i}_flat"] and c.get("pack", True)
    if "pack" in knobs:
        base["pack"] = lc.get("pack", True)
    variants = _matched_channel_tiles(task, knobs, base) if "tile" in knobs else []
    for rows in (4, 2, 8):
        variants.append(dict(base, rows=rows, **{f"s{i}_at": "strip"
                                                 for i in range(len(task.convs) - 1)}))
    if "tile" in knobs:
        variants.append(dict(base, rows=1, co_outer=False, tile="channels",
                             ch_tile=_nearest(knobs["ch_tile"], part_configs[-1].get(
                                 "c_block", 2)),
                             **{f"s{i}_at": "strip" for i in range(len(task.convs) - 1)}))
    m = len(task.convs) - 1
    for k in range(1, m):            # the first k stages whole, the rest per strip
        variants.append(dict(base, rows=4, **{f"s{i}_at": "root" if i < k else "strip"
                                               for i in range(m)}))
    variants.append(dict(base, rows=1, co_outer=False,
                         **{f"s{i}_at": "root" for i in range(m)}))
    return _valid(space, [_packed(task, v) for v in variants])


def _packed(task: ChainTask, v: dict) -> dict:
    """Variant `v` with each stage's weights packed only where the space allows it: tiles
    padded a little (`conv_common.packable`), or in a depthwise last conv's channel tiles
    blocks that tile them exactly."""
    v = dict(v)
    for i, t in enumerate(task.convs):
        key = "pack" if i == len(task.convs) - 1 else f"s{i}_pack"
        if v.get(key):
            lanes = v["vec"] if key == "pack" else v[f"s{i}_vec"]
            tile = lanes * (v["co_block"] if key == "pack" else v.get(f"s{i}_cb", 1))
            if v.get("tile") == "channels":
                width = v["vec"] * v["ch_tile"]
                v[key] = task.convs[-1].k % width == 0 and width % tile == 0
            else:
                v[key] = packable(t.k, tile, lanes)
    return v


def _matched_channel_tiles(task: ChainTask, knobs: dict, base: dict) -> list[dict]:
    """A chain ending in a depthwise conv, in channel tiles over the whole image (no halo to
    recompute), each tile filled by the producing stage's register tile (its accumulator
    block adjusted): the widest such tile, then the two `ch_tile`s nearest the producer's own
    width — so that the stage's tile and the consumer's cover the same channels, where the
    parts' own tiles (a depthwise conv alone keeps a narrow one) leave part tiles."""
    m = len(task.convs) - 1
    p, vec = m - 1, base["vec"]
    width = base[f"s{p}_vec"] * base.get(f"s{p}_cb", 1)
    near = sorted(knobs["ch_tile"], key=lambda ch: (abs(ch * vec - width), -ch))[:2]
    # First the widest tile the producer's accumulator block can fill: each channel tile
    # reads the stage's whole input, so wider tiles read it fewer times.
    blocks = max(knobs.get(f"s{p}_cb", (1,)))
    wide = max((ch for ch in knobs["ch_tile"] if ch * vec <= blocks * base[f"s{p}_vec"]
                and task.convs[-1].k % (ch * vec) == 0), default=None)
    if wide is not None and wide not in near:
        near.insert(0, wide)
    out = []
    for ch in near:
        v = dict(base, rows=1, co_outer=False, tile="channels", ch_tile=ch,
                 **{f"s{i}_at": "strip" for i in range(m)})
        cb = ch * vec // base[f"s{p}_vec"]
        if f"s{p}_cb" in knobs and cb in knobs[f"s{p}_cb"]:
            v[f"s{p}_cb"] = cb
        out.append(v)
    return out


def _row_tile(values: tuple, width: int, fallback: int) -> int:
    """The widest pixel tile of `values` that divides a row of `width` pixels (shifted
    tiles would recompute the overlap), else the value nearest `fallback`."""
    return max((x for x in values if width % x == 0 and x > 1), default=None) or \
        _nearest(values, fallback)


def _join_attention(space: KnobSpace, qk: Config, soft: Config, pv: Config) -> list[Config]:
    base = {"vec": qk.get("vec", 8), "s_block": qk.get("n_block", 2),
            "s_rows": qk.get("m_block", 4), "o_block": pv.get("n_block", 2),
            "o_rows": pv.get("m_block", 4), "rfactor": soft.get("rfactor", True),
            "fast_exp": soft.get("fast_exp", False)}
    variants = [dict(base, rows=rows, k_at=at) for at in ("root", "task")
                for rows in (16, 32, 8)]
    return _valid(space, variants)


def _valid(space: KnobSpace, variants: list[dict]) -> list[Config]:
    """The variants snapped to the space's values and repaired, without repeats."""
    knobs = {k.name: k.values for k in space.knobs}
    out, seen = [], set()
    for v in variants:
        c = _repair(space, {k: _nearest(knobs[k], v.get(k, knobs[k][0])) for k in knobs})
        if c is not None and KnobSpace.key(c) not in seen:
            seen.add(KnobSpace.key(c))
            out.append(c)
    return out


def _repair(space: KnobSpace, config: Config) -> Config | None:
    """`config` if valid, else the first valid one found by lowering one numeric knob at a
    time (tiles shrink until they fit), or None."""
    if space.is_valid(config):
        return config
    c = dict(config)
    for _ in range(16):
        for k in space.knobs:
            values = [v for v in k.values if isinstance(v, int) and not isinstance(v, bool)]
            if c[k.name] in values and values.index(c[k.name]) > 0:
                trial = dict(c, **{k.name: values[values.index(c[k.name]) - 1]})
                if space.is_valid(trial):
                    return trial
        # lower the largest-index numeric knob and try again
        movable = [k for k in space.knobs if isinstance(c[k.name], int) and
                   not isinstance(c[k.name], bool) and k.values.index(c[k.name]) > 0]
        if not movable:
            return None
        k = max(movable, key=lambda k: k.values.index(c[k.name]))
        c[k.name] = k.values[k.values.index(c[k.name]) - 1]
        if space.is_valid(c):
            return c
    return None
