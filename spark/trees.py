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

from simulations.hops import Bins, Delays, LinkArray, TreeShape, TreeTraffic
from simulations.scenario import Scenario
from simulations.workload import headers_of, routing_key
from simulations.world import LinkId, Outages, World, link_id
from spark.jobs import world_of

#: A tree: its exchange's plain forest (topology.flow.PlainForest) and its number there; a run
#: of its keys is numbered `run` (keys run x run_keys onwards).
TREE = ["exchange", "tree"]
RUN = [*TREE, "run"]
#: A group of a tree's work, one task's pandas frame: a run of keys in a block of steps
#: (steps block x block_steps onwards).
GROUP = [*RUN, "block"]
#: Publishes one group takes at most. The keys are drawn by Zipf's law, so a run of keys is no
#: bound: regions-10k's first run of 125 keys held three quarters of its 10 million publishes,
#: one pandas frame of 7 million rows in one worker; at 100,000 nodes it would hold 60 million.
GROUP_EVENTS = 2_000_000
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


def block_steps(per_step: np.ndarray) -> int:
    """Steps per block: a block of a run's keys holds at most GROUP_EVENTS publishes, given
    the publishes of each step (`per_step`, over every publishing node)."""
    return max(1, GROUP_EVENTS // max(1, int(per_step.max(initial=0))))


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


def with_runs(tree_rows: DataFrame, keys_per_run: int, steps_per_block: int) -> DataFrame:
    """`tree_rows` (with a `key` and a `step`) with the number of the run of keys each row's
    key is in and of the block of steps its step is in."""
    return tree_rows.withColumn("run", F.expr(f"cast(key div {keys_per_run} as int)")).withColumn(
        "block", F.expr(f"cast(step div {steps_per_block} as int)")
    )


def _run(run: int, keys_per_run: int, keys: int) -> range:
    return range(run * keys_per_run, min(keys, (run + 1) * keys_per_run))


class _Shape:
    """What every run of a tree's keys shares on a worker, made once per tree (at 100,000 nodes
    the links' failure windows and latencies took 5.6 s, the tree's shape 1.4 s: per run of
    keys, 50 runs and two passes, 700 s): the tree's TreeShape, the failures over its links,
    its links' latencies and its number of each node of the topology."""

    def __init__(self, world: World, exchange: str, number: int) -> None:
        forest = world.plain_forest(exchange)
        assert forest is not None
        self.forest = forest
        self.shape = TreeShape.of(forest, number)
        links = [link for link in (*self.shape.up_links, *self.shape.down_links) if link]
        self.outages = Outages(world, world.windows(links))
        latency = {link: world.props(link).latency_ms for link in links}
        #: Each node's link up's and link down's latency, by the tree's numbers (hops.Delays).
        up, down = (
            np.array([latency[link] if link else 0 for link in ends], dtype=np.int64)
            for ends in (self.shape.up_links, self.shape.down_links)
        )
        self.latency = (up, down)
        #: The tree's number of each node by its place in the topology (-1: not on the tree).
        self.local = np.array(
            [self.shape.index.get(node, -1) for node in world.scenario.topology.nodes], dtype=np.int64
        )


#: Each worker's shapes by (its World's id, exchange, tree); the World is kept alive by
#: spark.jobs.world_of, so its id stays its own.
_shapes: dict[tuple[int, str, int], _Shape] = {}


class _Tree:
    """A run of keys of a tree of the broadcast scenario on a worker: its TreeTraffic, the
    failures over its links and its links' latencies."""

    def __init__(self, world: World, exchange: str, number: int, run: range) -> None:
        shape = _shapes.get((id(world), exchange, number))
        if shape is None:
            shape = _shapes[(id(world), exchange, number)] = _Shape(world, exchange, number)
        self.traffic = TreeTraffic(shape.forest, number, world.scenario.keys, run, shape.shape)
        self.outages, self.latency, self.local = shape.outages, shape.latency, shape.local
        self.steps_count = world.scenario.steps
        #: The node and the queue of each (node, queue) pair the tree delivers to, by number.
        self.pair_nodes = np.array([node for node, _ in self.traffic.pairs], dtype=object)
        self.pair_queues = np.array([queue for _, queue in self.traffic.pairs], dtype=object)

    def delays(self, frame: pd.DataFrame) -> Delays:
        """The links' delays from rows (link, step, link_ms) where a link's is not its latency."""
        by_step: dict[int, list[tuple[int, int, int]]] = {}
        for link, step, ms in zip(frame["link"], frame["step"], frame["link_ms"], strict=True):
            by_step.setdefault(int(step), []).append((*self.traffic.place[str(link)], int(ms)))

        def at(step: int) -> tuple[np.ndarray, np.ndarray]:
            found = by_step.get(step)
            if not found:
                return self.latency
            up, down = self.latency[0].copy(), self.latency[1].copy()
            for number, column, ms in found:
                (up if column == 0 else down)[number] = ms
            return up, down

        return at

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


#: A worker's last _Tree, by (its World's id, exchange, tree, run): a task's groups come in
#: the order of their keys, so one run's blocks of steps come one after the other.
_last: dict[tuple[int, str, int, int], _Tree] = {}


def _tree(scenario: Broadcast[Scenario], group: tuple[str, int, int, int], keys_per_run: int) -> _Tree:
    """The group's run of its tree, made again only for another run."""
    world = world_of(scenario)
    key = (id(world), str(group[0]), int(group[1]), int(group[2]))
    if key not in _last:
        _last.clear()
        _last[key] = _Tree(world, key[1], key[2], _run(key[3], keys_per_run, world.scenario.keys.size))
    return _last[key]


def offered(tree_steps: DataFrame, scenario: Broadcast[Scenario], keys_per_run: int) -> DataFrame:
    """Tree publishes (exchange, tree, run, block, node_index, key, step, messages, bytes) -> per
    link and step, the messages and bytes the link carries (on the tree's exchange), and whether
    it is `crossed` by some publish (lost on the way or not: the links table has every crossed
    link). A link's rows come from each run of keys: their sums add up."""

    def offer(group: tuple[str, int, int, int], frame: pd.DataFrame) -> pd.DataFrame:
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

    return tree_steps.groupBy(*GROUP).applyInPandas(offer, OFFERED_SCHEMA)


def deliveries(
    tree_steps: DataFrame, link_ms: DataFrame, scenario: Broadcast[Scenario], keys_per_run: int
) -> DataFrame:
    """Tree publishes (as for `offered`) and the delay of the trees' links (exchange, tree,
    run, block, link, step, link_ms: latency plus queueing delay, where that is not the latency
    alone) -> rows of spark.jobs.deliveries without the step: per queue the copies delivered
    by hops, delay and whether a link was down on the way, the copies lost, and (with no
    copies) the most hops any copy takes."""

    def deliver(group: tuple[str, int, int, int], frame: pd.DataFrame, delays: pd.DataFrame) -> pd.DataFrame:
        tree = _tree(scenario, group, keys_per_run)
        traffic = tree.traffic
        delivered: Bins = {}
        lost = np.zeros(len(traffic.pairs), dtype=np.int64)
        max_hops = np.full(len(traffic.pairs), -1)
        delays_at = tree.delays(delays)
        # What a step delivers depends on its publishes and its links' table alone, linearly:
        # steps in a row with one table are worked out once, on their sum (every step of a run
        # without failures or queueing: 120 passes over the tree's arrays become one).
        pending: tuple[np.ndarray, LinkArray] | None = None
        for step, published in tree.steps(frame):
            messages = published[:, :, 0]
            if tree.outages.failing(step):  # copies lost on the way still count for max_hops
                max_hops = np.maximum(max_hops, traffic.reach(messages))
            links = traffic.states(tree.outages, step, delays_at)
            if pending is not None and np.array_equal(pending[1].table, links.table):
                pending[0][...] += messages
                continue
            if pending is not None:
                lost += traffic.outcomes(*pending, delivered)
            pending = (messages.copy(), links)
        if pending is not None:
            lost += traffic.outcomes(*pending, delivered)
        rows = _Rows(tree)
        rows.add(np.flatnonzero(lost), lost, 0, 0, lost=True, through_down=False)
        for (hops, delay_ms, through_down), got in delivered.items():
            reached = np.flatnonzero(got)
            max_hops[reached] = np.maximum(max_hops[reached], hops)
            rows.add(reached, got, hops, delay_ms, lost=False, through_down=through_down)
        reached = np.flatnonzero(max_hops >= 0)
        rows.add(reached, np.zeros_like(lost), max_hops[reached], 0, lost=False, through_down=False)
        return rows.frame()

    return (
        tree_steps.groupBy(*GROUP).cogroup(link_ms.groupBy(*GROUP)).applyInPandas(deliver, DELIVERIES_SCHEMA)
    )


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
