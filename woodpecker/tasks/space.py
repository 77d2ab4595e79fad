"""Knob spaces: the one interface every searcher sees (Woodpecker-DL §2.2–2.4).

A schedule template exposes named knobs, each with a finite domain, plus named validity
constraints checked before anything is compiled (a register-blocking tile that needs more
vector registers than the target has is never built). A configuration assigns one value to
every knob. Searchers work on index vectors (`encode`/`decode`), so random search, the genetic
search and RL all operate on any template unchanged.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Config = dict[str, Any]


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"knob {self.name!r} has an empty domain")
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"knob {self.name!r} repeats a value")


@dataclass(frozen=True)
class Constraint:
    """A named predicate over a configuration; `check(config)` is True when it holds."""

    name: str
    check: Callable[[Config], bool]


class KnobSpace:
    """`seeds`: the template's hand-picked configurations (its default schedules), tried
    first by the genetic search; those invalid for this task are dropped."""

    def __init__(self, knobs: list[Knob], constraints: list[Constraint] | None = None,
                 seeds: tuple[Config, ...] = ()) -> None:
        names = [k.name for k in knobs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate knob names in {names}")
        self.knobs = list(knobs)
        self.constraints = list(constraints or [])
        self._by_name = {k.name: k for k in knobs}
        for s in seeds:
            if not self.in_domain(s):
                raise ValueError(f"seed {s} is outside the knobs' domains")
        self.seeds = [s for s in seeds if self.is_valid(s)]

    @property
    def size(self) -> int:
        """Number of configurations, valid or not (the raw product of the domains)."""
        return math.prod(len(k.values) for k in self.knobs)

    def violations(self, config: Config) -> list[str]:
        """Names of the constraints `config` breaks (unknown or missing knobs included)."""
        bad = [f"unknown knob {n}" for n in config if n not in self._by_name]
        for k in self.knobs:
            if k.name not in config:
                bad.append(f"missing knob {k.name}")
            elif config[k.name] not in k.values:
                bad.append(f"{k.name}={config[k.name]!r} outside its domain")
        if bad:
            return bad
        return [c.name for c in self.constraints if not c.check(config)]

    def in_domain(self, config: Config) -> bool:
        """Every knob set, to a value of its domain, and no other (constraints aside): a
        config a template of this version can build."""
        return config.keys() == self._by_name.keys() and \
            all(config[k.name] in k.values for k in self.knobs)

    def is_valid(self, config: Config) -> bool:
        return not self.violations(config)

    def encode(self, config: Config) -> list[int]:
        return [k.values.index(config[k.name]) for k in self.knobs]

    def decode(self, index: list[int]) -> Config:
        return {k.name: k.values[i] for k, i in zip(self.knobs, index)}

    def sample(self, rng: random.Random, tries: int = 10_000) -> Config:
        """A uniformly random valid configuration (rejection sampling)."""
        for _ in range(tries):
            config = {k.name: rng.choice(k.values) for k in self.knobs}
            if self.is_valid(config):
                return config
        raise ValueError(f"no valid configuration found in {tries} samples of a space of "
                         f"{self.size}")

    def first_valid(self, limit: int = 200_000) -> Config | None:
        """A valid configuration — a seed, else the first in index order among the first
        `limit` — or None: a space whose constraints no configuration meets (a task its
        template's `supports` let through), which a searcher's `sample` would fail on."""
        if self.seeds:
            return self.seeds[0]
        names = [k.name for k in self.knobs]
        for values in itertools.islice(itertools.product(*(k.values for k in self.knobs)),
                                       limit):
            config = dict(zip(names, values))
            if self.is_valid(config):
                return config
        return None

    def nearest_valid(self, config: Config) -> Config | None:
        """`config` itself when valid here, else the valid configuration that differs from it
        in the fewest knobs (at most two), each moved the fewest places along its domain
        (ties: earlier knobs, smaller values first); None when none is that near or `config`
        names other knobs. For a configuration measured under another target's constraints
        (a wider vector unit's register tiles): the shipped database's configs of a task on
        another machine seed this machine's search (tune/tuner.py)."""
        if config.keys() != self._by_name.keys():
            return None
        if self.is_valid(config):
            return dict(config)
        index = []
        for k in self.knobs:
            v = config[k.name]
            if v in k.values:
                index.append(k.values.index(v))
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and \
                    all(isinstance(x, (int, float)) for x in k.values):
                index.append(min(range(len(k.values)), key=lambda i: abs(k.values[i] - v)))
            else:
                return None
        moves = [sorted((abs(i - j), i) for i in range(len(k.values)) if i != j)
                 for k, j in zip(self.knobs, index)]
        candidates: list[tuple[int, list[int]]] = [(0, list(index))]
        for a in range(len(self.knobs)):
            for da, ia in moves[a]:
                changed = list(index)
                changed[a] = ia
                candidates.append((100 + da, changed))
                for b in range(a + 1, len(self.knobs)):
                    for db, ib in moves[b]:
                        both = list(changed)
                        both[b] = ib
                        candidates.append((10_000 + da + db, both))
        for _, idx in sorted(candidates, key=lambda c: c[0]):
            out = self.decode(idx)
            if self.is_valid(out):
                return out
        return None

    def valid_configs(self) -> Iterator[Config]:
        """Every valid configuration, in index order (for small spaces and tests)."""
        for values in itertools.product(*(k.values for k in self.knobs)):
            config = dict(zip((k.name for k in self.knobs), values))
            if self.is_valid(config):
                yield config

    @staticmethod
    def key(config: Config) -> str:
        """A stable text key for a configuration (records, caches)."""
        return json.dumps(config, sort_keys=True, separators=(",", ":"))
