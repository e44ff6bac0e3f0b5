"""Progress of a long Spark run: the pipeline's stage with its share of the work, refined by
the running Spark stage's finished tasks, printed every few seconds while a job runs."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pyspark import SparkContext

#: Seconds between two progress lines while Spark works.
EVERY = 3.0


class Poller:
    """Reports `report(stage, fraction)` from Spark's status tracker until stopped."""

    def __init__(self, context: SparkContext, report: Callable[[str, float], None]) -> None:
        self.context = context
        self.report = report
        self.stage = "starting"
        self.low, self.high = 0.0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="amq-sim progress", daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def at(self, stage: str, low: float, high: float) -> None:
        """The pipeline entered `stage`, which runs from `low` to `high` of the whole."""
        self.stage, self.low, self.high = stage, low, high
        self.report(stage, low)

    def _run(self) -> None:
        tracker = self.context.statusTracker()
        last = -1.0
        while not self._stop.wait(EVERY):
            done = total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            fraction = self.low + (self.high - self.low) * done / total if total else -1.0
            if total and fraction != last:  # only news: a stage that has not moved says nothing
                last = fraction
                self.report(self.stage, fraction)
