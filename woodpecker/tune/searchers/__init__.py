"""Searchers over a `KnobSpace`, each built from a `TuningContext` and speaking the `Searcher`
protocol (tune/searchers/base.py).

- `random`, `ga` (Woodpecker-DL §2.3): no model, every candidate measured;
- `xgb` (AutoTVM): an XGBoost ranking cost model, simulated annealing over it, ε-greedy,
  transfer from the log's other tasks;
- `ppo` (Woodpecker-DL §2.4): a PPO agent changing one knob per action, rewarded by Eq. 4;
- `chameleon` (thesis ch. 2): RL exploration of the cost model, adaptive sampling (k-means),
  sample synthesis;
- `glimpse` (thesis ch. 4): the CPU's blueprint, priors from similar tasks' fast configs, a
  validity predictor dropping predicted-invalid candidates.

The learned searchers import xgboost, scikit-learn and torch only when used: `prepare(name)`
imports a searcher and what it needs (scikit-learn alone takes ~1.6 s here) before a tuning
session splits its budget, so the first task's share is not spent importing.
"""

from __future__ import annotations

from woodpecker.errors import WoodpeckerError
from woodpecker.lazy import Lazy
from woodpecker.tune.context import TuningContext
from woodpecker.tune.searchers.base import Searcher

# name -> the factory, taking a TuningContext; `requires`: the third-party modules a learned
# searcher imports when built
SEARCHERS: dict[str, Lazy] = {
    "random": Lazy("woodpecker.tune.searchers.random_search", "RandomSearch.from_context"),
    "ga": Lazy("woodpecker.tune.searchers.genetic", "GeneticSearch.from_context"),
    "xgb": Lazy("woodpecker.tune.searchers.xgb", "XGBSearch", ("xgboost",)),
    "ppo": Lazy("woodpecker.tune.searchers.ppo", "PPOSearch", ("torch.nn",)),
    "chameleon": Lazy("woodpecker.tune.searchers.chameleon", "ChameleonSearch",
                      ("xgboost", "sklearn.cluster", "torch.nn")),
    "glimpse": Lazy("woodpecker.tune.searchers.glimpse", "GlimpseSearch",
                    ("xgboost", "sklearn.tree")),
}


def _missing(name: str, e: ImportError) -> WoodpeckerError:
    return WoodpeckerError(f"searcher {name!r} needs {e.name or e}: pip install "
                           "'woodpecker[tune,engines]'")


def prepare(name: str):
    """The factory of searcher `name`, its module and the modules it needs imported."""
    if name not in SEARCHERS:
        raise ValueError(f"unknown searcher {name!r}; choose from {', '.join(SEARCHERS)}")
    try:
        return SEARCHERS[name].load()
    except ImportError as e:
        raise _missing(name, e) from None


def make_searcher(name: str, ctx: TuningContext, **params) -> Searcher:
    """Searcher `name` for `ctx`; `params`: its constructor's keyword arguments (e.g.
    `pretrained=False` for a model-based one), none for the defaults."""
    factory = prepare(name)
    try:
        return factory(ctx, **params)
    except ImportError as e:
        raise _missing(name, e) from None
