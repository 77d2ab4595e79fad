"""`xgb` — AutoTVM's tuner (Chen et al., "Learning to Optimize Tensor Programs"), the baseline
the thesis's CHAMELEON is measured against: an XGBoost ranking cost model retrained as records
arrive, simulated annealing over it to pick each batch, ε-greedy exploration, and transfer from
the log's records of other tasks. The loop is tune/searchers/model_based.py's."""

from __future__ import annotations

from woodpecker.tune.searchers.model_based import ModelSearch


class XGBSearch(ModelSearch):
    name = "xgb"
