"""`glimpse` — Glimpse (thesis ch. 4, Algorithm 4) on a CPU: the model-based loop of `xgb`,
made hardware-aware three ways.

1. **Blueprint** (tune/blueprint.py): the machine's facts as a vector, added to every
   candidate's features, so the cost model and the validity predictor see the hardware.
2. **Priors** (§4.4.1, "prior distribution generation"): one distribution per knob, the
   product of a hardware prior (the vector width: `vec` equal to the machine's float32 lanes
   weighs 3, twice them 2, others 1) and the knob's values among the fastest configs (best
   tenth, at least one) of the log's other tasks of the same template, each task weighted by
   its similarity to this one, exp(−d²/2σ²) over the task features (σ: the median distance).
   The first batch is the prior's argmax, the template's seeds, then samples of the prior
   (rejecting those that break a constraint), in place of random ones; annealing starts from
   prior samples too, and its acquisition is the model's score plus λ·log prior, λ falling
   from `prior_weight` to 0 over the first `prior_horizon` measurements (exploitation of the
   prior first, the model's own knowledge later).
3. **Validity predictor** (§4.4.2, "hardware-aware sampling"): an ensemble of light-weight
   predictors — one depth-3 decision tree per knob, over that knob's features, the implied
   loop-nest features, the task's and the blueprint's, and one tree of depth `joint_depth`
   (4) over all of them, for constraints between knobs — trained on the records of this
   template (this and other tasks) that failed to build, crashed, timed out or computed a
   wrong result against the valid ones. A predictor votes invalid where its leaf (of at least
   two records) holds at least `sure` (90 %) invalid ones — a threshold, so a predictor that
   knows nothing (one leaf at the base rate of failures) abstains — and a candidate more than
   `vote` of them (a share; 0: any one) vote invalid is dropped before it is compiled. Any
   one: a constraint of one knob is seen by that knob's predictor alone, the others vote valid
   (on a synthetic space where one knob value fails, a majority vote let 6 of 7 such
   candidates through). It is trained once at least `min_invalid` invalid records are known
   (until then nothing is dropped).

Choices: the thesis's prior generator and acquisition are networks meta-trained on a large
GPU dataset (and its blueprint a PCA over many GPUs' data sheets); with one machine and the
logs of a few models, closed-form priors from similar tasks' records and a decaying prior bonus
are what the data supports.
"""

from __future__ import annotations

import math

import numpy as np

from woodpecker.tasks.space import Config, KnobSpace
from woodpecker.tune.blueprint import blueprint
from woodpecker.tune.context import TuningContext
from woodpecker.tune.features import Features, Vectorizer, similarity
from woodpecker.tune.records import TuningRecord
from woodpecker.tune.searchers.model_based import ModelSearch


class GlimpseSearch(ModelSearch):
    name = "glimpse"

    def __init__(self, ctx: TuningContext, prior_weight: float = 0.2,
                 prior_horizon: int = 64, min_invalid: int = 3, vote: float = 0.0,
                 sure: float = 0.9, joint_depth: int = 4, **kw) -> None:
        import sklearn.tree  # noqa: F401

        self.bp = blueprint(ctx.target)
        super().__init__(ctx, **kw)
        self.prior_weight, self.prior_horizon = prior_weight, prior_horizon
        self.min_invalid, self.vote, self.sure = min_invalid, vote, sure
        self.joint_depth = joint_depth
        self.params.update(prior_weight=prior_weight, prior_horizon=prior_horizon,
                           min_invalid=min_invalid, vote=vote, sure=sure,
                           joint_depth=joint_depth)
        self.priors = self._priors()
        self._validity = None
        self._validity_at = -1
        self._bypass = False        # this ask measures without the predictor
        self._probe: set[str] = set()   # config keys of such a batch, until told
        self._done = False          # a batch measured without the predictor was all invalid

    @classmethod
    def machine_vector(cls, target) -> Features | None:
        return blueprint(target).vector()

    # -- priors --------------------------------------------------------------------------------
    def _priors(self) -> list[np.ndarray]:
        knobs = self.space.knobs
        probs = [np.ones(len(k.values)) for k in knobs]
        for p, k in zip(probs, knobs):
            if k.name == "vec":
                p *= [3.0 if v == self.bp.lanes else 2.0 if v == 2 * self.bp.lanes else 1.0
                      for v in k.values]
        by_task: dict[tuple, list[TuningRecord]] = {}    # records of one cost scale
        for r in self.prior:
            if r.template == self.ctx.template and r.cost_s and \
                    self.space.in_domain(r.config):
                by_task.setdefault(r.scale, []).append(r)
        if by_task:
            counts = [np.zeros(len(k.values)) for k in knobs]
            sim = similarity(self.ctx.task, [self.cache.task(t) for _, t in by_task])
            for w, recs in zip(sim, by_task.values()):
                recs = sorted(recs, key=lambda r: r.cost_s)[: max(1, len(recs) // 10)]
                for r in recs:
                    for c, k in zip(counts, knobs):
                        c[k.values.index(r.config[k.name])] += w / len(recs)
            for p, c in zip(probs, counts):
                if c.sum() > 0:
                    p *= 1.0 + len(c) * c / c.sum()
        return [p / p.sum() for p in probs]

    def log_prior(self, configs: list[Config]) -> np.ndarray:
        return np.array([sum(math.log(p[k.values.index(c[k.name])])
                             for p, k in zip(self.priors, self.space.knobs)) for c in configs])

    def _prior_sample(self) -> Config | None:
        for _ in range(200):
            c = {k.name: k.values[int(self.rng.choices(range(len(k.values)), weights=p)[0])]
                 for p, k in zip(self.priors, self.space.knobs)}
            if self.space.is_valid(c):
                return c
        return None

    def _first(self) -> list[Config]:
        argmax = {k.name: k.values[int(np.argmax(p))]
                  for p, k in zip(self.priors, self.space.knobs)}
        out: dict[str, Config] = {}
        for c in [argmax, *self.space.seeds]:
            if self.space.is_valid(c) and KnobSpace.key(c) not in self.costs:
                out.setdefault(KnobSpace.key(c), c)
        for _ in range(self.batch * 20):
            if len(out) >= self.batch:
                break
            c = self._prior_sample()
            if c is not None and KnobSpace.key(c) not in self.costs and self.admissible([c])[0]:
                out.setdefault(KnobSpace.key(c), c)
        return list(out.values())[: max(self.batch, len(self.space.seeds))]

    # -- exploration ---------------------------------------------------------------------------
    def score(self, configs: list[Config]) -> np.ndarray:
        base = super().score(configs)
        lam = self.prior_weight * max(0.0, 1 - len(self.own) / self.prior_horizon)
        return base + lam * self.log_prior(configs) if lam else base

    def fresh_start(self) -> Config:
        return self._prior_sample() or self.space.sample(self.rng)

    # -- the loop: the predictor may not end the search alone ------------------------------------
    def ask(self) -> list[Config]:
        if self._done:
            return []
        out = super().ask()
        if not out and self._validity is not None:
            self._bypass = True
            try:
                out = super().ask()
            finally:
                self._bypass = False
            self._probe = {KnobSpace.key(c) for c in out}
        return out

    def tell(self, configs: list[Config], costs: list[float | None]) -> None:
        super().tell(configs, costs)
        if self._probe:
            probed = [c for cfg, c in zip(configs, costs) if KnobSpace.key(cfg) in self._probe]
            self._done = bool(probed) and not any(probed)
            self._probe = set()

    # -- validity ------------------------------------------------------------------------------
    def _train_validity(self) -> None:
        from sklearn.tree import DecisionTreeClassifier

        recs = [r for r in self.records() if r.template == self.ctx.template]
        bad = sum(1 for r in recs if not r.cost_s)
        if bad < self.min_invalid or bad == len(recs):
            self._validity = None
            return
        rows = [self.cache.record_row(r) for r in recs]
        vec = Vectorizer().fit(rows)
        x = vec.transform(rows)
        y = np.array([0 if r.cost_s else 1 for r in recs])
        shared = [j for n, j in vec.columns.items() if n.startswith(("i.", "t.", "hw."))]
        trees = []
        for k in self.space.knobs:
            cols = shared + [j for n, j in vec.columns.items()
                             if n == f"k.{k.name}" or n.startswith(f"k.{k.name}=")]
            tree = DecisionTreeClassifier(max_depth=3, min_samples_leaf=2,
                                          random_state=self.ctx.seed).fit(x[:, cols], y)
            trees.append((cols, tree))
        if self.joint_depth:          # constraints between knobs: one tree over everything
            every = list(range(len(vec.columns)))
            tree = DecisionTreeClassifier(max_depth=self.joint_depth, min_samples_leaf=2,
                                          random_state=self.ctx.seed).fit(x, y)
            trees.append((every, tree))
        self._validity = (vec, trees)

    def admissible(self, configs: list[Config]) -> list[bool]:
        if self._bypass:
            return [True] * len(configs)
        if self._validity_at != len(self.own):
            self._train_validity()
            self._validity_at = len(self.own)
        if self._validity is None or not configs:
            return [True] * len(configs)
        vec, trees = self._validity
        x = vec.transform([self.cache.row(self.ctx.task, self.ctx.template, c)
                           for c in configs])
        votes = sum(tree.predict_proba(x[:, cols])[:, -1] >= self.sure for cols, tree in trees)
        return list(votes <= self.vote * len(trees))
