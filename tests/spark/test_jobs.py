"""Each Spark job on tiny inputs, against values worked out by hand."""

from __future__ import annotations

from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F

from simulations.scenario import Scenario, load_scenario
from simulations.workload import events, key_probabilities
from simulations.world import Window
from spark import jobs
from spark.failures import Failures
from tests.spark.conftest import SCENARIOS


def test_backlog_is_the_queue_recursion_in_parallel_form(spark: SparkSession) -> None:
    arrivals = [5, 0, 3, 0, 0, 9, 1]
    rows = [Row(link="l", step=t, a=a, c=2) for t, a in enumerate(arrivals)]
    df = spark.createDataFrame(rows).withColumn("w", jobs.backlog(F.col("a"), F.col("c"), ["link"], "step"))
    found = [row.w for row in df.orderBy("step").collect()]
    expected, w = [], 0
    for a in arrivals:
        w = max(0, w + a - 2)
        expected.append(w)
    assert found == expected == [3, 1, 2, 0, 0, 7, 6]


def test_link_traffic_loses_what_a_transient_link_holds_and_buffers_on_a_durable_one(
    spark: SparkSession,
) -> None:
    offered = spark.createDataFrame(
        [("t", s, m, m * 10) for s, m in enumerate([10, 10, 0, 0])]
        + [("d", s, m, m * 10) for s, m in enumerate([10, 10, 0, 0])],
        "link string, step bigint, messages bigint, bytes bigint",
    )
    links = spark.createDataFrame(
        [(name, "x", "y", 7, 5, 1000) for name in ("t", "d")],
        "link string, source string, destination string, latency_ms bigint, capacity_msgs bigint, capacity_bytes bigint",
    )
    failures = Failures.of([Window(1, 3, frozenset({"t", "d"}))], {"t": False, "d": True}, 1000)
    rows = {(r.link, r.step): r for r in jobs.link_traffic(offered, links, 4, failures).collect()}
    transient = [(rows["t", s].backlog, rows["t", s].lost, rows["t", s].lost_in_flight) for s in range(4)]
    assert transient == [(5, 0, 0), (0, 10, 5), (0, 0, 0), (0, 0, 0)]
    durable = [(rows["d", s].backlog, rows["d", s].lost, rows["d", s].delay_ms) for s in range(4)]
    # Down at steps 1-2: capacity 0, so 15 wait; the wait until the end of the window is added.
    assert durable == [(5, 0, 1000), (15, 0, 3000 + 2000), (15, 0, 3000 + 1000), (10, 0, 2000)]


def test_offered_drops_copies_lost_at_an_earlier_link(spark: SparkSession) -> None:
    steps = spark.createDataFrame(
        [(0, "a", 1, 0, 4, 40), (0, "a", 1, 1, 2, 20)],
        "entry int, node string, key int, step bigint, messages bigint, bytes bigint",
    )
    routes = spark.createDataFrame(
        [
            (0, "a", 1, "cross", "a>b", [], None, None, 1),
            (0, "a", 1, "cross", "b>c", ["a>b"], None, None, 2),
        ],
        jobs.ROUTES_SCHEMA,
    )
    failures = Failures.of([Window(1, 2, frozenset({"a>b"}))], {"a>b": False}, 1000)
    found = {(r.link, r.step): (r.messages, r.bytes) for r in jobs.offered(steps, routes, failures).collect()}
    # At step 1 a>b is down and transient: it is offered its copies (and loses them), b>c none.
    assert found == {("a>b", 0): (4, 40), ("b>c", 0): (8, 80), ("a>b", 1): (2, 20)}


def test_events_are_the_workloads_draws(spark: SparkSession) -> None:
    scenario: Scenario = load_scenario(SCENARIOS / "corners.toml")
    shared = spark.sparkContext.broadcast(scenario)
    sources = spark.createDataFrame([(0, "a"), (1, "a")], "entry int, node string")
    found = jobs.publish_events(sources, shared).orderBy("entry", "step", "key", "size").collect()
    probabilities = key_probabilities(scenario.keys)
    expected = sorted(
        (entry, int(s), int(k), int(z))
        for entry in (0, 1)
        for s, k, z in zip(*events(scenario, entry, "a", probabilities).values(), strict=True)
    )
    assert [(r.entry, r.step, r.key, r.size) for r in found] == expected and len(expected) > 100
