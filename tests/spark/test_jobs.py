"""Each Spark job on tiny inputs, against values worked out by hand."""

from __future__ import annotations

import numpy as np
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F

from simulations.scenario import KeySpace, Scenario, load_scenario, load_scenario_text
from simulations.workload import (
    draw_keys,
    events,
    key_draw,
    key_probabilities,
    publisher_draws,
    publishing,
    xxhash64,
)
from simulations.world import Window
from spark import jobs
from spark.failures import Failures
from spark.frames import local_frame
from spark.shipping import shipped
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
    failures = Failures.of([Window(1, 3, frozenset({"t", "d"}))], {"t": False, "d": True}, 1000, 4)
    rows = {(r.link, r.step): r for r in jobs.link_traffic(offered, links, 4, failures).collect()}
    transient = [(rows["t", s].backlog, rows["t", s].lost, rows["t", s].lost_in_flight) for s in range(4)]
    assert transient == [(5, 0, 0), (0, 10, 5), (0, 0, 0), (0, 0, 0)]
    durable = [(rows["d", s].backlog, rows["d", s].lost, rows["d", s].delay_ms) for s in range(4)]
    # Down at steps 1-2: capacity 0, so 15 wait; the wait until the end of the window is added.
    assert durable == [(5, 0, 1000), (15, 0, 3000 + 2000), (15, 0, 3000 + 1000), (10, 0, 2000)]


def test_offered_drops_copies_lost_at_an_earlier_link(spark: SparkSession) -> None:
    steps = spark.createDataFrame(
        [(7, 0, "a", 1, 0, 4, 40), (7, 0, "a", 1, 1, 2, 20)],
        "cid bigint, entry int, node string, key int, step bigint, messages bigint, bytes bigint",
    )
    routes = spark.createDataFrame(
        [
            (7, 0, "a", 1, "cross", "a>b", [], None, None, "t", False, "", 1),
            (7, 0, "a", 1, "cross", "b>c", ["a>b"], None, None, "t", False, "", 2),
        ],
        jobs.ROUTES_SCHEMA,
    )
    failures = Failures.of([Window(1, 2, frozenset({"a>b"}))], {"a>b": False}, 1000, 4)
    found = {
        (r.link, r.step): (r.messages, r.bytes)
        for r in jobs.offered(jobs.carried(steps, routes), failures).collect()
    }
    # At step 1 a>b is down and transient: it is offered its copies (and loses them), b>c none.
    assert found == {("a>b", 0): (4, 40), ("b>c", 0): (8, 80), ("a>b", 1): (2, 20)}


def test_duplicates_count_copies_beyond_the_first_that_are_not_lost(spark: SparkSession) -> None:
    steps = spark.createDataFrame(
        [(7, 0, "a", 1, 0, 4, 40), (7, 0, "a", 1, 1, 2, 20), (8, 0, "a", 2, 0, 5, 50)],
        "cid bigint, entry int, node string, key int, step bigint, messages bigint, bytes bigint",
    )
    routes = spark.createDataFrame(
        [
            (7, 0, "a", 1, "deliver", None, ["a>b"], "b", "q", "", False, "", 1),
            (7, 0, "a", 1, "deliver", None, ["a>c", "c>b"], "b", "q", "", False, "", 1),
            (8, 0, "a", 2, "deliver", None, ["a>b"], "b", "q", "", False, "", 1),  # once: no duplicates
        ],
        jobs.ROUTES_SCHEMA,
    )
    failures = Failures.of([Window(1, 2, frozenset({"a>c"}))], {"a>c": False}, 1000, 4)
    found = [(r.at, r.queue, r.duplicates) for r in jobs.duplicates(steps, routes, failures).collect()]
    # Step 0: 4 publishes reach b twice (4 duplicates); step 1: the copy over a>c is lost.
    assert found == [("b", "q", 4)]


def test_events_are_the_workloads_draws(spark: SparkSession) -> None:
    scenario: Scenario = load_scenario(SCENARIOS / "corners.toml")
    shared = spark.sparkContext.broadcast(shipped(scenario))
    sources = jobs.publish_sources(spark, scenario, shared).where(F.col("node") == "a")
    draws = publisher_draws(scenario)
    found = jobs.publish_events(sources, draws).orderBy("entry", "step", "key", "size").collect()
    expected = sorted(
        (entry, int(s), int(k), int(z))
        for entry in (0, 1)
        for s, k, z in zip(*events(scenario, entry, "a", draws[entry]).values(), strict=True)
    )
    assert [(r.entry, r.step, r.key, r.size) for r in found] == expected and len(expected) > 100


def test_events_with_own_keys_are_the_workloads_draws(spark: SparkSession) -> None:
    """Publishers with their own keys (a list, drawn by the scenario's distribution, or one
    fixed key) draw in Spark exactly as in the workload, numbered after the drawn keys."""
    scenario = load_scenario_text(
        """[scenario]
duration = 20
step = 0.5
[topology]
generator = "hierarchy"
hubs = 1
edges = 2
[keys]
words = [2, 2]
distribution = "zipf"
[[publishers]]
nodes = "edge-*"
exchange = "sim.topic"
rate = 20
keys = ["orders.eu", "orders.us", "a0.b1", "x"]
[[publishers]]
nodes = "hub-*"
exchange = "sim.topic"
rate = 10
key = "orders.us"
[[publishers]]
nodes = "root"
exchange = "sim.topic"
rate = 10
""",
        str(SCENARIOS / "own.toml"),
    )
    assert scenario.keys.own == ("orders.eu", "orders.us", "a0.b1", "x")
    draws = publisher_draws(scenario)
    shared = spark.sparkContext.broadcast(shipped(scenario))
    found = jobs.publish_events(jobs.publish_sources(spark, scenario, shared), draws)
    rows = sorted((r.entry, r.node, r.step, r.key, r.size) for r in found.collect())
    expected = sorted(
        (entry, node, int(s), int(k), int(z))
        for entry, node in publishing(scenario)
        for s, k, z in zip(*events(scenario, entry, node, draws[entry]).values(), strict=True)
    )
    assert rows == expected
    keys = {entry: {key for e, _, _, key, _ in rows if e == entry} for entry in (0, 1, 2)}
    assert keys == {0: {4, 5, 6, 7}, 1: {5}, 2: {0, 1, 2, 3}}


def test_the_draws_hash_is_sparks_xxhash64(spark: SparkSession) -> None:
    values = [(0, 0), (1, -1), (-(2**63), 2**63 - 1), (123456789, 42), (-5, 10**15)]
    df = spark.createDataFrame(values, "a bigint, b bigint")
    found = [
        (r.h, r.g)
        for r in df.select(
            F.xxhash64("a", "b").alias("h"), F.xxhash64("a", "b", F.lit(1).cast("bigint")).alias("g")
        ).collect()
    ]
    a, b = (np.array(column, dtype=np.int64) for column in zip(*values, strict=True))
    expected = zip(
        xxhash64(a, b).view(np.int64).tolist(), xxhash64(a, b, 1).view(np.int64).tolist(), strict=True
    )
    assert found == list(expected)


def test_the_key_draw_follows_the_probabilities() -> None:
    keys = KeySpace(words=(4, 5), distribution="zipf", zipf_s=1.1)
    draw = key_draw(keys)
    drawn = draw_keys(draw, xxhash64(99, np.arange(200_000)))
    observed = np.bincount(drawn, minlength=draw.size) / len(drawn)
    assert np.allclose(observed, key_probabilities(keys), atol=0.005)


def test_driver_tables_are_local_relations_in_the_plan(spark: SparkSession) -> None:
    """The small tables the driver builds travel inside the query plan, typed as declared
    (a list given to createDataFrame is an RDD that a Python task decodes per query)."""
    links = local_frame(spark, [(1, "a>b"), (2, None)], "tree int, link string")
    assert "LocalRelation" in links._jdf.queryExecution().optimizedPlan().toString()
    assert links.dtypes == [("tree", "int"), ("link", "string")]
    assert links.collect() == [Row(tree=1, link="a>b"), Row(tree=2, link=None)]
    empty = local_frame(spark, [], "tree int, link string")
    assert empty.dtypes == links.dtypes and empty.count() == 0
