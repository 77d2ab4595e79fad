"""AGO's reformer (AGO §V): divide-and-conquer tuning of a fused subgraph.

Contract: `split(task)` gives the mini-subgraphs of a conv chain (ops/chain.py) — AGO splits a
subgraph by Algorithm 1 into mini-subgraphs of at most one complex operator each; every conv of
a chain is complex, so they are its convs, each a conv2d task (the very task the unfused graph
would have). `join_seeds(task, space, part_configs)` composes the parts' best schedules into
configurations of the chain's template (engines/halide/conv_chain.py), the joined subgraph's
initial schedules: the last conv's register tile and parallel split become the output's tile,
each earlier conv's lanes and tile become its stage's, in strips of 4, 2 or 8 rows (a
depthwise last conv also in channel tiles), with the first stages whole and the rest per strip,
and, last, with every earlier stage at the root (the separate kernels' schedules, joined). Invalid
compositions are repaired knob by knob toward the space's values, or dropped.

The tuner (tune/tuner.py, `tune_templates`) tunes a chain's parts first with `SPLIT_SHARE` of
its time when the log has no valid record of them, then the chain with these seeds first.
"""

from __future__ import annotations

from woodpecker.tasks.chain import ChainTask
from woodpecker.tasks.conv import ConvTask
from woodpecker.tasks.space import Config, KnobSpace


def split(task: ChainTask) -> list[ConvTask]:
    return list(task.convs)


def _nearest(values: tuple, v) -> object:
    """The value of `values` nearest `v` (numbers), or `v` itself when it is one of them."""
    if v in values:
        return v
    nums = [x for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)]
    if not nums or not isinstance(v, (int, float)):
        return values[0]
    return min(nums, key=lambda x: (abs(x - v), x))


def _depthwise(t: ConvTask) -> bool:
    return t.groups == t.c == t.k > 1


def join_seeds(task: ChainTask, space: KnobSpace,
               part_configs: list[Config | None]) -> list[Config]:
    """Chain configurations composed from the parts' configurations (None: a part with no
    valid record; then nothing is composed)."""
    if any(c is None for c in part_configs) or len(part_configs) != len(task.convs):
        return []
    knobs = {k.name: k.values for k in space.knobs}
    last, lc = task.convs[-1], part_configs[-1]
    base: dict = {"vec": lc.get("vec", 8), "x_block": lc.get("x_block", 4),
                  "co_block": 1 if _depthwise(last) else lc.get("co_block", 1),
                  "co_outer": lc.get("parallel") == "co" and not _depthwise(last)}
    if "tile" in knobs:
        base.update(tile="rows", ch_tile=1)
    for i, c in enumerate(part_configs[:-1]):
        base[f"s{i}_vec"] = c.get("vec", 8)
        base[f"s{i}_x"] = c.get("x_block", 4)
        if f"s{i}_cb" in knobs:
            base[f"s{i}_cb"] = c.get("co_block", 1)
    variants = []
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
