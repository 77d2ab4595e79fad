"""The searcher interface every tuning strategy implements.

`ask()` proposes configurations to measure (an empty list: the searcher is done); `tell(configs,
costs)` reports their measured costs in seconds, None for an invalid candidate (it did not
build, crashed, hung or computed a wrong result). A configuration already in the log is told
without being measured again. `params` are the searcher's hyper-parameters, recorded with every
measurement it asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from woodpecker.tasks.space import Config
from woodpecker.tune.context import TuningContext


class Searcher(Protocol):
    params: dict

    def ask(self) -> list[Config]: ...

    def tell(self, configs: list[Config], costs: list[float | None]) -> None: ...


SearcherFactory = Callable[[TuningContext], Searcher]
