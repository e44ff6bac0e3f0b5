"""One local SparkSession for every Spark test (starting one costs seconds): local[2], two
shuffle partitions, no UI. Java 17 is on every machine here, so a missing one fails loudly
(spark.session says what to install) rather than skipping."""

from __future__ import annotations

import os
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


#: Every JVM a Spark test starts (the session's, a standalone cluster's, amq-sim's in a
#: subprocess: all read JDK_JAVA_OPTIONS) compiles with C1 only. The tests' runs are short, and
#: the C2 compiler spent more CPU on Spark's code than it saved them: tests/spark took 297 s
#: with it and 195 s without (2026-11-27, one run each, the machine equally busy).
QUICK_JIT = "-XX:TieredStopAtLevel=1"


@pytest.fixture(scope="session", autouse=True)
def quick_jit() -> Iterator[None]:
    before = os.environ.get("JDK_JAVA_OPTIONS")
    os.environ["JDK_JAVA_OPTIONS"] = f"{before} {QUICK_JIT}" if before else QUICK_JIT
    yield
    if before is None:
        del os.environ["JDK_JAVA_OPTIONS"]
    else:
        os.environ["JDK_JAVA_OPTIONS"] = before


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
