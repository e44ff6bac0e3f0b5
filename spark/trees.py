"""Publishes on plain forests, routed in aggregate as the reference engine routes them
(simulations.hops), never per class: regions-10k's classes each reach thousands of nodes, so
routing them one by one makes billions of route rows.

Executors say which publishing nodes are on which tree (`placed`), which links each tree has
(`tree_links`) and which keys its queues take (`routed_keys`): the driver holds none of it. The
workers run one grouped pandas function per (tree, run of keys): the tree's sums are numpy
arrays of nodes x the run's keys per step, computed by the same `TreeTraffic` the reference
engine uses, so the two engines share the routing and differ only in how the work is spread. A
run's arrays are bounded (KEY_CELLS), however large the tree, and a tree of any size is spread
over every core. Two passes, because
deliveries need each link's queueing delay and that needs every link's offered traffic first:
`offered` (per link and step) feeds the links table; `deliveries` (per queue, hops, delay)
joins the class deliveries for the queues and delays tables.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
from pyspark import Broadcast
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from simulations.hops import Bins, TreeTraffic
from simulations.scenario import Scenario
from simulations.workload import headers_of, routing_key
from simulations.world import LinkId, Outages, World, link_id
from spark.jobs import world_of

#: A tree: its exchange's plain forest (topology.flow.PlainForest) and its number there; a run
#: of its keys is numbered `run` (keys run x run_keys onwards).
TREE = ["exchange", "tree"]
RUN = [*TREE, "run"]
#: Cells (nodes x keys) of one task's arrays at most, so that a task's memory does not grow
#: with the tree: regions-10k's one tree of 10,000 nodes x 1,000 keys made arrays of 80 MB
#: each (a step's bins hold dozens), 100,000 nodes would make them 800 MB.
KEY_CELLS = 2_000_000
PLACED_SCHEMA = "entry int, node string, exchange string, tree int"
OFFERED_SCHEMA = "exchange string, link string, step bigint, messages bigint, bytes bigint, crossed boolean"
#: The columns of spark.jobs.deliveries but the step (a run's steps are summed).
DELIVERIES_SCHEMA = (
    "at string, queue string, n bigint, hops bigint, lost boolean, through_down boolean, delay_ms bigint"
)


def run_keys(keys: int, nodes: int, parallelism: int) -> int:
    """Keys per run: a tree of up to `nodes` nodes makes arrays of at most KEY_CELLS cells, and
    its keys make four runs per core at least (so one tree keeps every core busy)."""
    return max(1, min(KEY_CELLS // max(1, nodes), -(-keys // (4 * parallelism))))


def placed(sources: DataFrame, scenario: Broadcast[Scenario]) -> DataFrame:
    """Publishing (entry, node) rows -> (entry, node, exchange, tree) for those that publish
    into a plain forest (the others are routed class by class), found on the executors."""

    def place(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        world = world_of(scenario)
        for batch in batches:
            rows = []
            for entry, node in zip(batch["entry"], batch["node"], strict=True):
                found = world.forest(int(entry), str(node))
                if found is not None:
                    rows.append(
                        (int(entry), str(node), world.scenario.publishers[int(entry)].exchange, found[1])
                    )
            yield pd.DataFrame(rows, columns=["entry", "node", "exchange", "tree"])

    return sources.select("entry", "node").mapInPandas(place, PLACED_SCHEMA)


def tree_links(trees: DataFrame, scenario: Broadcast[Scenario]) -> DataFrame:
    """Distinct trees (exchange, tree) -> (exchange, tree, link) for both directions of each
    of their links."""

    def links(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        world = world_of(scenario)
        for batch in batches:
            rows = []
            for exchange, tree in zip(batch["exchange"], batch["tree"], strict=True):
                forest = world.plain_forest(str(exchange))
                assert forest is not None
                for node, parent in forest.trees[int(tree)]:
                    if parent is not None:
                        rows += [
                            (exchange, tree, link_id(node, parent)),
                            (exchange, tree, link_id(parent, node)),
                        ]
            yield pd.DataFrame(rows, columns=["exchange", "tree", "link"])

    return trees.mapInPandas(links, "exchange string, tree int, link string")


def routed_keys(runs: DataFrame, scenario: Broadcast[Scenario], keys_per_run: int) -> DataFrame:
    """Distinct runs (exchange, tree, run) -> (exchange, tree, key) for every key of the run
    some queue of the tree takes."""

    def routed(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        world = world_of(scenario)
        keys = world.scenario.keys
        for batch in batches:
            rows = []
            for exchange, tree, run in zip(batch["exchange"], batch["tree"], batch["run"], strict=True):
                forest = world.plain_forest(str(exchange))
                assert forest is not None
                rows += [
                    (exchange, tree, key)
                    for key in _run(int(run), keys_per_run, keys.size)
                    if forest.queues(int(tree), routing_key(keys, key), headers_of(keys, key))
                ]
            yield pd.DataFrame(rows, columns=["exchange", "tree", "key"])

    return runs.mapInPandas(routed, "exchange string, tree int, key int")


def with_runs(tree_rows: DataFrame, keys_per_run: int) -> DataFrame:
    """`tree_rows` (with a `key`) with the number of the run of keys each row's key is in."""
    return tree_rows.withColumn("run", F.expr(f"cast(key div {keys_per_run} as int)"))


def _run(run: int, keys_per_run: int, keys: int) -> range:
    return range(run * keys_per_run, min(keys, (run + 1) * keys_per_run))


class _Tree:
    """A run of keys of a tree of the broadcast scenario on a worker: its TreeTraffic, the
    failures over its links and its links' latencies."""

    def __init__(self, world: World, exchange: str, number: int, run: range) -> None:
        forest = world.plain_forest(exchange)
        assert forest is not None
        self.traffic = TreeTraffic(forest, number, world.scenario.keys, run)
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


def _tree(scenario: Broadcast[Scenario], group: tuple[str, int, int], keys_per_run: int) -> _Tree:
    """The group's run of its tree (each group is one run: nothing is kept for the next)."""
    world = world_of(scenario)
    exchange, tree, run = str(group[0]), int(group[1]), int(group[2])
    return _Tree(world, exchange, tree, _run(run, keys_per_run, world.scenario.keys.size))


def offered(tree_steps: DataFrame, scenario: Broadcast[Scenario], keys_per_run: int) -> DataFrame:
    """Tree publishes (exchange, tree, run, node_index, key, step, messages, bytes) -> per link
    and step, the messages and bytes the link carries (on the tree's exchange), and whether it
    is `crossed` by some publish (lost on the way or not: the links table has every crossed
    link). A link's rows come from each run of keys: their sums add up."""

    def offer(group: tuple[str, int, int], frame: pd.DataFrame) -> pd.DataFrame:
        tree = _tree(scenario, group, keys_per_run)
        rows: list[tuple[str, LinkId, int, int, int, bool]] = []
        for step, published in tree.steps(frame):
            carried = tree.traffic.offered(published, tree.traffic.states(tree.outages, step))
            if tree.outages.failing(step):
                crossed = set(tree.traffic.crossed_by(published[:, :, 0]))
            else:
                crossed = {link for (link, _), (messages, _) in carried.items() if messages > 0}
            # Held copies reach the links after the one holding them at a later step (past
            # the run: never; the links table has no such step).
            rows += [
                (group[0], link, at, int(messages), int(size), False)
                for (link, at), (messages, size) in carried.items()
                if (messages or size) and at < tree.steps_count
            ]
            rows += [(group[0], link, step, 0, 0, True) for link in crossed]
        return pd.DataFrame(rows, columns=["exchange", "link", "step", "messages", "bytes", "crossed"])

    return tree_steps.groupBy(*RUN).applyInPandas(offer, OFFERED_SCHEMA)


def deliveries(
    tree_steps: DataFrame, link_ms: DataFrame, scenario: Broadcast[Scenario], keys_per_run: int
) -> DataFrame:
    """Tree publishes (as for `offered`) and the delay of the trees' links (exchange, tree,
    run, link, step, link_ms: latency plus queueing delay, where that is not the latency
    alone) -> rows of spark.jobs.deliveries without the step: per queue the copies delivered
    by hops, delay and whether a link was down on the way, the copies lost, and (with no
    copies) the most hops any copy takes."""

    def deliver(group: tuple[str, int, int], frame: pd.DataFrame, delays: pd.DataFrame) -> pd.DataFrame:
        tree = _tree(scenario, group, keys_per_run)
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

    return tree_steps.groupBy(*RUN).cogroup(link_ms.groupBy(*RUN)).applyInPandas(deliver, DELIVERIES_SCHEMA)


class _Rows:
    """Rows of DELIVERIES_SCHEMA gathered as column arrays and made into one DataFrame at the
    end (a DataFrame per bin cost more than the tree's sums: thousands of bins per run)."""

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
