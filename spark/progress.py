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
        self.shown = 0.0
        self._lock = threading.Lock()  # the pipeline enters stages while the poller reports
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
        with self._lock:
            self.stage, self.low, self.high, self.shown = stage, low, high, low
            self.report(stage, low)

    def tasks(self, done: int, total: int) -> None:
        """`done` of the running Spark stages' `total` tasks are finished: report the share of
        the whole that says, if it is news. A pipeline stage runs many Spark stages one after
        another, so a stage that starts with none done never takes the share back."""
        with self._lock:
            fraction = self.low + (self.high - self.low) * done / total if total else self.shown
            if fraction > self.shown:
                self.shown = fraction
                self.report(self.stage, fraction)

    def _run(self) -> None:
        tracker = self.context.statusTracker()
        while not self._stop.wait(EVERY):
            done = total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            self.tasks(done, total)
