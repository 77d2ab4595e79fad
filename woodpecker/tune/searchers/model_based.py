"""The loop shared by the searchers that measure what a cost model predicts fast (`xgb`,
`chameleon`, `glimpse`): AutoTVM's model-based tuner.

Each `ask` refits the cost model on every record it knows (this task's measurements and, with
transfer, the log's records of other tasks) when new ones have arrived, explores the model for
candidates (`explore`: simulated annealing here; RL in `chameleon`), picks the batch to measure
from them (`pick`: the best predicted here; adaptive sampling in `chameleon`) and, with
probability ε per slot, a random unmeasured configuration instead (ε-greedy). Before the model
has anything to learn from (no valid record of any task) it measures the template's seeds, then
random configurations; with transfer, its first batch is the seeds and the model's picks. It
is done when no unmeasured valid configuration can be found.

Transfer (AutoTVM §5): the model starts from the log's records of other tasks — at most
`config.TRANSFER_RECORDS`, those of the same template first, then a seeded sample of the rest.
The records' features are computed once per log (`TuningLog.derived`), shared by the searchers
of a compile.

Pre-trained (tune/pretrained.py): with a shipped database attached to the log, a task's first
batch — before any of its own records exist — is the pre-trained model's picks (the model fitted
once on the whole database), with no per-task fit; the per-task model is fitted from the second
batch on (`pretrained=False`: every batch from a per-task fit, as before).
"""

from __future__ import annotations

import time

import numpy as np

from woodpecker.config import PRETRAINED_FIRST_BATCH, TRANSFER_RECORDS
from woodpecker.deadline import Deadline
from woodpecker.target import Target
from woodpecker.tasks.space import Config, KnobSpace
from woodpecker.tune.annealing import anneal
from woodpecker.tune.context import TuningContext
from woodpecker.tune.cost_model import FeatureCache, XGBCostModel
from woodpecker.tune.features import Features
from woodpecker.tune.pretrained import pretrained_model
from woodpecker.tune.records import TuningLog, TuningRecord


def transfer_records(ctx: TuningContext, limit: int = TRANSFER_RECORDS) -> list[TuningRecord]:
    """The records the model starts from (`TuningLog.transfer_sample`): a shipped database's
    records of this very task first (measured on other machines or at other times), then the
    same template's of other tasks, then the rest, sampled (seeded) where more than fit."""
    if ctx.log is None:
        return []
    return ctx.log.transfer_sample(ctx.task.key, ctx.template, limit, ctx.seed)


def is_model_based(factory) -> bool:
    """Whether a searcher factory (`searchers.prepare`) builds a `ModelSearch`."""
    return isinstance(factory, type) and issubclass(factory, ModelSearch)


class ModelSearch:
    name = "model"

    def __init__(self, ctx: TuningContext, batch: int = 8, epsilon: float = 0.05,
                 transfer: bool = True, chains: int = 64, steps: int = 150,
                 pretrained: bool = PRETRAINED_FIRST_BATCH) -> None:
        self.ctx, self.space, self.rng = ctx, ctx.space, ctx.rng
        self.batch, self.epsilon, self.transfer = batch, epsilon, transfer
        self.chains, self.steps = chains, steps
        self.params = {"batch": batch, "epsilon": epsilon, "transfer": transfer,
                       "chains": chains, "steps": steps, "pretrained": pretrained}
        extra = self.hardware_features()
        shared = ctx.log.derived if ctx.log is not None else {}
        key = ("record features", tuple(sorted((extra or {}).items())))
        here = ctx.log.target if ctx.log is not None else None
        self.cache = FeatureCache(extra, records=shared.setdefault(
            key, FeatureCache(extra, here=here)))
        self.model = XGBCostModel(seed=ctx.seed, cache=self.cache)
        first = pretrained_model(ctx.log, extra) if transfer and pretrained else None
        # the first batch's model while the task has no record of its own
        self.pretrained = first.with_cache(self.cache) if first is not None else None
        self.prior = transfer_records(ctx) if transfer else []
        self.own: list[TuningRecord] = list(ctx.own_records())
        self.costs: dict[str, float | None] = {KnobSpace.key(r.config): r.cost_s
                                               for r in self.own}
        self._fitted_at = -1
        self.model_s = 0.0          # seconds spent fitting and exploring the model
        self.dropped = 0            # explored candidates `admissible` rejected

    # -- hooks ---------------------------------------------------------------------------------
    @classmethod
    def machine_vector(cls, target: Target | None) -> Features | None:
        """The hardware features this searcher adds to every row (glimpse: the blueprint)."""
        return None

    @classmethod
    def pretrain(cls, log: TuningLog, target: Target | None,
                 deadline: Deadline | None = None) -> None:
        """Fit (or load) the pre-trained model before a session splits its budget, on the
        target's threads, by `deadline` (tune/driver.py, tune/pretrained.py)."""
        threads = target.threads if target is not None else 1
        pretrained_model(log, cls.machine_vector(target), threads=threads, deadline=deadline)

    def hardware_features(self) -> Features | None:
        return self.machine_vector(self.ctx.target)

    def fresh_start(self) -> Config:
        """A new starting point for exploration (glimpse: a sample of its priors)."""
        return self.space.sample(self.rng)

    def starts(self, n: int) -> list[Config]:
        """`n` starting points: the best measured configs (half at most), then fresh ones."""
        measured = sorted(self._own_valid(), key=lambda r: r.cost_s)
        out = [r.config for r in measured[: n // 2]]
        while len(out) < n:
            out.append(self.fresh_start())
        return out

    def explore(self, n: int) -> list[tuple[float, Config]]:
        """Candidates from the model, best predicted first (never an already-measured one, nor
        one `admissible` rejects)."""
        cands = anneal(self.space, self.score, self.rng, self.starts(self.chains),
                       steps=self.steps, keep=max(n, self.batch * 4), exclude=set(self.costs))
        ok = self.admissible([c for _, c in cands])
        self.dropped += ok.count(False)
        return [sc for sc, good in zip(cands, ok) if good]

    def pick(self, candidates: list[tuple[float, Config]], n: int) -> list[Config]:
        return [c for _, c in candidates[:n]]

    def admissible(self, configs: list[Config]) -> list[bool]:
        """Whether each config may be measured (glimpse: its validity predictor)."""
        return [True] * len(configs)

    # -- the loop ------------------------------------------------------------------------------
    def score(self, configs: list[Config]) -> np.ndarray:
        return self.model.predict(self.ctx.task, self.ctx.template, configs)

    def _own_valid(self) -> list[TuningRecord]:
        return [r for r in self.own if r.cost_s]

    def records(self) -> list[TuningRecord]:
        return self.prior + self.own

    def ask(self) -> list[Config]:
        t0 = time.perf_counter()
        try:
            if not any(r.cost_s for r in self.records()):
                return self._first()
            if self._fitted_at != len(self.own):
                if not self.own and self.pretrained is not None:
                    self.model = self.pretrained          # no fit: the database's model
                else:
                    if self.model is self.pretrained:
                        self.model = XGBCostModel(seed=self.ctx.seed, cache=self.cache)
                    self.model.fit(self.records())
                self._fitted_at = len(self.own)
            picked = self.pick(self.explore(self.batch), self.batch)
            out: list[Config] = []
            if not self.own:       # with transfer: the hand schedules first all the same
                out = [c for c in self.space.seeds if self.admissible([c])[0]]
            for c in picked[: max(0, self.batch - len(out))]:
                if self.rng.random() < self.epsilon:
                    c = self._random()
                if c is not None and KnobSpace.key(c) not in self.costs and \
                        all(KnobSpace.key(c) != KnobSpace.key(o) for o in out):
                    out.append(c)
            while len(out) < self.batch:
                c = self._random({KnobSpace.key(o) for o in out})
                if c is None:
                    break
                out.append(c)
            return out
        finally:
            self.model_s += time.perf_counter() - t0

    def _first(self) -> list[Config]:
        out = [c for c in self.space.seeds if KnobSpace.key(c) not in self.costs]
        taken = {KnobSpace.key(c) for c in out}
        while len(out) < self.batch:
            c = self._random(taken)
            if c is None:
                break
            taken.add(KnobSpace.key(c))
            out.append(c)
        return out[: max(self.batch, len(self.space.seeds))]

    def _random(self, taken: set[str] = frozenset(), tries: int = 200) -> Config | None:
        for _ in range(tries):
            try:
                c = self.space.sample(self.rng, tries=1000)
            except ValueError:
                return None
            k = KnobSpace.key(c)
            if k not in self.costs and k not in taken and self.admissible([c])[0]:
                return c
        return None

    def tell(self, configs: list[Config], costs: list[float | None]) -> None:
        for c, cost in zip(configs, costs):
            key = KnobSpace.key(c)
            if key in self.costs and self.costs[key] == cost:
                continue
            self.costs[key] = cost
            self.own.append(TuningRecord(self.ctx.task.key, self.ctx.template, c, cost))
