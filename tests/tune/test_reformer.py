"""AGO's reformer (tune/reformer.py): a conv chain's parts are tuned first, then the chain
starts from their composed schedules; compositions are valid chain configurations that carry
the parts' tiles; a part already in the log is not tuned again."""

from __future__ import annotations

import random

import pytest

from tests.engines.test_halide_conv import CHAINS
from woodpecker.engines.halide import conv_chain
from woodpecker.engines.halide.templates import template_module, templates_for
from woodpecker.tasks.space import KnobSpace
from woodpecker.tune.measure import Measurement
from woodpecker.tune.records import TuningLog
from woodpecker.tune.reformer import join_seeds, split
from woodpecker.tune.tuner import tune_templates


class CountingMeasurer:
    """Every candidate valid, its cost a hash of its config (no compiling)."""

    def __init__(self):
        self.calls = []

    def measure(self, template, task, config, reference=None):
        self.calls.append((task.key, KnobSpace.key(config)))
        return Measurement(1e-3 * (1 + hash(KnobSpace.key(config)) % 97 / 97), None, 0.0)


@pytest.mark.parametrize("task", CHAINS, ids=lambda t: t.describe())
def test_composed_seeds_are_valid_and_carry_the_parts_tiles(task):
    space = conv_chain.space(task)
    rng = random.Random(0)
    parts = [template_module(templates_for(p)[0]).space(p).sample(rng) for p in split(task)]
    seeds = join_seeds(task, space, parts)
    assert seeds and all(space.is_valid(s) for s in seeds)
    assert any(s["s0_at"] == "root" for s in seeds) and any(s["s0_at"] == "strip" for s in seeds)
    assert join_seeds(task, space, parts[:-1] + [None]) == []


def test_parts_are_tuned_first_and_the_chain_starts_from_their_composition(tmp_path):
    task = CHAINS[0]
    log = TuningLog(tmp_path / "log.jsonl")
    m = CountingMeasurer()
    tune_templates(task, templates_for(task), m, log, search="ga", seed=0,
                   vector_registers=16, max_trials=40)
    keys = [k for k, _ in m.calls]
    parts = [p.key for p in split(task)]
    first_chain = keys.index(task.key)
    assert set(keys[:first_chain]) == set(parts)          # every part before the chain
    assert first_chain <= 0.4 * 40 + len(parts)           # SPLIT_SHARE of the trials
    composed = join_seeds(task, conv_chain.space(task),
                          [log.best(p).config for p in parts])
    assert m.calls[first_chain][1] == KnobSpace.key(composed[0])
    # the parts are in the log now: a second chain search measures none of them
    m2 = CountingMeasurer()
    tune_templates(task, templates_for(task), m2, log, search="ga", seed=1,
                   vector_registers=16, max_trials=10)
    assert {k for k, _ in m2.calls} == {task.key}


def test_attention_splits_into_its_unfused_parts_tasks_and_joins_their_tiles():
    """Attention's parts are the very tasks its unfused nodes have (so a compile's records of
    them serve Join), and the composition carries the products' register tiles."""
    from tests.passes.test_fuse_attention import attention_model
    from woodpecker.engines.halide import attention
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.passes import AGO, optimize
    from woodpecker.passes.unfuse import apart
    from woodpecker.tasks import task_from_node

    for mask in ("none", "full", "keys"):
        graph = import_onnx(attention_model(2, 16, 8, mask=mask))
        optimize(graph, AGO)
        (node,) = [n for n in graph.nodes if n.op == "FusedAttention"]
        task = task_from_node(node)
        unfused = [task_from_node(p) for p in apart(node)]
        assert [p.key for p in split(task)] == [t.key for t in unfused if t is not None]
    qk = {"vec": 8, "n_block": 1, "m_block": 3, "parallel": "m", "k_unroll": 1, "pack": False}
    soft = {"vec": 8, "grain": 4, "rfactor": False, "stash": True, "fast_exp": True}
    pv = {"vec": 8, "n_block": 2, "m_block": 4, "parallel": "n", "k_unroll": 2, "pack": False}
    space = attention.space(task)
    seeds = join_seeds(task, space, [qk, soft, pv])
    assert seeds and all(space.is_valid(s) for s in seeds)
    assert all(s["s_block"] == 1 and s["o_block"] == 2 and s["o_rows"] == 4 and s["fast_exp"]
               for s in seeds)
    assert join_seeds(task, space, [qk, None, pv]) == []


def test_a_depthwise_ending_chain_joins_first_in_tiles_matched_to_its_producer():
    """1×1 → depthwise: the first compositions are channel tiles as wide as the 1×1 stage's
    register tile (the nearest two widths, the stage's block filling the tile), the depthwise
    conv's pixel tile the widest dividing its row; a 1×1 tile that does not divide the row is
    flattened."""
    from woodpecker.tasks.chain import ChainTask
    from woodpecker.tasks.conv import ConvTask

    expand = ConvTask(1, 96, 14, 14, 576, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True,
                      (("Clip", 0.0, 6.0),))
    dw = ConvTask(1, 576, 14, 14, 576, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 576, True,
                  (("Clip", 0.0, 6.0),))
    task = ChainTask((expand, dw))
    space = conv_chain.space(task, 32)
    direct = {"co_block": 3, "pack": True, "pad": "inline", "parallel": "co", "rc_block": 0,
              "skew": 0, "unroll_kw": False, "vec": 16, "x_block": 6}      # 48 channels × 6 px
    depthwise = {"c_block": 1, "pad": "inline", "parallel": "co", "unroll_k": True,
                 "vec": 16, "x_block": 1}
    seeds = join_seeds(task, space, [direct, depthwise])
    first, second = seeds[:2]
    for s in (first, second):
        assert s["tile"] == "channels" and s["s0_at"] == "strip" and s["x_block"] == 7  # 14/7
        assert s["ch_tile"] * s["vec"] == s["s0_vec"] * s["s0_cb"]       # the tile filled
        assert s["s0_flat"]                                             # 14 % 6 != 0
    assert {first["ch_tile"], second["ch_tile"]} == {2, 4}              # 48 lies between
    assert first["s0_pack"] and second["s0_pack"]         # as the part's: 32, 64 divide 576
    narrow = join_seeds(task, space, [dict(direct, co_block=1), depthwise])      # 16 wide
    assert [(s["ch_tile"], s["s0_cb"]) for s in narrow[:3]] == [(4, 4), (1, 1), (2, 2)]
    gemm = {"co_block": 2, "col": "inline", "pad": "inline", "panel": 1, "parallel": "co",
            "unroll_kw": False, "vec": 16, "x_block": 7}
    assert join_seeds(task, space, [gemm, depthwise])[0]["s0_flat"]      # conv_gemm's tiles
    assert not join_seeds(task, space, [dict(direct, x_block=2), depthwise])[0]["s0_flat"]
    assert not any(s["s0_pack"] for s in join_seeds(task, space, [dict(direct, pack=False),
                                                                  depthwise]))
    odd = ChainTask((ConvTask(1, 96, 14, 14, 600, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, True,
                              (("Clip", 0.0, 6.0),)),
                     ConvTask(1, 600, 14, 14, 600, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 600,
                              True, (("Clip", 0.0, 6.0),))))
    odd_space = conv_chain.space(odd, 32)
    odd_seeds = join_seeds(odd, odd_space, [direct, depthwise])     # 600 = 8 · 75
    assert all(odd_space.is_valid(s) for s in odd_seeds)
    # in rows, packed in tiles of 48 zero-padded to 624; in channel tiles only exact blocks
    assert any(s["s0_pack"] and s["tile"] == "rows" for s in odd_seeds)
    assert all(600 % (s["s0_vec"] * s["s0_cb"]) == 0 for s in odd_seeds
               if s["s0_pack"] and s["tile"] == "channels")
