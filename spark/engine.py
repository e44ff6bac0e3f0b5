"""The Spark engine: a scenario -> the Parquet tables of simulations.tables, by the jobs of
spark.jobs (publishes routed class by class) and spark.trees (publishes into plain forests,
routed in aggregate) chained on one session. The scenario travels to executors as a broadcast value,
so nothing assumes the driver's disk (only --out must be a path every executor can write:
the same machine, a shared mount, or an hdfs:// or s3a:// URL)."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from simulations.scenario import Scenario
from simulations.tables import COLUMNS
from simulations.workload import key_draw, publishing
from simulations.world import World, link_ends
from spark import jobs, trees
from spark.failures import Failures

#: Told when the pipeline enters a stage, with the share of the work done before and after it.
Progress = Callable[[str, float, float], None]


def _quiet(stage: str, low: float, high: float) -> None:
    """No progress reporting."""


def tables(spark: SparkSession, scenario: Scenario, progress: Progress = _quiet) -> dict[str, DataFrame]:
    """Every table of the run as a DataFrame (computed when written or collected)."""
    world = World(scenario)
    shared = spark.sparkContext.broadcast(scenario)
    forests = trees.Forests.of(world)
    parallelism = spark.sparkContext.defaultParallelism
    # Chunks of steps per tree: enough groups to keep every core busy (both sides of the
    # deliveries' cogroup must be chunked alike).
    chunks = 4 * parallelism
    progress("events", 0.0, 0.2)
    events = jobs.publish_events(jobs.publish_sources(spark, scenario), key_draw(scenario.keys))
    steps = jobs.class_steps(events, len(scenario.topology.nodes), scenario.keys.size).cache()
    placed = F.broadcast(forests.placed_df(spark))
    # Publishes into plain forests are routed in aggregate per tree and chunk of steps (spread
    # over every core: a repartition to a number of partitions is never coalesced by adaptive
    # execution); the rest class by class.
    on_trees = trees.chunked(steps.join(placed, ["entry", "node"]), scenario.steps, chunks)
    on_trees = on_trees.repartition(parallelism, "tree", "chunk").cache()
    by_class = steps.join(placed, ["entry", "node"], "left_anti")
    # What the trees' functions read: numbers only (strings cost a Python object per row).
    tree_cells = on_trees.select("tree", "chunk", "node_index", "key", "step", "messages", "bytes")
    progress("routing", 0.2, 0.4)
    if len(forests.placed) < len(publishing(scenario)):
        classes = by_class.select("cid", *jobs.CLASS).distinct().repartition(parallelism)
        routes = jobs.route_classes(classes, shared).cache()
    else:  # every publish goes into a tree: Spark prunes the class path's jobs on no routes
        routes = spark.createDataFrame([], jobs.ROUTES_SCHEMA)
    tree_offered = trees.offered(tree_cells, shared, forests).cache()
    crossed = (
        routes.where("kind = 'cross'").select("link").union(tree_offered.where("crossed").select("link"))
    )
    links = sorted(row.link for row in crossed.distinct().collect())
    failures = Failures.of(
        world.windows(links), {link: world.durable(link) for link in links}, scenario.step_ms
    )
    progress("traffic", 0.4, 0.6)
    props = [(link, *link_ends(link), *_props(world, link)) for link in links]
    link_df = spark.createDataFrame(
        props,
        "link string, source string, destination string, latency_ms bigint, capacity_msgs bigint, capacity_bytes bigint",
    )
    carried = jobs.carried(by_class, routes).cache()
    offered = (
        jobs.offered(carried, failures)
        .unionByName(tree_offered.drop("crossed"))
        .groupBy("link", "step")
        .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"))
    )
    traffic = jobs.link_traffic(offered, link_df, scenario.steps, failures).cache()
    progress("outcomes", 0.6, 0.8)
    nodes = spark.createDataFrame(
        [(name, node.region) for name, node in world.topology.nodes.items()], "node string, region string"
    )
    link_ms = trees.chunked(
        traffic.select("link", "step", (F.col("latency_ms") + F.col("delay_ms")).alias("link_ms")).join(
            F.broadcast(forests.links_df(spark, world)), "link"
        ),
        scenario.steps,
        chunks,
    ).repartition(parallelism, "tree", "chunk")
    delivered = (
        jobs.deliveries(carried, traffic, failures)
        .drop("step")
        .unionByName(trees.deliveries(tree_cells, link_ms, shared, forests))
        .cache()
    )
    queues = jobs.queue_table(delivered, jobs.duplicates(by_class, routes, failures)).cache()
    routed = (
        routes.where(F.col("kind") == "deliver")
        .select("cid")
        .union(
            on_trees.join(F.broadcast(forests.routed_keys_df(spark, world)), ["tree", "key"]).select("cid")
        )
        .distinct()
    )
    found = {
        "links": traffic,
        "nodes": jobs.node_table(nodes, steps, routed, traffic, queues),
        "queues": queues,
        "delays": jobs.delay_table(delivered, nodes),
    }
    return {table: df.select(*(column for column, _ in COLUMNS[table])) for table, df in found.items()}


def _props(world: World, link: str) -> tuple[int, int, int]:
    props = world.props(link)
    return props.latency_ms, props.capacity_msgs, props.capacity_bytes


def run(spark: SparkSession, scenario: Scenario, out: str, progress: Progress = _quiet) -> None:
    """Compute every table and write each as Parquet under `out` (replacing what is there)."""
    found = tables(spark, scenario, progress)
    for number, (name, df) in enumerate(found.items()):
        share = 0.8 + 0.2 * number / len(found)
        progress(f"writing {name}", share, share + 0.2 / len(found))
        df.write.mode("overwrite").parquet(f"{out}/{name}")
    spark.catalog.clearCache()
