"""The pipeline's jobs: each a pure function from DataFrames (and plain values) to a DataFrame,
unit-tested on tiny inputs in tests/spark/.

Column names: a class of publish is (entry, node, key); a step is `step`; a link is its id
"from>to" (simulations.world.link_id); paths are arrays of link ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import reduce
from typing import Any

import pandas as pd
from pyspark import Broadcast
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from simulations.scenario import Scenario
from simulations.workload import events, key_probabilities
from simulations.world import World
from spark.failures import Failures

CLASS = ["entry", "node", "key"]
EVENTS_SCHEMA = "entry int, node string, step bigint, key int, size bigint"
MESSAGE_SCHEMA = "entry int, node string, key int"
ROUTES_SCHEMA = (
    f"{MESSAGE_SCHEMA}, kind string, link string, path array<string>, at string, queue string, copies bigint"
)

#: Route rows a routing task hands to Arrow at a time (classes of 10,000 nodes make about
#: 7,000 rows each, so a batch of 10,000 classes would hold 70 million rows in one list).
ROUTE_ROWS = 200_000

#: The World of each broadcast scenario, built once per Python worker (interest converges
#: once), by the identity of the worker's copy (a World keeps it alive, so ids stay unique).
_worlds: dict[int, World] = {}


def _world(scenario: Broadcast[Scenario]) -> World:
    value = scenario.value
    world = _worlds.get(id(value))
    if world is None:
        world = _worlds[id(value)] = World(value)
    return world


# -- 1. events ----------------------------------------------------------------------------------


def publish_events(sources: DataFrame, scenario: Broadcast[Scenario]) -> DataFrame:
    """(entry, node) publishing sources -> one row per publish event (entry, node, step, key,
    size), drawn by simulations.workload, vectorised per source."""

    def draw(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        value = scenario.value
        probabilities = key_probabilities(value.keys)
        for batch in batches:
            for entry, node in zip(batch["entry"], batch["node"], strict=True):
                drawn = events(value, int(entry), str(node), probabilities)
                yield pd.DataFrame({"entry": int(entry), "node": str(node), **drawn})

    return sources.mapInPandas(draw, EVENTS_SCHEMA)


def class_steps(events_df: DataFrame) -> DataFrame:
    """Events -> messages and bytes per class and step."""
    return events_df.groupBy(*CLASS, "step").agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"))


# -- 2. routing ---------------------------------------------------------------------------------


def class_messages(classes: DataFrame, scenario: Broadcast[Scenario]) -> DataFrame:
    """Classes (entry, node, key) -> with the message each publishes: exchange, routing_key
    and headers (JSON), as simulations.world says."""

    def describe(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        world = _world(scenario)
        for batch in batches:
            found = [world.message(int(e), int(k)) for e, k in zip(batch["entry"], batch["key"], strict=True)]
            yield batch.assign(
                exchange=[exchange for exchange, _, _ in found],
                routing_key=[key for _, key, _ in found],
                headers=[json.dumps(headers) for _, _, headers in found],
            )

    return classes.mapInPandas(
        describe, f"{MESSAGE_SCHEMA}, exchange string, routing_key string, headers string"
    )


def route_classes(
    classes: DataFrame, scenario: Broadcast[Scenario], rows_per_frame: int = ROUTE_ROWS
) -> DataFrame:
    """Classes with their message (class_messages) -> their routes, one row per crossing (kind
    "cross": `link` with the `path` before it) and per delivery (kind "deliver": queue `queue`
    on node `at`, `path` the hops to it), with the copies that take it. Each class is routed
    once, by the shared model. A task hands its rows to Arrow `rows_per_frame` at a time or
    so (a frame closes after the class that fills it)."""

    names = ["entry", "node", "key", "kind", "link", "path", "at", "queue", "copies"]

    def route(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        world = _world(scenario)
        for batch in batches:
            rows: list[tuple[Any, ...]] = []
            flushed = False
            columns = [batch[c] for c in ("entry", "node", "key", "exchange", "routing_key", "headers")]
            for entry, node, key, exchange, routing_key, headers in zip(*columns, strict=True):
                found = world.route(str(node), str(exchange), str(routing_key), json.loads(headers))
                cls = (int(entry), str(node), int(key))
                rows += [
                    (*cls, "cross", link, list(before), None, None, n) for link, before, n in found.crossings
                ]
                rows += [(*cls, "deliver", None, list(path), at, q, n) for at, q, path, n in found.deliveries]
                if len(rows) >= rows_per_frame:  # a batch of large classes' routes need not fit at once
                    yield pd.DataFrame(rows, columns=names)
                    rows, flushed = [], True
            if rows or not flushed:
                yield pd.DataFrame(rows, columns=names)

    return classes.mapInPandas(route, ROUTES_SCHEMA)


# -- 3. traffic ---------------------------------------------------------------------------------


def offered(steps: DataFrame, routes: DataFrame, failures: Failures) -> DataFrame:
    """Messages and bytes offered to each link at each step: every class's crossings times
    its messages, except copies lost at an earlier link that was down and transient."""
    crossings = routes.where(F.col("kind") == "cross").select(*CLASS, "link", "path", "copies")
    joined = steps.join(crossings, CLASS)
    kept = joined.where(~failures.blocked(F.col("path"), F.col("step")))
    return kept.groupBy("link", "step").agg(
        F.sum(F.col("messages") * F.col("copies")).alias("messages"),
        F.sum(F.col("bytes") * F.col("copies")).alias("bytes"),
    )


def backlog(arrivals: Column, capacity: Column, by: list[str], order: str) -> Column:
    """The queue recursion W_t = max(0, W_{t-1} + a_t - c_t) in its parallel form: with S the
    running sum of a - c, W_t = S_t - min(0, min_{k<=t} S_k). Two window functions over the
    partition `by`, ordered by `order`; no row depends on the previous row's result."""
    running = Window.partitionBy(*by).orderBy(order).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    total = F.sum(arrivals - capacity).over(running)
    return total - F.least(F.lit(0), F.min(total).over(running))


def link_traffic(offered_df: DataFrame, links: DataFrame, steps: int, failures: Failures) -> DataFrame:
    """The `links` table: every link at every step, with its backlog (messages and bytes)
    and queueing delay. `links` has link, source, destination, latency_ms, capacity_msgs,
    capacity_bytes (per second). A transient link that goes down loses what it holds (a new
    segment of the running sums starts there) and what arrives while down; a durable one
    buffers (capacity 0) and drains at capacity after."""
    grid = links.crossJoin(links.sparkSession.range(steps).withColumnRenamed("id", "step"))
    df = grid.join(offered_df, ["link", "step"], "left").fillna(0, ["messages", "bytes"])
    link, step = F.col("link"), F.col("step")
    by_step = Window.partitionBy("link").orderBy("step")
    df = (
        df.withColumn("down", failures.down(link, step))
        .withColumn("losing", failures.losing(link, step))
        .withColumn("capacity", F.expr(f"capacity_msgs * {failures.step_ms} div 1000"))
        .withColumn("capacity_b", F.expr(f"capacity_bytes * {failures.step_ms} div 1000"))
        .withColumn("start", F.col("losing") & ~F.lag("losing", 1, False).over(by_step))
        .withColumn(
            "segment",
            F.sum(F.col("start").cast("int")).over(by_step.rowsBetween(Window.unboundedPreceding, 0)),
        )
    )
    arrive = F.when(F.col("losing"), 0).otherwise(F.col("messages"))
    arrive_b = F.when(F.col("losing"), 0).otherwise(F.col("bytes"))
    serve = F.when(F.col("down"), 0).otherwise(F.col("capacity"))
    serve_b = F.when(F.col("down"), 0).otherwise(F.col("capacity_b"))
    df = df.withColumn("backlog", backlog(arrive, serve, ["link", "segment"], "step")).withColumn(
        "backlog_bytes", backlog(arrive_b, serve_b, ["link", "segment"], "step")
    )
    queueing = F.greatest(
        F.expr("(backlog * 1000 + capacity_msgs - 1) div capacity_msgs"),
        F.expr("(backlog_bytes * 1000 + capacity_bytes - 1) div capacity_bytes"),
    )
    return df.select(
        "link",
        "step",
        "source",
        "destination",
        "messages",
        "bytes",
        F.when(F.col("losing"), F.col("messages")).otherwise(0).cast("bigint").alias("lost"),
        F.when(F.col("start"), F.lag("backlog", 1, 0).over(by_step))
        .otherwise(0)
        .cast("bigint")
        .alias("lost_in_flight"),
        "down",
        "capacity",
        F.col("backlog").cast("bigint").alias("backlog"),
        F.col("backlog_bytes").cast("bigint").alias("backlog_bytes"),
        (queueing + failures.wait_ms(link, step)).cast("bigint").alias("delay_ms"),
        "latency_ms",
    )


# -- 4. outcomes --------------------------------------------------------------------------------


def path_delays(routes: DataFrame, traffic: DataFrame) -> DataFrame:
    """Delay over each delivery path at each step: the latency plus queueing delay of its
    links. Computed per distinct path, not per delivery: many classes share a path."""
    paths = routes.where((F.col("kind") == "deliver") & (F.size("path") > 0)).select("path").distinct()
    hops = paths.select("path", F.explode("path").alias("link"))
    per_link = traffic.select("link", "step", (F.col("latency_ms") + F.col("delay_ms")).alias("link_ms"))
    return (
        hops.join(per_link, "link")
        .groupBy("path", "step")
        .agg(F.sum("link_ms").cast("bigint").alias("delay_ms"))
    )


def deliveries(steps: DataFrame, routes: DataFrame, traffic: DataFrame, failures: Failures) -> DataFrame:
    """One row per class, step and delivery path (the path itself dropped once used): the
    copies a queue gets (`n` = messages x copies), whether they are lost (a transient link on the path was down) or delayed (a
    durable one was), their hops and delay (latency plus queueing over the path's links)."""
    paths = routes.where(F.col("kind") == "deliver").select(*CLASS, "at", "queue", "path", "copies")
    rows = steps.join(paths, CLASS).join(path_delays(routes, traffic), ["path", "step"], "left")
    return rows.select(
        *CLASS,
        "step",
        "at",
        "queue",
        "copies",
        "messages",
        (F.col("messages") * F.col("copies")).alias("n"),
        F.size("path").cast("bigint").alias("hops"),
        failures.blocked(F.col("path"), F.col("step")).alias("lost"),
        failures.through_down(F.col("path"), F.col("step")).alias("through_down"),
        F.coalesce(F.col("delay_ms"), F.lit(0)).cast("bigint").alias("delay_ms"),
    )


def queue_table(delivered: DataFrame) -> DataFrame:
    """The `queues` table from the delivery rows."""
    kept = ~F.col("lost")
    duplicates = (
        delivered.where(kept)
        .groupBy(*CLASS, "step", "at", "queue")
        .agg((F.first("messages") * (F.sum("copies") - 1)).alias("dups"))
        .groupBy("at", "queue")
        .agg(F.sum("dups").alias("duplicates"))
    )

    def total(value: Column, when: Column) -> Column:
        return F.sum(F.when(when, value).otherwise(0)).cast("bigint")

    counts = delivered.groupBy("at", "queue").agg(
        total(F.col("n"), kept).alias("delivered"),
        total(F.col("n"), F.col("lost")).alias("lost"),
        total(F.col("n"), kept & F.col("through_down")).alias("delayed"),
        F.max("hops").cast("bigint").alias("max_hops"),
        total(F.col("n") * F.col("delay_ms"), kept).alias("total_delay_ms"),
    )
    return (
        counts.join(duplicates, ["at", "queue"], "left")
        .fillna(0, ["duplicates"])
        .select(
            F.col("at").alias("node"),
            "queue",
            "delivered",
            F.col("duplicates").cast("bigint"),
            "lost",
            "delayed",
            "max_hops",
            "total_delay_ms",
        )
    )


def delay_table(delivered: DataFrame, nodes: DataFrame) -> DataFrame:
    """The `delays` table: delivered messages by queue, hops and delay, with the region."""
    return (
        delivered.where(~F.col("lost"))
        .groupBy(F.col("at").alias("node"), "queue", "hops", "delay_ms")
        .agg(F.sum("n").cast("bigint").alias("messages"))
        .join(nodes.select("node", "region"), "node")
        .select("node", "queue", "hops", "delay_ms", "region", "messages")
    )


def node_table(
    nodes: DataFrame, steps: DataFrame, routes: DataFrame, traffic: DataFrame, queues: DataFrame
) -> DataFrame:
    """The `nodes` table: published and unrouted (reached no queue) per node, messages sent
    and received over links, delivered to its queues. One union of the parts and one
    aggregation, rather than a join per column."""
    counts = ["published", "unrouted", "sent", "received", "delivered"]

    def part(df: DataFrame, node: str, **values: Column) -> DataFrame:
        return df.select(
            F.col(node).alias("node"), *(values.get(c, F.lit(0)).cast("bigint").alias(c) for c in counts)
        )

    routed = (
        routes.where(F.col("kind") == "deliver").select(*CLASS).distinct().withColumn("routed", F.lit(True))
    )
    flagged = steps.join(F.broadcast(routed), CLASS, "left")
    parts = [
        part(nodes, "node"),
        part(
            flagged,
            "node",
            published=F.col("messages"),
            unrouted=F.when(F.col("routed").isNull(), F.col("messages")).otherwise(0),
        ),
        part(traffic, "source", sent=F.col("messages")),
        part(traffic, "destination", received=F.col("messages") - F.col("lost")),
        part(queues, "node", delivered=F.col("delivered")),
    ]
    union = reduce(DataFrame.unionByName, parts)
    totals = union.groupBy("node").agg(*(F.sum(c).cast("bigint").alias(c) for c in counts))
    return totals.join(nodes.select("node", "region"), "node").select("node", "region", *counts)
