"""A captured workload (simulations/workloads/demo.toml, the demo as `amq-sim capture` measured
it) scaled and on a grown topology: the Spark engine equals the reference engine exactly."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from simulations.scenario import load_scenario_text
from tests.spark.conftest import assert_same_tables, reference_tables, spark_tables

ROOT = Path(__file__).resolve().parents[2]


def test_a_captured_workload_grown_and_scaled(spark: SparkSession) -> None:
    scenario = load_scenario_text(
        """[scenario]
duration = 4
step = 1
[topology]
file = "../configs/topology-three-regions.toml"
[links.default]
capacity_msgs = 60
[workload]
file = "workloads/demo.toml"
scale = 3
grow = {nodes = 3}
""",
        str(ROOT / "simulations" / "captured-grown.toml"),
    )
    assert len(scenario.topology.nodes) == 3 + 4 * 3
    expected = reference_tables(scenario)
    assert_same_tables(spark_tables(spark, scenario), expected)
    queues = expected["queues"].set_index(["node", "queue"])["delivered"]
    assert queues[("edge-us-1.3", "eu-orders")] > 0 and queues[("hub-ap", "audit")] > 0
