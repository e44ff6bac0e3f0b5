"""Publishes on plain forests, routed in aggregate as the reference engine routes them
(simulations.hops), never per class: regions-10k's classes each reach thousands of nodes, so
routing them one by one makes billions of route rows.

The driver says which publishing nodes are on which tree (`Forests`). The workers run one
grouped pandas function per (tree, chunk of steps): the tree's sums are numpy arrays of nodes x
keys per step, computed by the same `TreeTraffic` the reference engine uses, so the two
engines share the routing and differ only in how the work is spread. Two passes, because
deliveries need each link's queueing delay and that needs every link's offered traffic first:
`offered` (per link and step) feeds the links table; `deliveries` (per queue, hops, delay)
joins the class deliveries for the queues and delays tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from simulations.hops import Bins, TreeTraffic
from simulations.scenario import Scenario
from simulations.workload import headers_of, publishing, routing_key
from simulations.world import LinkId, Outages, World, link_id
from spark.frames import local_frame
from spark.jobs import world_of

OFFERED_SCHEMA = "link string, step bigint, messages bigint, bytes bigint, crossed boolean"
#: The columns of spark.jobs.deliveries but the step (a chunk's steps are summed).
DELIVERIES_SCHEMA = (
    "at string, queue string, n bigint, hops bigint, lost boolean, through_down boolean, delay_ms bigint"
)


@dataclass(frozen=True)
class Forests:
    """The trees publishes go into, numbered (exchange, tree number of its plain forest), and
    which publishing (entry, node) goes into which."""

    trees: tuple[tuple[str, int], ...]
    placed: tuple[tuple[int, str, int], ...]

    @classmethod
    def of(cls, world: World) -> Forests:
        trees: dict[tuple[str, int], int] = {}
        placed = []
        for entry, node in publishing(world.scenario):
            found = world.forest(entry, node)
            if found is not None:
                tree = (world.scenario.publishers[entry].exchange, found[1])
                placed.append((entry, node, trees.setdefault(tree, len(trees))))
        return cls(tuple(trees), tuple(placed))

    def placed_df(self, spark: SparkSession) -> DataFrame:
        """(entry, node, tree) for every publishing node on a tree."""
        return local_frame(spark, list(self.placed), "entry int, node string, tree int")

    def links_df(self, spark: SparkSession, world: World) -> DataFrame:
        """(tree, link) for every link of every tree."""
        rows = []
        for number, (exchange, tree) in enumerate(self.trees):
            forest = world.plain_forest(exchange)
            assert forest is not None
            for node, parent in forest.trees[tree]:
                if parent is not None:
                    rows += [(number, link_id(node, parent)), (number, link_id(parent, node))]
        return local_frame(spark, rows, "tree int, link string")

    def routed_keys_df(self, spark: SparkSession, world: World) -> DataFrame:
        """(tree, key) for every key some queue of the tree takes."""
        keys = world.scenario.keys
        rows = []
        for number, (exchange, tree) in enumerate(self.trees):
            forest = world.plain_forest(exchange)
            assert forest is not None
            rows += [
                (number, key)
                for key in range(keys.size)
                if forest.queues(tree, routing_key(keys, key), headers_of(keys, key))
            ]
        return local_frame(spark, rows, "tree int, key int")


def chunked(tree_steps: DataFrame, steps: int, chunks: int) -> DataFrame:
    """`tree_steps` with the chunk of steps each row's step is in (`chunks` runs of steps)."""
    return tree_steps.withColumn("chunk", F.expr(f"cast(step * {chunks} div {steps} as int)"))


class _Tree:
    """A tree of the broadcast scenario on a worker: its TreeTraffic, the failures over its
    links and its links' latencies, built once per Python worker."""

    def __init__(self, world: World, exchange: str, number: int) -> None:
        forest = world.plain_forest(exchange)
        assert forest is not None
        self.traffic = TreeTraffic(forest, number, world.scenario.keys)
        links = [link for link in (*self.traffic.up_links, *self.traffic.down_links) if link]
        self.outages = Outages(world, world.windows(links))
        self.latency = {link: world.props(link).latency_ms for link in links}
        self.steps_count = world.scenario.steps
        #: The tree's number of each node by its place in the topology (-1: not on the tree).
        self.local = np.full(len(world.scenario.topology.nodes), -1, dtype=np.int64)
        for number, node in enumerate(world.scenario.topology.nodes):
            self.local[number] = self.traffic.index.get(node, -1)
        #: The node and the queue of each (node, queue) pair the tree delivers to, by number.
        self.pair_nodes = np.array([node for node, _ in self.traffic.pairs], dtype=object)
        self.pair_queues = np.array([queue for _, queue in self.traffic.pairs], dtype=object)

    def steps(self, frame: pd.DataFrame) -> Iterator[tuple[int, np.ndarray]]:
        """Each step of a group's rows (node_index, key, step, messages, bytes) with its
        publishes as node x key x [messages, bytes]."""
        cells = np.column_stack(
            [
                self.local[frame["node_index"].to_numpy(np.int64)],
                frame["key"].to_numpy(np.int64),
                frame["messages"].to_numpy(np.int64),
                frame["bytes"].to_numpy(np.int64),
            ]
        )
        steps = frame["step"].to_numpy(np.int64)
        for step in np.unique(steps):
            yield int(step), self.traffic.dense(cells[steps == step])


_trees: dict[tuple[int, str, int], _Tree] = {}


def _tree(scenario: Broadcast[Scenario], tree: tuple[str, int]) -> _Tree:
    world = world_of(scenario)
    key = (id(world), *tree)
    if key not in _trees:
        _trees[key] = _Tree(world, *tree)
    return _trees[key]


def offered(tree_steps: DataFrame, scenario: Broadcast[Scenario], forests: Forests) -> DataFrame:
    """Tree publishes (tree, chunk, node_index, key, step, messages, bytes) -> per link and step,
    the messages and bytes the link carries, and whether it is `crossed` by some publish
    (lost on the way or not: the links table has every crossed link)."""

    def offer(group: tuple[int, int], frame: pd.DataFrame) -> pd.DataFrame:
        tree = _tree(scenario, forests.trees[int(group[0])])
        rows: list[tuple[LinkId, int, int, int, bool]] = []
        for step, published in tree.steps(frame):
            carried = tree.traffic.offered(published, tree.traffic.states(tree.outages, step))
            if tree.outages.failing(step):
                crossed = set(tree.traffic.crossed_by(published[:, :, 0]))
            else:
                crossed = {link for (link, _), (messages, _) in carried.items() if messages > 0}
            # Held copies reach the links after the one holding them at a later step (past
            # the run: never; the links table has no such step).
            rows += [
                (link, at, int(messages), int(size), False)
                for (link, at), (messages, size) in carried.items()
                if (messages or size) and at < tree.steps_count
            ]
            rows += [(link, step, 0, 0, True) for link in crossed]
        return pd.DataFrame(rows, columns=["link", "step", "messages", "bytes", "crossed"])

    return tree_steps.groupBy("tree", "chunk").applyInPandas(offer, OFFERED_SCHEMA)


def deliveries(
    tree_steps: DataFrame, link_ms: DataFrame, scenario: Broadcast[Scenario], forests: Forests
) -> DataFrame:
    """Tree publishes (as for `offered`) and the delay of the trees' crossed links (tree,
    chunk, link, step, link_ms: latency plus queueing delay) -> rows of spark.jobs.deliveries
    without the step: per queue the copies delivered by hops, delay and whether a link was
    down on the way, the copies lost, and (with no copies) the most hops any copy takes."""

    def deliver(group: tuple[int, int], frame: pd.DataFrame, delays: pd.DataFrame) -> pd.DataFrame:
        tree = _tree(scenario, forests.trees[int(group[0])])
        traffic = tree.traffic
        ms = dict(
            zip(zip(delays["link"], delays["step"].astype(int), strict=True), delays["link_ms"], strict=True)
        )

        def delay(link: LinkId, step: int) -> int:
            return int(ms.get((link, step), tree.latency[link]))

        delivered: Bins = {}
        lost = np.zeros(len(traffic.pairs), dtype=np.int64)
        max_hops = np.full(len(traffic.pairs), -1)
        for step, published in tree.steps(frame):
            messages = published[:, :, 0]
            if tree.outages.failing(step):  # copies lost on the way still count for max_hops
                max_hops = np.maximum(max_hops, traffic.reach(messages))
            lost += traffic.outcomes(messages, traffic.states(tree.outages, step, delay), delivered)
        rows = _Rows(tree)
        rows.add(np.flatnonzero(lost), lost, 0, 0, lost=True, through_down=False)
        for (hops, delay_ms, through_down), got in delivered.items():
            reached = np.flatnonzero(got)
            max_hops[reached] = np.maximum(max_hops[reached], hops)
            rows.add(reached, got, hops, delay_ms, lost=False, through_down=through_down)
        reached = np.flatnonzero(max_hops >= 0)
        rows.add(reached, np.zeros_like(lost), max_hops[reached], 0, lost=False, through_down=False)
        return rows.frame()

    keys = ["tree", "chunk"]
    return tree_steps.groupBy(*keys).cogroup(link_ms.groupBy(*keys)).applyInPandas(deliver, DELIVERIES_SCHEMA)


class _Rows:
    """Rows of DELIVERIES_SCHEMA gathered as column arrays and made into one DataFrame at the
    end (a DataFrame per bin cost more than the tree's sums: thousands of bins per chunk)."""

    def __init__(self, tree: _Tree) -> None:
        self.tree = tree
        self.pairs: list[np.ndarray] = []
        self.columns: dict[str, list[np.ndarray]] = {
            column: [] for column in ("n", "hops", "lost", "through_down", "delay_ms")
        }

    def add(
        self,
        pairs: np.ndarray,
        counts: np.ndarray,
        hops: int | np.ndarray,
        delay_ms: int,
        lost: bool,
        through_down: bool,
    ) -> None:
        """Rows for the pairs numbered `pairs`, `counts` indexed by pair."""
        size = len(pairs)
        self.pairs.append(pairs)
        self.columns["n"].append(counts[pairs].astype(np.int64))
        self.columns["hops"].append(np.broadcast_to(np.asarray(hops, dtype=np.int64), size))
        self.columns["lost"].append(np.full(size, lost))
        self.columns["through_down"].append(np.full(size, through_down))
        self.columns["delay_ms"].append(np.full(size, delay_ms, dtype=np.int64))

    def frame(self) -> pd.DataFrame:
        pairs = np.concatenate(self.pairs)
        return pd.DataFrame(
            {"at": self.tree.pair_nodes[pairs], "queue": self.tree.pair_queues[pairs]}
            | {column: np.concatenate(parts) for column, parts in self.columns.items()}
        )
