"""The Spark engine: a scenario -> the Parquet tables of simulations.tables, by the jobs of
spark.jobs chained on one session. The scenario travels to executors as a broadcast value,
so nothing assumes the driver's disk (only --out must be a path every executor can write:
the same machine, a shared mount, or an hdfs:// or s3a:// URL)."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from simulations.scenario import Scenario
from simulations.tables import COLUMNS
from simulations.workload import key_draw
from simulations.world import World, link_ends
from spark import jobs
from spark.failures import Failures

#: Told when the pipeline enters a stage, with the share of the work done before and after it.
Progress = Callable[[str, float, float], None]


def _quiet(stage: str, low: float, high: float) -> None:
    """No progress reporting."""


def tables(spark: SparkSession, scenario: Scenario, progress: Progress = _quiet) -> dict[str, DataFrame]:
    """Every table of the run as a DataFrame (computed when written or collected)."""
    world = World(scenario)
    shared = spark.sparkContext.broadcast(scenario)
    progress("events", 0.0, 0.2)
    events = jobs.publish_events(jobs.publish_sources(spark, scenario), key_draw(scenario.keys))
    steps = jobs.class_steps(events, len(scenario.topology.nodes), scenario.keys.size).cache()
    progress("routing", 0.2, 0.4)
    # Routing is the one Python step: spread the classes over every core (a repartition to a
    # number of partitions is never coalesced by adaptive execution).
    classes = steps.select("cid", *jobs.CLASS).distinct().repartition(spark.sparkContext.defaultParallelism)
    routes = jobs.route_classes(classes, shared).cache()
    links = sorted(row.link for row in routes.where("kind = 'cross'").select("link").distinct().collect())
    failures = Failures.of(
        world.windows(links), {link: world.durable(link) for link in links}, scenario.step_ms
    )
    progress("traffic", 0.4, 0.6)
    props = [(link, *link_ends(link), *_props(world, link)) for link in links]
    link_df = spark.createDataFrame(
        props,
        "link string, source string, destination string, latency_ms bigint, capacity_msgs bigint, capacity_bytes bigint",
    )
    carried = jobs.carried(steps, routes).cache()
    traffic = jobs.link_traffic(jobs.offered(carried, failures), link_df, scenario.steps, failures).cache()
    progress("outcomes", 0.6, 0.8)
    nodes = spark.createDataFrame(
        [(name, node.region) for name, node in world.topology.nodes.items()], "node string, region string"
    )
    delivered = jobs.deliveries(carried, traffic, failures).cache()
    queues = jobs.queue_table(delivered, jobs.duplicates(steps, routes, failures)).cache()
    found = {
        "links": traffic,
        "nodes": jobs.node_table(nodes, steps, routes, traffic, queues),
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
