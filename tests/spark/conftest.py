"""One local SparkSession for every Spark test (starting one costs seconds): local[2], two
shuffle partitions, no UI. Java 17 is on every machine here, so a missing one fails loudly
(spark.session says what to install) rather than skipping."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from simulations import reference
from simulations.scenario import Scenario
from simulations.tables import COLUMNS, normalised
from spark import engine
from spark.session import spark_session

SCENARIOS = Path(__file__).parent / "scenarios"
#: The generated tests' workload (scenario TOML): every node publishing in bursts on sim.topic,
#: two topic subscribers per node, some of them with wildcards.
BURSTY_TOPIC_WORKLOAD = """[keys]
words = [3, 3]
distribution = "zipf"
[[publishers]]
nodes = "*"
exchange = "sim.topic"
rate = 12
pattern = "bursts"
burst_every = 4
burst_length = 1
[[subscribers]]
nodes = "*"
exchange = "sim.topic"
type = "topic"
count = 2
wildcards = 0.3
"""


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", partitions=2, app="amq-sim tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def spark_tables(spark: SparkSession, scenario: Scenario) -> dict[str, pd.DataFrame]:
    """The Spark engine's tables, collected and normalised for comparison."""
    found = {name: normalised(name, df.toPandas()) for name, df in engine.tables(spark, scenario).items()}
    spark.catalog.clearCache()
    return found


def reference_tables(scenario: Scenario) -> dict[str, pd.DataFrame]:
    return {name: normalised(name, df) for name, df in reference.tables(scenario).items()}


def assert_same_tables(one: dict[str, pd.DataFrame], two: dict[str, pd.DataFrame]) -> None:
    """Every table equal, row for row and column for column."""
    assert set(one) == set(two) == set(COLUMNS)
    for name in COLUMNS:
        pd.testing.assert_frame_equal(one[name], two[name], check_dtype=True, obj=f"table {name}")
