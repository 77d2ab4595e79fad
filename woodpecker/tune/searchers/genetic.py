"""Genetic search, Woodpecker-DL §2.3.

Step 1: a random population of valid configurations. Step 2: fitness f(a_i) from the measured
runtime — we take f = 1/runtime, and f = 0 for an invalid candidate. Step 3: selection
probability p(a_i) = f(a_i) / Σ f (Eq. 1); the top-k elites pass unchanged; the other children
come from parents picked by roulette wheel — cumulative P(a_i) = Σ_{j≤i} p(a_j) (Eq. 2) and
inverse sampling (v ~ U[0,1], pick the first i with v ≤ P(a_i)) — then uniform crossover and
per-gene mutation, repaired to valid configurations. Step 4: stop when the runtimes of a
generation are close (spread within `tol`) or no new configuration can be bred.

Choices where the paper is vague: the first population holds the template's seeds (its
hand-picked default schedules, `KnobSpace.seeds`) and is random for the rest, so a short
budget (one compile can take seconds) cannot end below the hand schedule. Configurations
already measured are not re-measured (their cost is remembered), so a generation's size varies
with how many new children are distinct — the paper allows the population size to vary.
"""

from __future__ import annotations

import bisect
import itertools
import random

from woodpecker.tasks.space import Config, KnobSpace
from woodpecker.tune.context import TuningContext


class GeneticSearch:
    def __init__(self, space: KnobSpace, rng: random.Random, population: int = 12,
                 elites: int = 3, mutation: float = 0.15, tol: float = 0.03,
                 max_generations: int = 50) -> None:
        self.space, self.rng = space, rng
        self.population, self.elites, self.mutation, self.tol = population, elites, mutation, tol
        self.max_generations = max_generations
        self.params = {"population": population, "elites": elites, "mutation": mutation,
                       "tol": tol}
        self.costs: dict[str, float | None] = {}
        self.generation: list[Config] = []
        self.generations = 0
        self.done = False

    @classmethod
    def from_context(cls, ctx: TuningContext) -> "GeneticSearch":
        return cls(ctx.space, ctx.rng)

    def ask(self) -> list[Config]:
        if self.done or self.generations >= self.max_generations:
            return []
        if not self.generation:
            self.generation = self._initial()
        else:
            self.generation = self._next_generation()
        self.generations += 1
        fresh = [c for c in self.generation if KnobSpace.key(c) not in self.costs]
        if not fresh:
            self.done = True
        return fresh

    def tell(self, configs: list[Config], costs: list[float | None]) -> None:
        for c, cost in zip(configs, costs):
            self.costs[KnobSpace.key(c)] = cost
        valid = [self.costs.get(KnobSpace.key(c)) for c in self.generation]
        valid = [v for v in valid if v]
        if len(valid) >= 2 and (max(valid) - min(valid)) / min(valid) <= self.tol:
            self.done = True  # Step 4: the generation's runtimes are close enough

    # -- steps -------------------------------------------------------------------------------
    def _initial(self) -> list[Config]:
        out: dict[str, Config] = {KnobSpace.key(c): c for c in self.space.seeds
                                  if KnobSpace.key(c) not in self.costs}
        for _ in range(self.population * 20):
            if len(out) >= self.population:
                break
            c = self.space.sample(self.rng)
            out.setdefault(KnobSpace.key(c), c)
        return list(out.values())

    def _fitness(self, c: Config) -> float:
        cost = self.costs.get(KnobSpace.key(c))
        return 1.0 / cost if cost else 0.0

    def _next_generation(self) -> list[Config]:
        ranked = sorted(self.generation, key=self._fitness, reverse=True)
        total = sum(self._fitness(c) for c in ranked)
        if total == 0:
            return self._initial()
        probs = [self._fitness(c) / total for c in ranked]               # Eq. (1)
        cumulative = list(itertools.accumulate(probs))                   # Eq. (2)
        children: dict[str, Config] = {KnobSpace.key(c): c for c in ranked[: self.elites]}
        for _ in range(self.population * 20):
            if len(children) >= self.population:
                break
            a, b = (ranked[min(bisect.bisect_left(cumulative, self.rng.random()),
                               len(ranked) - 1)] for _ in range(2))
            child = self._mutate(self._crossover(a, b))
            if child is not None:
                children.setdefault(KnobSpace.key(child), child)
        return list(children.values())

    def _crossover(self, a: Config, b: Config) -> Config:
        return {k.name: (a if self.rng.random() < 0.5 else b)[k.name] for k in self.space.knobs}

    def _mutate(self, c: Config) -> Config | None:
        for _ in range(20):
            m = {k.name: (self.rng.choice(k.values) if self.rng.random() < self.mutation
                          else c[k.name]) for k in self.space.knobs}
            if self.space.is_valid(m):
                return m
        return None
