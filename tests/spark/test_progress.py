"""amq-sim's progress lines while Spark works (spark.progress)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark.progress import Poller


def test_progress_never_goes_back_within_a_pipeline_stage(spark: SparkSession) -> None:
    """A pipeline stage runs many Spark stages one after another; the next one starting with
    no tasks done printed a smaller share than the last line (regions-10k: routing 37.5%,
    then 30.0%, then 20.0%)."""
    shown: list[tuple[str, float]] = []
    poller = Poller(spark.sparkContext, lambda stage, share: shown.append((stage, round(share, 3))))
    poller.at("routing", 0.2, 0.4)
    poller.tasks(3, 4)  # 35%
    poller.tasks(0, 8)  # the next Spark stage starts
    poller.tasks(4, 8)  # 30%: still behind what was shown
    poller.tasks(8, 8)  # 40%
    poller.tasks(0, 0)  # no stage running
    poller.at("traffic", 0.4, 0.6)
    poller.tasks(1, 2)
    assert shown == [
        ("routing", 0.2),
        ("routing", 0.35),
        ("routing", 0.4),
        ("traffic", 0.4),
        ("traffic", 0.5),
    ]
