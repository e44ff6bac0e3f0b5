"""The pipeline's jobs: each a pure function from DataFrames (and plain values) to a DataFrame,
unit-tested on tiny inputs in tests/spark/.

Column names: a class of publish is (entry, node, key); a step is `step`; a link is its id
"from>to" (simulations.world.link_id); paths are arrays of link ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from fnmatch import fnmatchcase
from functools import reduce
from typing import Any

import numpy as np
import pandas as pd
from pyspark import Broadcast
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from simulations.holding import Message
from simulations.scenario import Scenario
from simulations.workload import KeyDraw, size_range, source_seed, step_counts
from simulations.world import DURABLE, Gate, World
from spark.failures import Failures
from spark.frames import local_frame
from spark.shipping import received

CLASS = ["entry", "node", "key"]
ROUTES_SCHEMA = (
    "cid bigint, entry int, node string, key int, kind string, link string, path array<string>, "
    "at string, queue string, exchange string, looped boolean, gates string, copies bigint"
)
#: A crossing's gates (simulations.world.Gate) as its route row's `gates` holds them, in JSON.
GATES_SCHEMA = "array<struct<position:int, leaves:array<array<string>>>>"

#: Route rows a routing task hands to Arrow at a time (classes of 10,000 nodes make about
#: 7,000 rows each, so a batch of 10,000 classes would hold 70 million rows in one list).
ROUTE_ROWS = 200_000

#: The World of each broadcast scenario (spark.shipping.shipped), built once per Python
#: worker (interest converges once), by the identity of the worker's copy (kept alive by the
#: dict, so ids stay unique).
_worlds: dict[int, tuple[Scenario, World]] = {}


def world_of(scenario: Broadcast[Scenario]) -> World:
    value = scenario.value
    found = _worlds.get(id(value))
    if found is None:
        found = _worlds[id(value)] = (value, World(received(value)))
    return found[1]


# -- 1. events ----------------------------------------------------------------------------------


def publish_sources(spark: SparkSession, scenario: Scenario, shared: Broadcast[Scenario]) -> DataFrame:
    """The publishing nodes (entry, node, node_index, seed, low, high), found on the executors
    from the broadcast scenario (`shared`, spark.shipping), and, per publisher entry, its steps
    with messages (entry, step, first, count: events first .. first + count - 1 of each of its
    nodes), joined: one row per publishing node and step it publishes in. The schedule is
    built on the driver: its size is the steps', not the topology's."""
    schedule = []
    for entry, publishers in enumerate(scenario.publishers):
        counts = step_counts(scenario, publishers)
        firsts = np.cumsum(counts) - counts
        schedule += [
            (entry, int(step), int(firsts[step]), int(counts[step])) for step in np.flatnonzero(counts)
        ]

    def sources(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        value = world_of(shared).scenario
        names = list(value.topology.nodes)
        for batch in batches:
            rows = [
                (entry, names[index], index, source_seed(value, entry, names[index]), *size_range(publishers))
                for index in batch["id"]
                for entry, publishers in enumerate(value.publishers)
                if fnmatchcase(names[index], publishers.nodes)
            ]
            yield pd.DataFrame(rows, columns=["entry", "node", "node_index", "seed", "low", "high"])

    sources_df = spark.range(len(scenario.topology.nodes)).mapInPandas(
        sources, "entry int, node string, node_index int, seed bigint, low bigint, high bigint"
    )
    schedule_df = local_frame(spark, schedule, "entry int, step bigint, first bigint, count bigint")
    return sources_df.join(F.broadcast(schedule_df), "entry")


def publish_events(sources: DataFrame, draws: tuple[KeyDraw, ...]) -> DataFrame:
    """publish_sources -> one row per publish event (entry, node, node_index, step, key, size),
    by the draw of simulations.workload in built-in functions: the events' numbers are
    exploded from each (node, step) row, the key and size are hashes of (seed, number), the
    key by its entry's draw (`draws`, one per entry, as workload.publisher_draws)."""
    numbered = sources.select(
        "entry",
        "node",
        "node_index",
        "step",
        "seed",
        "low",
        "high",
        F.explode(F.sequence(F.col("first"), F.col("first") + F.col("count") - 1)).alias("number"),
    )
    h = F.xxhash64(F.col("seed"), F.col("number"))
    g = F.xxhash64(F.col("seed"), F.col("number"), F.lit(1).cast("bigint"))
    entries: dict[KeyDraw, list[int]] = {}
    for entry, draw in enumerate(draws):
        entries.setdefault(draw, []).append(entry)
    keys = [(_drawn_key(h, draw), entries[draw]) for draw in entries]
    key = keys[-1][0] if keys else F.lit(0)
    for expression, where in keys[:-1]:
        key = F.when(F.col("entry").isin(where), expression).otherwise(key)
    span = F.col("high") - F.col("low") + 1
    return numbered.select(
        "entry",
        "node",
        "node_index",
        "step",
        key.alias("key"),
        (F.col("low") + F.shiftrightunsigned(g, 1) % span).alias("size"),
    )


def _drawn_key(h: Column, draw: KeyDraw) -> Column:
    """The key number an event hash `h` draws by `draw` (workload.draw_keys, in columns)."""
    bucket = F.shiftrightunsigned(F.shiftrightunsigned(h, 32) * F.lit(draw.size), 32).cast("int")
    threshold = F.array(*(F.lit(t).cast("bigint") for t in draw.threshold))
    alias = F.array(*(F.lit(a) for a in draw.alias))
    keep = h.bitwiseAND(F.lit(0xFFFFFFFF)) < F.element_at(threshold, bucket + 1)
    drawn = F.when(keep, bucket).otherwise(F.element_at(alias, bucket + 1))
    if draw.numbers is None:
        return drawn
    return F.element_at(F.array(*(F.lit(n) for n in draw.numbers)), drawn + 1)


def class_steps(events_df: DataFrame, nodes: int, keys: int) -> DataFrame:
    """Events -> messages and bytes per class and step, with the class's number `cid`
    ((entry x nodes + node_index) x keys + key), a cheap key for the joins with routes, and
    the node's number `node_index` (its place in the topology's nodes)."""
    cid = (F.col("entry").cast("bigint") * nodes + F.col("node_index")) * keys + F.col("key")
    return events_df.groupBy(cid.alias("cid"), *CLASS, "node_index", "step").agg(
        F.count("*").alias("messages"), F.sum("size").alias("bytes")
    )


# -- 2. routing ---------------------------------------------------------------------------------


def route_classes(
    classes: DataFrame, scenario: Broadcast[Scenario], rows_per_frame: int = ROUTE_ROWS
) -> DataFrame:
    """Classes (cid, entry, node, key; optionally with their message given as exchange,
    routing_key and headers as JSON) -> their routes, one row per crossing (kind "cross":
    `link` with the `path` before it) and per delivery (kind "deliver": queue `queue` on node
    `at`, `path` the hops to it), with the copies that take it. Each class is routed once, by
    the shared model, with the message simulations.world says it publishes (exchange, routing
    key, headers). A task hands its rows to Arrow `rows_per_frame` at a time or so (a frame
    closes after the class that fills it)."""

    names = [
        "cid",
        "entry",
        "node",
        "key",
        "kind",
        "link",
        "path",
        "at",
        "queue",
        "exchange",
        "looped",
        "gates",
        "copies",
    ]

    def route(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        world = world_of(scenario)
        for batch in batches:
            rows: list[tuple[Any, ...]] = []
            flushed = False
            columns = [batch[c] for c in ("cid", "entry", "node", "key")]
            given = "exchange" in batch  # messages given, rather than drawn from the key space
            messages = (
                zip(batch["exchange"], batch["routing_key"], batch["headers"], strict=True) if given else None
            )
            for cid, entry, node, key in zip(*columns, strict=True):
                if messages is not None:
                    exchange, routing_key, headers = next(messages)
                    message = (str(exchange), str(routing_key), json.loads(headers))
                else:
                    message = world.message(int(entry), int(key))
                found = world.route(str(node), *message)
                cls = (int(cid), int(entry), str(node), int(key))
                gates = found.gates or ((),) * len(found.crossings)
                rows += [
                    (*cls, "cross", link, list(before), None, None, landed, looped, _gates_json(gated), n)
                    for (link, before, n), gated, (landed, looped) in zip(
                        found.crossings, gates, found.landings, strict=True
                    )
                ]
                rows += [
                    (*cls, "deliver", None, list(path), at, q, "", False, "", n)
                    for at, q, path, n in found.deliveries
                ]
                if len(rows) >= rows_per_frame:  # a batch of large classes' routes need not fit at once
                    yield pd.DataFrame(rows, columns=names)
                    rows, flushed = [], True
            if rows or not flushed:
                yield pd.DataFrame(rows, columns=names)

    return classes.mapInPandas(route, ROUTES_SCHEMA)


def _gates_json(gates: tuple[Gate, ...]) -> str:
    """A crossing's gates as GATES_SCHEMA in JSON ("": none)."""
    if not gates:
        return ""
    return json.dumps(
        [{"position": position, "leaves": [list(leaf) for leaf in leaves]} for position, leaves in gates]
    )


# -- 3. traffic ---------------------------------------------------------------------------------


#: What tells two routes apart once the classes are summed away.
ROUTE = ["kind", "link", "path", "at", "queue", "exchange", "looped", "gates"]
#: The message's properties a held copy's fate depends on (simulations.holding), as columns
#: routes carry when some publisher entry does not have the default (persistent, no TTL).
PROPERTIES = ["persistent", "ttl_ms"]


def with_properties(routes: DataFrame, messages: Sequence[Message]) -> DataFrame:
    """`routes` (with an `entry` column) with its entry's `persistent` and `ttl_ms` (-1:
    none), if some entry of `messages` (one per publisher entry) differs from the default."""
    if all(message == DURABLE for message in messages):
        return routes
    index = F.col("entry") + 1
    persistent = F.array(*(F.lit(m.persistent) for m in messages))
    ttl = F.array(*(F.lit(-1 if m.ttl_ms is None else m.ttl_ms).cast("bigint") for m in messages))
    return routes.withColumn("persistent", F.element_at(persistent, index)).withColumn(
        "ttl_ms", F.element_at(ttl, index)
    )


def _properties(df: DataFrame) -> tuple[Column | None, Column | None]:
    """The message property columns of `df`, None where it has none (the defaults)."""
    if "persistent" not in df.columns:
        return None, None
    return F.col("persistent"), F.col("ttl_ms")


def carried(steps: DataFrame, routes: DataFrame) -> DataFrame:
    """Per route (kind, link, path, at, queue, and the message's properties if routes carry
    them) and step, the messages and bytes it carries, summed over the classes that take it
    (each class's messages times its copies). This is the one join whose size is classes x
    steps x routes per class: it runs on numbers only (the class number and a route number
    from a small table of distinct routes, numbered in their sort order so that every
    computation of it agrees), and the routes' columns come back once per route and step."""
    route = ROUTE + [name for name in PROPERTIES if name in routes.columns]
    keyed = routes.fillna("", ["link", "at", "queue"])  # so that the route columns join
    numbered = keyed.select(*route).distinct().withColumn("rid", F.row_number().over(Window.orderBy(*route)))
    by_class = keyed.join(numbered, route).select("cid", "rid", "copies")
    sums = (
        steps.select("cid", "step", "messages", "bytes")
        .join(by_class, "cid")
        .groupBy("rid", "step")
        .agg(
            F.sum(F.col("messages") * F.col("copies")).alias("messages"),
            F.sum(F.col("bytes") * F.col("copies")).alias("bytes"),
        )
    )
    return sums.join(numbered, "rid").select(*route, "step", "messages", "bytes")


def offered(carried_df: DataFrame, failures: Failures) -> DataFrame:
    """Messages and bytes offered to each link at each step (from `carried`): what every
    crossing carries, except copies lost (or dropped) at an earlier link or withdrawn; and of
    those, what the link's source drops while holding them (`dropped`, `dropped_bytes`)."""
    made_df = made(carried_df, failures)
    dropped = failures.dropped(F.col("link"), F.col("step"), *_properties(carried_df))
    return made_df.groupBy("link", "step").agg(
        F.sum("messages").alias("messages"),
        F.sum("bytes").alias("bytes"),
        F.sum(F.when(dropped, F.col("messages")).otherwise(0)).alias("dropped"),
        F.sum(F.when(dropped, F.col("bytes")).otherwise(0)).alias("dropped_bytes"),
    )


def landed(made_df: DataFrame, failures: Failures) -> DataFrame:
    """Per (node, exchange), the copies of `made` crossings that arrive there (`published`:
    offered to a link within the run, neither dropped by its source nor lost on it) and those
    the node drops as looping."""
    offered = (F.col("exchange") != "") & (F.col("step") < failures.steps)
    dropped = failures.dropped(F.col("link"), F.col("step"), *_properties(made_df))
    arrived = made_df.where(offered & ~dropped & ~failures.losing(F.col("link"), F.col("step")))
    return arrived.select(
        F.split("link", ">")[1].alias("node"),
        "exchange",
        F.col("messages").alias("published"),
        F.when(F.col("looped"), F.col("messages")).otherwise(0).alias("dropped_looping"),
    )


def made(carried_df: DataFrame, failures: Failures) -> DataFrame:
    """The crossings of `carried` that are made, at the step each reaches its link (`step`):
    not lost (or dropped) at an earlier link, nor withdrawn."""
    crossings = carried_df.where(F.col("kind") == "cross")
    persistent, ttl_ms = _properties(carried_df)
    walked = crossings.withColumn("walk", failures.walk(F.col("path"), F.col("step"), persistent, ttl_ms))
    # A copy held by a link down before this one reaches it when that link is back (past the
    # run's end: a step the links table does not have); none is sent while the bindings it
    # would be forwarded for are gone (simulations.world.Outages.withdrawn).
    gates = F.when(F.col("gates") != "", F.from_json("gates", GATES_SCHEMA))  # (parsed only where some)
    sent = ~failures.withdrawn(F.concat(F.col("path"), F.array(F.col("link"))), gates, F.col("step"))
    return walked.where(~F.col("walk.lost") & sent).withColumn("step", F.col("walk.after"))


def exchange_table(origins: DataFrame, parts: list[DataFrame]) -> DataFrame:
    """The `exchanges` table: per (node, exchange) with something published into it, the
    publishes accepted there (`origins`: node, exchange, messages) and the copies `parts`
    (`landed`'s rows) bring."""
    published = origins.select(
        "node", "exchange", F.col("messages").alias("published"), F.lit(0).alias("dropped_looping")
    )
    union = reduce(DataFrame.unionByName, [published, *parts])
    totals = union.groupBy("node", "exchange").agg(
        F.sum("published").cast("bigint").alias("published"),
        F.sum("dropped_looping").cast("bigint").alias("dropped_looping"),
    )
    return totals.where(F.col("published") > 0)


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
    # The steps broadcast (a few rows): with links computed on executors, of unknown size,
    # Spark would otherwise make a cartesian product that computes the links again per pair.
    grid = links.crossJoin(F.broadcast(links.sparkSession.range(steps).withColumnRenamed("id", "step")))
    if "dropped" not in offered_df.columns:  # (no part drops anything)
        offered_df = offered_df.withColumn("dropped", F.lit(0)).withColumn("dropped_bytes", F.lit(0))
    df = grid.join(offered_df, ["link", "step"], "left").fillna(
        0, ["messages", "bytes", "dropped", "dropped_bytes"]
    )
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
    # What the source drops never joins the backlog.
    arrive = F.when(F.col("losing"), 0).otherwise(F.col("messages") - F.col("dropped"))
    arrive_b = F.when(F.col("losing"), 0).otherwise(F.col("bytes") - F.col("dropped_bytes"))
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
        F.col("dropped").cast("bigint").alias("dropped"),
        "down",
        "capacity",
        F.col("backlog").cast("bigint").alias("backlog"),
        F.col("backlog_bytes").cast("bigint").alias("backlog_bytes"),
        (queueing + failures.wait_ms(link, step)).cast("bigint").alias("delay_ms"),
        "latency_ms",
    )


# -- 4. outcomes --------------------------------------------------------------------------------


def path_delays(paths: DataFrame, traffic: DataFrame, failures: Failures) -> DataFrame:
    """Delay over each delivery path (a column `path`) published at each step (`step`): the
    latency plus queueing delay of its links, each at the step the copy reaches it (its
    latency alone past the run's end). Computed per distinct (path, step): many classes
    share them."""
    pairs = paths.where(F.size("path") > 0).select("path", "step").distinct()
    hops = pairs.select(
        "path",
        "step",
        failures.arrivals(F.col("path"), F.col("step")).alias("at"),
        F.posexplode("path").alias("position", "link"),
    ).select("path", "step", "link", F.element_at("at", F.col("position") + 1).alias("at"))
    per_link = traffic.select(
        "link", F.col("step").alias("at"), (F.col("latency_ms") + F.col("delay_ms")).alias("link_ms")
    )
    # Past the run's last step (where copies held to the end go on) a link has its latency.
    past_end = traffic.where(F.col("step") == 0).select(
        "link", F.lit(failures.steps).cast("bigint").alias("at"), F.col("latency_ms").alias("link_ms")
    )
    return (
        hops.join(per_link.unionByName(past_end), ["link", "at"])
        .groupBy("path", "step")
        .agg(F.sum("link_ms").cast("bigint").alias("delay_ms"))
    )


def deliveries(carried_df: DataFrame, traffic: DataFrame, failures: Failures) -> DataFrame:
    """One row per delivery path, queue and step (from `carried`): the copies the queue gets
    that way (`n`), whether they are lost (a transient link on the path was down) or delayed
    (a durable one was), their hops and delay (latency plus queueing over the path's links).
    The failure and delay columns are computed per path and step, not per class."""
    paths = carried_df.where(F.col("kind") == "deliver")
    rows = paths.join(path_delays(paths, traffic, failures), ["path", "step"], "left").withColumn(
        "walk", failures.walk(F.col("path"), F.col("step"), *_properties(carried_df))
    )
    return rows.select(
        "at",
        "queue",
        "step",
        F.col("messages").alias("n"),
        F.size("path").cast("bigint").alias("hops"),
        F.col("walk.lost").alias("lost"),
        F.col("walk.through_down").alias("through_down"),
        F.coalesce(F.col("delay_ms"), F.lit(0)).cast("bigint").alias("delay_ms"),
    )


def duplicates(steps: DataFrame, routes: DataFrame, failures: Failures) -> DataFrame:
    """Per queue (at, queue), the copies of one publish it gets beyond the first, summed over
    publishes: only classes that reach a queue more than once (by several paths or several
    copies on one path) can make any, so only their rows are joined with the steps."""
    properties = [name for name in PROPERTIES if name in routes.columns]
    paths = routes.where(F.col("kind") == "deliver").select(
        "cid", "at", "queue", "path", "copies", *properties
    )
    many = (
        paths.groupBy("cid", "at", "queue")
        .agg(F.sum("copies").alias("total"))
        .where(F.col("total") > 1)
        .select("cid", "at", "queue")
    )
    rows = paths.join(many, ["cid", "at", "queue"]).join(steps.select("cid", "step", "messages"), "cid")
    return (
        rows.where(~failures.walk(F.col("path"), F.col("step"), *_properties(routes))["lost"])
        .groupBy("cid", "step", "at", "queue")
        .agg((F.first("messages") * (F.sum("copies") - 1)).alias("dups"))
        .groupBy("at", "queue")
        .agg(F.sum("dups").alias("duplicates"))
    )


def queue_table(delivered: DataFrame, duplicated: DataFrame | None) -> DataFrame:
    """The `queues` table from the delivery rows and the duplicates per queue (None: no
    route delivers more than one copy)."""
    kept = ~F.col("lost")

    def total(value: Column, when: Column) -> Column:
        return F.sum(F.when(when, value).otherwise(0)).cast("bigint")

    counts = delivered.groupBy("at", "queue").agg(
        total(F.col("n"), kept).alias("delivered"),
        total(F.col("n"), F.col("lost")).alias("lost"),
        total(F.col("n"), kept & F.col("through_down")).alias("delayed"),
        F.max("hops").cast("bigint").alias("max_hops"),
        total(F.col("n") * F.col("delay_ms"), kept).alias("total_delay_ms"),
    )
    if duplicated is None:
        with_duplicates = counts.withColumn("duplicates", F.lit(0))
    else:
        with_duplicates = counts.join(duplicated, ["at", "queue"], "left").fillna(0, ["duplicates"])
    return with_duplicates.select(
        F.col("at").alias("node"),
        "queue",
        "delivered",
        F.col("duplicates").cast("bigint"),
        "lost",
        "delayed",
        "max_hops",
        "total_delay_ms",
    )


def delay_table(delivered: DataFrame, nodes: DataFrame) -> DataFrame:
    """The `delays` table: delivered messages by queue, hops and delay, with the region (rows
    with no messages, which only carry a queue's most hops for the queues table, left out)."""
    return (
        delivered.where(~F.col("lost") & (F.col("n") > 0))
        .groupBy(F.col("at").alias("node"), "queue", "hops", "delay_ms")
        .agg(F.sum("n").cast("bigint").alias("messages"))
        .join(nodes.select("node", "region"), "node")
        .select("node", "queue", "hops", "delay_ms", "region", "messages")
    )


def node_table(
    nodes: DataFrame,
    steps: DataFrame,
    refused: DataFrame,
    routed: DataFrame,
    traffic: DataFrame,
    queues: DataFrame,
) -> DataFrame:
    """The `nodes` table: published (the class steps a node accepted) and unrouted (reached no
    queue: its class number is not among the distinct `routed` cid) per node, refused (the
    class steps of `refused`: sent while the node was dead), messages sent and received over
    links, delivered to its queues. One union of the parts and one aggregation, rather than a
    join per column."""
    counts = ["published", "refused", "unrouted", "sent", "received", "delivered"]

    def part(df: DataFrame, node: str, **values: Column) -> DataFrame:
        return df.select(
            F.col(node).alias("node"), *(values.get(c, F.lit(0)).cast("bigint").alias(c) for c in counts)
        )

    flagged = steps.join(routed.withColumn("routed", F.lit(True)), "cid", "left")
    parts = [
        part(nodes, "node"),
        part(
            flagged,
            "node",
            published=F.col("messages"),
            unrouted=F.when(F.col("routed").isNull(), F.col("messages")).otherwise(0),
        ),
        part(refused, "node", refused=F.col("messages")),
        part(traffic, "source", sent=F.col("messages")),
        part(traffic, "destination", received=F.col("messages") - F.col("lost") - F.col("dropped")),
        part(queues, "node", delivered=F.col("delivered")),
    ]
    # A union has its parts' partitions end to end (27 tiny tasks at 1,000,000 events on 2
    # cores); its partial sums need no more tasks than cores.
    union = reduce(DataFrame.unionByName, parts)
    union = union.coalesce(union.sparkSession.sparkContext.defaultParallelism)
    totals = union.groupBy("node").agg(*(F.sum(c).cast("bigint").alias(c) for c in counts))
    return totals.join(nodes.select("node", "region"), "node").select("node", "region", *counts)
