"""Random search: distinct valid configurations drawn uniformly, a batch at a time."""

from __future__ import annotations

import random

from woodpecker.tasks.space import Config, KnobSpace
from woodpecker.tune.context import TuningContext


class RandomSearch:
    def __init__(self, space: KnobSpace, rng: random.Random, batch: int = 8) -> None:
        self.space, self.rng, self.batch = space, rng, batch
        self.seen: set[str] = set()
        self.params = {"batch": batch}

    @classmethod
    def from_context(cls, ctx: TuningContext) -> "RandomSearch":
        return cls(ctx.space, ctx.rng)

    def ask(self) -> list[Config]:
        out: list[Config] = []
        for _ in range(self.batch * 50):
            if len(out) == self.batch:
                break
            try:
                c = self.space.sample(self.rng, tries=1000)
            except ValueError:
                break
            k = KnobSpace.key(c)
            if k not in self.seen:
                self.seen.add(k)
                out.append(c)
        return out

    def tell(self, configs: list[Config], costs: list[float | None]) -> None:
        pass
