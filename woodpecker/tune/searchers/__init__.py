"""Searchers over a `KnobSpace`, all with the same ask/tell interface: `ask()` proposes
configurations to measure (empty when done), `tell(configs, costs)` reports their measured
costs in seconds (None for invalid candidates)."""

from __future__ import annotations

import random

from woodpecker.tasks.space import KnobSpace
from woodpecker.tune.searchers.genetic import GeneticSearch
from woodpecker.tune.searchers.random_search import RandomSearch

SEARCHERS = {"random": RandomSearch, "ga": GeneticSearch}


def make_searcher(name: str, space: KnobSpace, seed: int):
    if name not in SEARCHERS:
        raise ValueError(f"unknown searcher {name!r}; choose from {', '.join(SEARCHERS)}")
    return SEARCHERS[name](space, random.Random(seed))
