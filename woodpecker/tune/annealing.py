"""Simulated annealing over a cost model (AutoTVM's `SimulatedAnnealingOptimizer`): parallel
Markov chains walk the knob space one knob change at a time, accepting a worse neighbour with
probability exp((new - old) / T) as the temperature T falls linearly from 1 to 0, and the best
`keep` distinct configurations any chain visited are returned, best first.

Contract: `anneal(space, score, rng, starts, ...)` never returns a configuration in `exclude`
(already measured) or one violating the space's constraints; `score(configs)` is the model's
batch prediction (higher is better). Deterministic for a given `rng` state.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable

import numpy as np

from woodpecker.tasks.space import Config, KnobSpace


def neighbour(space: KnobSpace, config: Config, rng: random.Random, tries: int = 8) -> Config:
    """`config` with one knob changed to another value of its domain, valid; `config` itself
    when no valid change was found in `tries`."""
    movable = [k for k in space.knobs if len(k.values) > 1]
    for _ in range(tries if movable else 0):
        k = rng.choice(movable)
        v = rng.choice([x for x in k.values if x != config[k.name]])
        c = dict(config, **{k.name: v})
        if space.is_valid(c):
            return c
    return config


def anneal(space: KnobSpace, score: Callable[[list[Config]], np.ndarray], rng: random.Random,
           starts: list[Config], *, steps: int = 150, early_stop: int = 30, keep: int = 64,
           exclude: set[str] | frozenset = frozenset()) -> list[tuple[float, Config]]:
    points = list(starts)
    scores = score(points)
    best: list[tuple[float, int, str, Config]] = []     # min-heap of the `keep` best
    seen: set[str] = set()
    counter = 0

    def offer(s: float, c: Config) -> bool:
        nonlocal counter
        key = KnobSpace.key(c)
        if key in exclude or key in seen:
            return False
        if len(best) < keep:
            heapq.heappush(best, (s, counter, key, c))
        elif s > best[0][0]:
            _, _, old, _ = heapq.heapreplace(best, (s, counter, key, c))
            seen.discard(old)
        else:
            return False
        seen.add(key)
        counter += 1
        return True

    for s, c in zip(scores, points):
        offer(float(s), c)
    quiet = 0
    for step in range(steps):
        temp = 1.0 - step / steps
        moved = [neighbour(space, c, rng) for c in points]
        new = score(moved)
        changed = False
        for i, (c, s) in enumerate(zip(moved, new)):
            s = float(s)
            if s >= scores[i] or rng.random() < math.exp((s - scores[i]) / max(temp, 1e-6)):
                points[i], scores[i] = c, s
            changed |= offer(s, c)
        quiet = 0 if changed else quiet + 1
        if quiet >= early_stop:
            break
    return [(s, c) for s, _, _, c in sorted(best, key=lambda t: (-t[0], t[1]))]
