"""What a searcher may see while it tunes one (task, template) pair — the tuning context, in
the spirit of TVM MetaSchedule's `TuneContext`, simpler.

`TuningContext` holds the task, the template and its knob space, the target it is tuned for,
the tuning log (the records database: this task's earlier measurements, and every other task's
for cost models that transfer), the seed and the random generator made from it. Every searcher
is built from a context (`tune.searchers.make_searcher(name, ctx)`) and draws its randomness
only from `ctx.rng` (and generators seeded from `ctx.seed`), so a run is reproduced from the
seed recorded with its measurements.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from woodpecker.target import Target
from woodpecker.tasks import Task
from woodpecker.tasks.space import KnobSpace
from woodpecker.tune.records import TuningLog, TuningRecord


@dataclass
class TuningContext:
    task: Task
    template: str
    space: KnobSpace
    seed: int = 0
    log: TuningLog | None = None
    target: Target | None = None
    vector_registers: int = 16
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def own_records(self) -> list[TuningRecord]:
        """The log's records of this task and template (earlier runs), oldest first."""
        if self.log is None:
            return []
        return [r for r in self.log.records
                if r.task == self.task.key and r.template == self.template]

    def other_records(self) -> list[TuningRecord]:
        """What a transferring cost model starts from: the log's records of every other task,
        then a shipped database's records (tune/database.py; its own records of this task
        too: measured elsewhere, they are transfer, not this machine's)."""
        if self.log is None:
            return []
        return self.log.knowledge(except_task=self.task.key)
