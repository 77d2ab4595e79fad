"""Features of a (task, template, config) candidate, the input of every cost model and RL
policy here, named so that one model learns across tasks, templates and machines (AutoTVM's
transfer; Glimpse's blueprint, thesis ch. 4).

Contract: `features(task, template, config)` is a dict of named floats — the task's kind, its
shape parameters (log2, every field of every task kind), its FLOPs and output size; the
template; each knob (numbers as log2, booleans 0/1, categories one-hot); and what the knobs
imply for the loop nest (`implied`): the share of vector lanes and of register-tile columns
that do useful work at the output's edges, the register tile's size, the number of parallel
tiles. A fixed column order comes from `Vectorizer`, fitted once on the rows a model learns
from; a name it has not seen is dropped, a name missing from a row is 0.
"""

from __future__ import annotations

import math

import numpy as np

from woodpecker.tasks import Task
from woodpecker.tasks.space import Config

Features = dict[str, float]


def _log(v: float) -> float:
    return math.log2(1.0 + abs(float(v)))


def _fields(prefix: str, value, out: Features) -> None:
    if isinstance(value, bool):
        out[prefix] = float(value)
    elif isinstance(value, (int, float)):
        out[prefix] = _log(value)
    elif isinstance(value, str):
        out[f"{prefix}={value}"] = 1.0
    elif isinstance(value, dict):
        for k, v in value.items():
            _fields(f"{prefix}.{k}", v, out)
    elif isinstance(value, (tuple, list)):
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            for i, v in enumerate(value):
                out[f"{prefix}.{i}"] = _log(v)
        else:                                   # epilogue / program steps: how many
            out[f"{prefix}.len"] = float(len(value))


_TASK_ROWS: dict[str, Features] = {}


def task_features(task: Task) -> Features:
    """The task's part of every candidate's row, computed once per task (annealing scores
    thousands of candidates of one task per batch: recomputing it was 3/4 of featurizing);
    callers must not change the dict returned."""
    row = _TASK_ROWS.get(task.key)
    if row is None:
        row = _TASK_ROWS[task.key] = _task_features(task)
    return row


def _task_features(task: Task) -> Features:
    out: Features = {f"kind={task.kind}": 1.0, "t.flops": _log(task.flops),
                     "t.out": _log(math.prod(task.out_shape))}
    for i, d in enumerate(reversed(task.out_shape)):
        out[f"t.out_dim-{i}"] = _log(d)
    _fields("t", task.to_json(), out)
    return out


def similarity(task: Task, others: list[Task]) -> np.ndarray:
    """How alike each of `others` is to `task`: exp(−d²/2σ²) over the task features, σ² the
    median d² (what transfer weighs other tasks' evidence by: glimpse's priors, the template
    split)."""
    rows = [task_features(task)] + [task_features(t) for t in others]
    x = Vectorizer().fit(rows).transform(rows)
    d2 = ((x[1:] - x[0]) ** 2).sum(1)
    return np.exp(-d2 / (2 * max(float(np.median(d2)), 1e-6)))


def implied(task: Task, config: Config) -> Features:
    """What the knobs imply for the output's loop nest (NHWC-like: channels innermost, then
    columns): lanes and register-tile columns doing useful work, tile size, tile count."""
    shape = task.out_shape
    inner = shape[-1]
    cols = shape[-2] if len(shape) >= 2 else 1
    vec = config.get("vec") if isinstance(config.get("vec"), int) else 1
    c_block = next((config[k] for k in ("co_block", "c_block", "n_block")
                    if isinstance(config.get(k), int)), 1)
    x_block = next((config[k] for k in ("x_block", "m_block", "t_block")
                    if isinstance(config.get(k), int)), 1)
    lanes = vec * c_block
    c_tiles, x_tiles = -(-inner // lanes), -(-cols // x_block)
    rest = math.prod(shape[:-2]) if len(shape) > 2 else 1
    return {"i.lane_use": inner / (c_tiles * lanes), "i.col_use": cols / (x_tiles * x_block),
            "i.reg_tile": _log(lanes * x_block), "i.tiles": _log(c_tiles * x_tiles * rest),
            "i.vec_tiles": _log(-(-inner // vec))}


def config_features(task: Task, config: Config) -> Features:
    out: Features = {}
    for name, v in config.items():
        if isinstance(v, bool):
            out[f"k.{name}"] = float(v)
        elif isinstance(v, (int, float)):
            out[f"k.{name}"] = _log(v)
        else:
            out[f"k.{name}={v}"] = 1.0
    out.update(implied(task, config))
    return out


def features(task: Task, template: str, config: Config,
             extra: Features | None = None) -> Features:
    """Everything about one candidate; `extra` (e.g. the machine's blueprint) is added as
    it is."""
    out = {f"template={template}": 1.0}
    out.update(task_features(task))
    out.update(config_features(task, config))
    if extra:
        out.update(extra)
    return out


class Vectorizer:
    """A fixed column order for feature dicts: fitted on the rows a model learns from."""

    def __init__(self) -> None:
        self.columns: dict[str, int] = {}

    def fit(self, rows: list[Features]) -> "Vectorizer":
        names = sorted({k for r in rows for k in r})
        self.columns = {n: i for i, n in enumerate(names)}
        return self

    def transform(self, rows: list[Features]) -> np.ndarray:
        x = np.zeros((len(rows), len(self.columns) + 1), dtype=np.float32)
        last, get = len(self.columns), self.columns.get
        for i, r in enumerate(rows):
            x[i, [get(k, last) for k in r]] = list(r.values())
        return x[:, :last]       # the extra column took the names not fitted
