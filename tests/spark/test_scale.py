"""What keeps the Spark engine's memory bounded as the topology grows: the broadcast value
does not grow with it, a tree's work is split into runs of keys of bounded size, and no World
draws bindings routing never reads."""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import simulations.world
from simulations import reference
from simulations.generators import EXCHANGE, GeneratorSpec, generate
from simulations.scenario import Scenario, load_scenario_text
from simulations.tables import normalised
from simulations.workload import step_counts, with_subscribers
from simulations.world import World
from spark import engine, trees
from spark.shipping import received, shipped
from tests.spark.conftest import BURSTY_TOPIC_WORKLOAD, assert_same_tables, reference_tables, spark_tables
from topology.flow import MAX_COPIES, Tracer
from topology.model import Binding, Publisher, Queue


def hierarchy(edges: int) -> Scenario:
    """A hierarchy of 4 hubs and `edges` edge nodes per hub, every node publishing."""
    return load_scenario_text(
        f"""[scenario]
duration = 2
step = 1
[topology]
generator = "hierarchy"
hubs = 4
edges = {edges}
{BURSTY_TOPIC_WORKLOAD}""",
        "generated.toml",
    )


def test_the_broadcast_does_not_grow_with_the_topology(spark: SparkSession, monkeypatch: Any) -> None:
    """What the engine broadcasts to its executors pickles to the same size for 25 nodes as
    for 1,205: a generated topology travels as its generator's spec, not as its nodes."""
    sent: list[int] = []
    broadcast = spark.sparkContext.broadcast

    def measured(value: Any) -> Any:
        sent.append(len(pickle.dumps(value)))
        return broadcast(value)

    monkeypatch.setattr(spark.sparkContext, "broadcast", measured)
    sizes = {}
    for edges in (5, 300):
        scenario = hierarchy(edges)
        sent.clear()
        engine.tables(spark, scenario)
        spark.catalog.clearCache()
        sizes[len(scenario.topology.nodes)] = (sum(sent), len(pickle.dumps(scenario.topology)))
    (small, small_topology), (large, large_topology) = sizes[25], sizes[1205]
    assert large_topology > 20 * small_topology  # the topology itself grows with its nodes
    assert 0 < small and large <= small + 16  # (digits of the sizes in the spec)


def test_runs_of_keys_bound_a_task_and_spread_one_tree() -> None:
    """A run of keys makes arrays of at most KEY_CELLS cells, and one tree's keys make runs
    for every core, at regions-10k's size and at 100,000 nodes."""
    for nodes in (10_000, 100_000):
        per_run = trees.run_keys(1000, nodes, 2)
        assert nodes * per_run <= trees.KEY_CELLS and -(-1000 // per_run) >= 8
    assert trees.run_keys(9, 20, 2) == 2  # the tests' small trees are split too


def relay(tmp_path: Path) -> Scenario:
    """a publishes on t; a's queue relay, bound to t, is consumed by a queue route into b's
    exchange u, where b's queue q is bound; audit queues bound to the fanout f nobody reaches."""
    (tmp_path / "relay-topology.toml").write_text(
        """[defaults.node]
host = "127.0.0.1"
[nodes.a]
port = 5821
[nodes.b]
port = 5822
[[exchanges]]
name = "t"
type = "topic"
[[exchanges]]
name = "u"
type = "topic"
[[exchanges]]
name = "f"
type = "fanout"
[[queues]]
name = "relay"
nodes = ["a"]
[[routes]]
kind = "queue"
from = "a"
to = "b"
exchange = "u"
queue = "relay"
"""
    )
    path = tmp_path / "relay.toml"
    path.write_text(
        """[scenario]
duration = 4
step = 1
[topology]
file = "relay-topology.toml"
[keys]
words = [3, 3]
[[publishers]]
nodes = "a"
exchange = "t"
rate = 30
[[subscribers]]
nodes = "a"
exchange = "t"
type = "topic"
queue = "relay"
count = 3
[[subscribers]]
nodes = "b"
exchange = "u"
type = "topic"
queue = "q"
count = 3
[[subscribers]]
nodes = "*"
exchange = "f"
type = "direct"
queue = "audit"
count = 5
"""
    )
    return load_scenario_text(path.read_text(), str(path))


def test_bindings_no_publish_reaches_are_not_drawn(tmp_path: Path, monkeypatch: Any) -> None:
    """The World leaves out the bindings on f (no publisher, no queue route into it), keeps
    those on u (a queue route publishes into it), and its tables equal those of a World with
    every binding drawn."""
    scenario = relay(tmp_path)
    bound = {(b.node, b.exchange) for b in World(scenario).topology.bindings}
    assert bound == {("a", "t"), ("b", "u")}
    assert {(q.node, q.name) for q in World(scenario).topology.queues} >= {("a", "audit"), ("b", "audit")}
    assert {b.exchange for b in with_subscribers(scenario).bindings} == {"t", "u", "f"}
    found = {name: normalised(name, df) for name, df in reference.tables(scenario).items()}
    assert found["queues"].set_index(["node", "queue"]).loc[("b", "q"), "delivered"] > 0

    monkeypatch.setattr(simulations.world, "with_subscribers", lambda s, reachable_only: with_subscribers(s))
    assert {b.exchange for b in World(scenario).topology.bindings} == {"t", "u", "f"}
    every = {name: normalised(name, df) for name, df in reference.tables(scenario).items()}
    for name, frame in found.items():
        pd.testing.assert_frame_equal(frame, every[name], obj=f"table {name}")


def test_a_shipped_scenario_is_made_whole_again() -> None:
    """An executor's World of a shipped scenario is the driver's topology, node for node."""
    scenario = hierarchy(5)
    assert not shipped(scenario).topology.nodes
    assert received(shipped(scenario)) == scenario


def test_a_tree_larger_than_the_copy_limit_is_routed_whole() -> None:
    """A publish on a tree of routes over more nodes than MAX_COPIES reaches every node that
    binds its key, none cut, and the tree is a plain forest (routed in aggregate by both
    engines): at 50,000 and 100,000 nodes every class was routed one by one and cut."""
    topology = generate(GeneratorSpec("hierarchy", hubs=101, nodes=MAX_COPIES + 101))
    queues = tuple(Queue(node, "q") for node in topology.nodes)
    bindings = tuple(Binding(node, EXCHANGE, "q", "#") for node in topology.nodes)
    bound = replace(topology, queues=queues, bindings=bindings)
    tracer = Tracer(bound)
    result = tracer(Publisher("edge-000-000", EXCHANGE, "a.b"))
    assert result.cut == 0
    assert len(result.queues) == len(topology.nodes) > MAX_COPIES
    assert tracer.plain_forest(EXCHANGE) is not None


def test_blocks_of_steps_bound_a_group_and_keep_the_tables(spark: SparkSession, monkeypatch: Any) -> None:
    """Zipf's law crowds the publishes into the first run of keys; blocks of steps bound every
    group of a tree's work to GROUP_EVENTS publishes (here two steps' worth), and the tables
    stay the reference engine's, through a link failure that holds copies past a block."""
    scenario = load_scenario_text(
        f"""[scenario]
duration = 8
step = 1
[topology]
generator = "hierarchy"
hubs = 3
edges = 3
[[failures]]
link = ["root", "hub-000"]
from = 2
to = 5
{BURSTY_TOPIC_WORKLOAD}""",
        "generated.toml",
    )
    per_step = len(scenario.topology.nodes) * step_counts(scenario, scenario.publishers[0])
    monkeypatch.setattr(trees, "GROUP_EVENTS", 2 * int(per_step.max()))
    groups: list[pd.DataFrame] = []
    offered = trees.offered

    def counted(tree_steps: DataFrame, *args: Any) -> DataFrame:
        groups.append(tree_steps.groupBy(*trees.GROUP).agg(F.sum("messages").alias("n")).toPandas())
        return offered(tree_steps, *args)

    monkeypatch.setattr(trees, "offered", counted)
    assert_same_tables(spark_tables(spark, scenario), reference_tables(scenario))
    (found,) = groups
    assert found["n"].max() <= trees.GROUP_EVENTS
    assert sorted(found["block"].unique()) == [0, 1, 2, 3]
