"""The Spark engine: a scenario -> the Parquet tables of simulations.tables, by the jobs of
spark.jobs (publishes routed class by class) and spark.trees (publishes into plain forests,
routed in aggregate) chained on one session. The scenario travels to executors as a broadcast value,
so nothing assumes the driver's disk (only --out must be a path every executor can write:
the same machine, a shared mount, or an hdfs:// or s3a:// URL).

Each way of routing is a part of the run (`_ClassPart`, `_TreePart`) that says which links its
publishes cross, what it offers to links, what it delivers and which classes reach a queue; a
run builds only the parts some publish takes, since every DataFrame costs Spark planning and
jobs even when it holds no rows (most of a small run's time)."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from simulations.scenario import Scenario
from simulations.tables import COLUMNS
from simulations.workload import publisher_draws, publishing
from simulations.world import World, link_ends
from spark import jobs, trees
from spark.failures import Failures, dead
from spark.frames import local_frame

#: Told when the pipeline enters a stage, with the share of the work done before and after it.
Progress = Callable[[str, float, float], None]


def _quiet(stage: str, low: float, high: float) -> None:
    """No progress reporting."""


class _ClassPart:
    """Publishes routed class by class: each class's routes, joined with its steps."""

    def __init__(self, steps: DataFrame, shared: Broadcast[Scenario], parallelism: int) -> None:
        self.steps = steps
        classes = steps.select("cid", *jobs.CLASS).distinct().repartition(parallelism)
        self.routes = jobs.route_classes(classes, shared).cache()
        self.carried = jobs.carried(steps, self.routes).cache()

    def crossed(self) -> DataFrame:
        return self.routes.where(F.col("kind") == "cross").select("link")

    def offered(self, failures: Failures) -> DataFrame:
        return jobs.offered(self.carried, failures)

    def deliveries(self, traffic: DataFrame, failures: Failures) -> DataFrame:
        return jobs.deliveries(self.carried, traffic, failures).drop("step")

    def duplicates(self, failures: Failures) -> DataFrame | None:
        return jobs.duplicates(self.steps, self.routes, failures)

    def routed(self) -> DataFrame:
        return self.routes.where(F.col("kind") == "deliver").select("cid")


class _TreePart:
    """Publishes into plain forests, routed in aggregate per tree and chunk of steps (spread
    over every core: a repartition to a number of partitions is never coalesced by adaptive
    execution)."""

    def __init__(
        self,
        steps: DataFrame,
        world: World,
        forests: trees.Forests,
        shared: Broadcast[Scenario],
        parallelism: int,
    ) -> None:
        spark = steps.sparkSession
        self.world, self.forests, self.shared, self.parallelism = world, forests, shared, parallelism
        # Chunks of steps per tree: enough groups to keep every core busy (both sides of the
        # deliveries' cogroup must be chunked alike).
        self.chunks = 4 * parallelism
        self.steps_count = world.scenario.steps
        placed = F.broadcast(forests.placed_df(spark))
        self.on_trees = (
            trees.chunked(steps.join(placed, ["entry", "node"]), self.steps_count, self.chunks)
            .repartition(parallelism, "tree", "chunk")
            .cache()
        )
        # What the trees' functions read: numbers only (strings cost a Python object per row).
        self.cells = self.on_trees.select("tree", "chunk", "node_index", "key", "step", "messages", "bytes")
        self.carried = trees.offered(self.cells, shared, forests).cache()

    def crossed(self) -> DataFrame:
        return self.carried.where("crossed").select("link")

    def offered(self, failures: Failures) -> DataFrame:
        return self.carried.drop("crossed")

    def deliveries(self, traffic: DataFrame, failures: Failures) -> DataFrame:
        spark = traffic.sparkSession
        tree_ms = traffic.select(
            "link", "step", (F.col("latency_ms") + F.col("delay_ms")).alias("link_ms")
        ).join(F.broadcast(self.forests.links_df(spark, self.world)), "link")
        link_ms = trees.chunked(tree_ms, self.steps_count, self.chunks)
        # Copies a link held go on when it is back, maybe in a later chunk: every chunk has
        # the delays at the steps links come back at.
        ends = sorted({end for _, end, _, _ in failures.windows if end < self.steps_count})
        if ends:
            chunks = spark.range(self.chunks).select(F.col("id").cast("int").alias("chunk"))
            link_ms = link_ms.unionByName(tree_ms.where(F.col("step").isin(*ends)).crossJoin(chunks))
        return trees.deliveries(
            self.cells, link_ms.repartition(self.parallelism, "tree", "chunk"), self.shared, self.forests
        )

    def duplicates(self, failures: Failures) -> DataFrame | None:
        return None  # a plain forest delivers one copy per queue

    def routed(self) -> DataFrame:
        keys = F.broadcast(self.forests.routed_keys_df(self.on_trees.sparkSession, self.world))
        return self.on_trees.join(keys, ["tree", "key"]).select("cid")


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(DataFrame.unionByName, frames)


def tables(spark: SparkSession, scenario: Scenario, progress: Progress = _quiet) -> dict[str, DataFrame]:
    """Every table of the run as a DataFrame (computed when written or collected)."""
    world = World(scenario)
    shared = spark.sparkContext.broadcast(scenario)
    forests = trees.Forests.of(world)
    parallelism = spark.sparkContext.defaultParallelism  # the cores
    progress("events", 0.0, 0.2)
    events = jobs.publish_events(jobs.publish_sources(spark, scenario), publisher_draws(scenario))
    drawn = jobs.class_steps(events, len(scenario.topology.nodes), scenario.keys.size).cache()
    refused = dead(world, F.col("node"), F.col("step"))
    steps = drawn.where(~refused)
    progress("routing", 0.2, 0.4)
    parts: list[_ClassPart | _TreePart] = []
    if forests.placed:
        parts.append(_TreePart(steps, world, forests, shared, parallelism))
    if not forests.placed or len(forests.placed) < len(publishing(scenario)):  # (an empty workload too)
        by_class = steps.join(F.broadcast(forests.placed_df(spark)), ["entry", "node"], "left_anti")
        parts.append(_ClassPart(by_class, shared, parallelism))
    links = sorted(row.link for row in _union([p.crossed() for p in parts]).distinct().collect())
    failures = Failures.of(
        world.windows(links), {link: world.durable(link) for link in links}, scenario.step_ms, scenario.steps
    )
    progress("traffic", 0.4, 0.6)
    props = [(link, *link_ends(link), *_props(world, link)) for link in links]
    link_df = local_frame(
        spark,
        props,
        "link string, source string, destination string, latency_ms bigint, capacity_msgs bigint, capacity_bytes bigint",
    )
    offered = (
        _union([p.offered(failures) for p in parts])
        .groupBy("link", "step")
        .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"))
    )
    traffic = jobs.link_traffic(offered, link_df, scenario.steps, failures).cache()
    progress("outcomes", 0.6, 0.8)
    nodes = local_frame(
        spark,
        [(name, node.region) for name, node in world.topology.nodes.items()],
        "node string, region string",
    )
    delivered = _union([p.deliveries(traffic, failures) for p in parts]).cache()
    duplicated = [d for d in (p.duplicates(failures) for p in parts) if d is not None]
    queues = jobs.queue_table(delivered, _union(duplicated) if duplicated else None).cache()
    routed = _union([p.routed() for p in parts]).distinct()
    found = {
        "links": traffic,
        "nodes": jobs.node_table(nodes, steps, drawn.where(refused), routed, traffic, queues),
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
