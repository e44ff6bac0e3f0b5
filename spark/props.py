"""Per-link and per-node facts the tables need, looked up on the executors from their World
(spark.jobs.world_of), so the driver never lists a topology's links or nodes: 100,000 nodes'
names, regions and links' properties would travel in every query plan that reads them."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession

from simulations.scenario import Scenario
from simulations.world import link_ends
from spark.jobs import world_of

LINKS_SCHEMA = (
    "link string, source string, destination string, latency_ms bigint, capacity_msgs bigint, "
    "capacity_bytes bigint"
)


def link_props(links: DataFrame, scenario: Broadcast[Scenario]) -> DataFrame:
    """Distinct links (a `link` column) -> their ends and properties (simulations.world)."""

    def props(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        world = world_of(scenario)
        for batch in batches:
            rows = []
            for link in batch["link"]:
                found = world.props(str(link))
                rows.append(
                    (link, *link_ends(str(link)), found.latency_ms, found.capacity_msgs, found.capacity_bytes)
                )
            yield pd.DataFrame(rows, columns=[name.split()[0] for name in LINKS_SCHEMA.split(", ")])

    return links.select("link").mapInPandas(props, LINKS_SCHEMA)


def node_regions(spark: SparkSession, nodes: int, scenario: Broadcast[Scenario]) -> DataFrame:
    """(node, region) of the topology's `nodes` nodes, by their numbers."""

    def regions(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        topology = world_of(scenario).scenario.topology
        names = list(topology.nodes)
        for batch in batches:
            chosen = [names[number] for number in batch["id"]]
            yield pd.DataFrame({"node": chosen, "region": [topology.nodes[n].region for n in chosen]})

    return spark.range(nodes).mapInPandas(regions, "node string, region string")
