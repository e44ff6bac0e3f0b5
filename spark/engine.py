"""The Spark engine: a scenario -> the Parquet tables of simulations.tables, by the jobs of
spark.jobs (publishes routed class by class) and spark.trees (publishes into plain forests,
routed in aggregate) chained on one session. The scenario travels to executors as a broadcast value of
constant size (spark.shipping: a generated topology as its generator's spec), and what is per
node or per link (which tree a publisher is on, a tree's links, links' properties, nodes'
regions) is found on the executors (spark.trees, spark.props), so the driver holds no
per-node table and collects only the links a failure takes down. Nothing assumes the
driver's disk (only --out must be a path every executor can write: the same machine, a
shared mount, or an hdfs:// or s3a:// URL).

Each way of routing is a part of the run (`_ClassPart`, `_TreePart`) that says which links its
publishes cross, what it offers to links, what it delivers and which classes reach a queue; a
run builds only the parts some publish takes, since every DataFrame costs Spark planning and
jobs even when it holds no rows (most of a small run's time)."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

import numpy as np
from pyspark import Broadcast
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from simulations.holding import Message
from simulations.scenario import Scenario
from simulations.tables import COLUMNS
from simulations.workload import matching, publisher_draws, publishing, step_counts
from simulations.world import World, link_id
from spark import jobs, props, trees
from spark.failures import Failures, dead
from spark.shipping import shipped

#: Told when the pipeline enters a stage, with the share of the work done before and after it.
Progress = Callable[[str, float, float], None]


def _quiet(stage: str, low: float, high: float) -> None:
    """No progress reporting."""


class _ClassPart:
    """Publishes routed class by class: each class's routes, joined with its steps."""

    def __init__(
        self, steps: DataFrame, shared: Broadcast[Scenario], parallelism: int, messages: list[Message]
    ) -> None:
        self.steps = steps
        classes = steps.select("cid", *jobs.CLASS).distinct().repartition(parallelism)
        self.routes = jobs.with_properties(jobs.route_classes(classes, shared), messages).cache()
        self.carried = jobs.carried(steps, self.routes).cache()

    def crossed(self) -> DataFrame:
        return self.routes.where(F.col("kind") == "cross").select("link")

    def offered(self, failures: Failures) -> DataFrame:
        return jobs.offered(self.carried, failures)

    def landed(self, failures: Failures) -> DataFrame:
        return jobs.landed(jobs.made(self.carried, failures), failures)

    def deliveries(self, traffic: DataFrame, failures: Failures) -> DataFrame:
        return jobs.deliveries(self.carried, traffic, failures).drop("step")

    def duplicates(self, failures: Failures) -> DataFrame | None:
        return jobs.duplicates(self.steps, self.routes, failures)

    def routed(self) -> DataFrame:
        return self.routes.where(F.col("kind") == "deliver").select("cid")


class _TreePart:
    """Publishes into plain forests, routed in aggregate per tree, run of keys and block of
    steps (a run's arrays bounded by trees.KEY_CELLS, a group's publishes by
    trees.GROUP_EVENTS, a tree's runs spread over every core)."""

    def __init__(
        self,
        steps: DataFrame,
        placed: DataFrame,
        scenario: Scenario,
        shared: Broadcast[Scenario],
        parallelism: int,
    ) -> None:
        self.shared, self.parallelism = shared, parallelism
        self.keys_per_run = trees.run_keys(scenario.keys.size, len(scenario.topology.nodes), parallelism)
        per_step = sum(
            (
                len(matching(scenario.topology, p.nodes)) * step_counts(scenario, p)
                for p in scenario.publishers
            ),
            np.zeros(scenario.steps, dtype=np.int64),
        )
        blocks = trees.block_steps(per_step)
        self.partitions = 4 * parallelism
        self.on_trees = (
            trees.with_runs(steps.join(placed, ["entry", "node"]), self.keys_per_run, blocks)
            .repartition(self.partitions, *trees.GROUP)
            .cache()
        )
        self.runs = self.on_trees.select(*trees.RUN).distinct().cache()
        self.groups = self.on_trees.select(*trees.GROUP).distinct()
        # What the trees' functions read: numbers only (strings cost a Python object per row).
        self.cells = self.on_trees.select(*trees.GROUP, "node_index", "key", "step", "messages", "bytes")
        self.carried = trees.offered(self.cells, shared, self.keys_per_run).cache()

    def crossed(self) -> DataFrame:
        return self.carried.where("crossed").select("link")

    def offered(self, failures: Failures) -> DataFrame:
        return self.carried.drop("crossed", "exchange")

    def landed(self, failures: Failures) -> DataFrame:
        # (a plain forest's copies stay on its exchange, and none loops)
        return jobs.landed(self.carried.where(~F.col("crossed")).withColumn("looped", F.lit(False)), failures)

    def deliveries(self, traffic: DataFrame, failures: Failures) -> DataFrame:
        # Only delays other than the link's latency travel (a task takes the latency for the rest).
        delayed = traffic.where(F.col("delay_ms") > 0).select(
            "link", "step", (F.col("latency_ms") + F.col("delay_ms")).alias("link_ms")
        )
        links = trees.tree_links(self.runs.select(*trees.TREE).distinct(), self.shared)
        link_ms = (
            delayed.join(links, "link")
            .join(self.groups, trees.TREE)
            .repartition(self.partitions, *trees.GROUP)
        )
        return trees.deliveries(self.cells, link_ms, self.shared, self.keys_per_run)

    def duplicates(self, failures: Failures) -> DataFrame | None:
        return None  # a plain forest delivers one copy per queue

    def routed(self) -> DataFrame:
        # (trees x keys rows, whatever the topology's size)
        keys = F.broadcast(trees.routed_keys(self.runs, self.shared, self.keys_per_run))
        return self.on_trees.join(keys, [*trees.TREE, "key"]).select("cid")


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(DataFrame.unionByName, frames)


def _offered(parts: list[_ClassPart | _TreePart], failures: Failures) -> DataFrame:
    """What the parts offer each link at each step, summed (only classes drop anything)."""
    sums = ["messages", "bytes", "dropped", "dropped_bytes"]
    frames = [p.offered(failures) for p in parts]
    union = _union(
        [
            reduce(
                lambda df, c: df if c in df.columns else df.withColumn(c, F.lit(0).cast("bigint")), sums, f
            )
            for f in frames
        ]
    )
    return union.groupBy("link", "step").agg(*(F.sum(c).alias(c) for c in sums))


def tables(spark: SparkSession, scenario: Scenario, progress: Progress = _quiet) -> dict[str, DataFrame]:
    """Every table of the run as a DataFrame (computed when written or collected)."""
    world = World(scenario)
    shared = spark.sparkContext.broadcast(shipped(scenario))
    parallelism = spark.sparkContext.defaultParallelism  # the cores
    progress("events", 0.0, 0.2)
    sources = jobs.publish_sources(spark, scenario, shared)
    events = jobs.publish_events(sources, publisher_draws(scenario))
    drawn = jobs.class_steps(events, len(scenario.topology.nodes), scenario.keys.size).cache()
    refused = dead(world, F.col("node"), F.col("step"))
    steps = drawn.where(~refused)
    progress("routing", 0.2, 0.4)
    placed = trees.placed(sources.select("entry", "node").distinct(), shared).cache()
    on_trees = placed.count()
    parts: list[_ClassPart | _TreePart] = []
    if on_trees:
        parts.append(_TreePart(steps, placed, scenario, shared, parallelism))
    if not on_trees or on_trees < len(publishing(scenario)):  # (an empty workload too)
        by_class = steps.join(placed.select("entry", "node"), ["entry", "node"], "left_anti")
        parts.append(_ClassPart(by_class, shared, parallelism, [Message.of(p) for p in scenario.publishers]))
    crossed = _union([p.crossed() for p in parts]).distinct().cache()
    # Only the links a failure takes down come to the driver (a node's links, a link's ends).
    links = sorted(row.link for row in crossed.where(_failing(scenario)).collect())
    windows = world.windows(links)
    durable = {link: world.durable(link) for link in links}
    kills = {link: [first for first, _ in world.dead_steps(link.split(">")[0])] for link in links}
    expiring = [link for link in links if link in world.expiring]
    failures = Failures.of(windows, durable, scenario.step_ms, scenario.steps, kills=kills, expiring=expiring)
    progress("traffic", 0.4, 0.6)
    offered = _offered(parts, failures)
    limited = [link for link in links if link in world.limits]
    if world.overflows and limited:  # what full queues drop (simulations.holding): a few rows
        held = offered.where(F.col("link").isin(*limited)).select("link", "step", "messages", "dropped")
        arrivals = {(r.link, r.step): r.messages - r.dropped for r in held.collect()}
        cuts = world.cuts(windows, lambda link, step: arrivals.get((link, step), 0))
        if cuts:
            failures = Failures.of(windows, durable, scenario.step_ms, scenario.steps, cuts, kills, expiring)
            offered = _offered(parts, failures)
    link_df = props.link_props(crossed, shared)
    traffic = jobs.link_traffic(offered, link_df, scenario.steps, failures).cache()
    progress("outcomes", 0.6, 0.8)
    nodes = props.node_regions(spark, len(scenario.topology.nodes), shared).cache()
    delivered = _union([p.deliveries(traffic, failures) for p in parts]).cache()
    duplicated = [d for d in (p.duplicates(failures) for p in parts) if d is not None]
    queues = jobs.queue_table(delivered, _union(duplicated) if duplicated else None).cache()
    routed = _union([p.routed() for p in parts]).distinct()
    found = {
        "links": traffic,
        "nodes": jobs.node_table(nodes, steps, drawn.where(refused), routed, traffic, queues),
        "queues": queues,
        "delays": jobs.delay_table(delivered, nodes),
        "exchanges": jobs.exchange_table(_origins(steps, scenario), [p.landed(failures) for p in parts]),
    }
    return {table: df.select(*(column for column, _ in COLUMNS[table])) for table, df in found.items()}


def _origins(steps: DataFrame, scenario: Scenario) -> DataFrame:
    """The accepted publishes (class steps) as (node, exchange, messages): each publisher
    entry's exchange."""
    exchanges = F.array(*(F.lit(publishers.exchange) for publishers in scenario.publishers))
    exchange = F.element_at(exchanges, F.col("entry") + 1).cast("string")
    return steps.select("node", exchange.alias("exchange"), "messages")


def _failing(scenario: Scenario) -> Column:
    """A link (column `link`) that some failure of the scenario takes down: at a node killed,
    between the ends of a link cut, between two groups of a partition."""
    source, destination = F.split("link", ">")[0], F.split("link", ">")[1]
    nodes = [failure.node for failure in scenario.failures if failure.node is not None]
    pairs = [link_id(*failure.link) for failure in scenario.failures if failure.link is not None]
    pairs += [link_id(*reversed(failure.link)) for failure in scenario.failures if failure.link is not None]
    found = source.isin(*nodes) | destination.isin(*nodes) | F.col("link").isin(*pairs)
    for failure in scenario.failures:
        if failure.partition is not None:  # a link between two of its groups (-1: the unnamed)
            groups = {node: number for number, group in enumerate(failure.partition) for node in group}
            group = F.create_map(*(F.lit(value) for pair in groups.items() for value in pair))
            found = found | (
                F.coalesce(group[source], F.lit(-1)) != F.coalesce(group[destination], F.lit(-1))
            )
    return found


def run(spark: SparkSession, scenario: Scenario, out: str, progress: Progress = _quiet) -> None:
    """Compute every table and write each as Parquet under `out` (replacing what is there)."""
    found = tables(spark, scenario, progress)
    for number, (name, df) in enumerate(found.items()):
        share = 0.8 + 0.2 * number / len(found)
        progress(f"writing {name}", share, share + 0.2 / len(found))
        df.write.mode("overwrite").parquet(f"{out}/{name}")
    spark.catalog.clearCache()
