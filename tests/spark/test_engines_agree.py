"""The Spark engine equals the reference engine exactly, table by table, on every shipped
small scenario, on the corner cases, and on generated topologies over several seeds, failures
included; and the corner cases come out as the planner's model says they must."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from simulations import reference
from simulations.scenario import Scenario, load_scenario, load_scenario_text
from simulations.tables import normalised
from simulations.workload import publishing
from simulations.world import World
from tests.spark.conftest import (
    BURSTY_TOPIC_WORKLOAD,
    SCENARIOS,
    assert_same_tables,
    reference_tables,
    spark_tables,
)
from tests.spark.test_hop_routing import (
    SECOND_TOPIC_PUBLISHER,
    check_recovery,
    fanout_hierarchy_scenario,
    random_forest_scenario,
)
from topology.flow import MAX_HOPS

ROOT = Path(__file__).resolve().parents[2]


def generated(spec: str, seed: int, failure: str) -> Scenario:
    """A scenario on a generated topology: topic subscribers everywhere, every node
    publishing, one failure."""
    name, _, sizes = spec.partition(":")
    sizes = "\n".join(sizes.split(","))
    return load_scenario_text(
        f"""[scenario]
seed = {seed}
duration = 8
step = 0.5
[topology]
generator = "{name}"
seed = {seed}
{sizes}
[links.default]
capacity_msgs = 30
{BURSTY_TOPIC_WORKLOAD}[[failures]]
{failure}
from = 2
to = 4.5
""",
        str(ROOT / "simulations" / f"generated-{seed}.toml"),
    )


def on_a_forest(scenario: Scenario) -> bool:
    """Some publishing node publishes into a plain forest (spark.trees routes it)."""
    world = World(scenario)
    return any(world.forest(entry, node) is not None for entry, node in publishing(scenario))


def test_small_scenario(spark: SparkSession) -> None:
    """small.toml, with the topology file's [[publishers]] publishing their own keys (5 msg/s
    for 60 s each) across the ring of hubs, routed class by class: they reach exactly the
    queues the topology file's comments name."""
    scenario = load_scenario(ROOT / "simulations" / "small.toml")
    expected = reference_tables(scenario)
    assert_same_tables(spark_tables(spark, scenario), expected)
    queues = expected["queues"].set_index(["node", "queue"])["delivered"]
    assert queues[("hub-eu", "orders")] == 600  # orders.eu.new and orders.us.new
    assert queues[("edge-us-1", "eu-orders")] == 300  # orders.eu.new
    assert [queues[(node, "prices")] for node in ("hub-us", "hub-ap", "edge-ap-1")] == [300] * 3
    assert [queues[(node, "metrics")] for node in ("hub-eu", "edge-eu-1")] == [300] * 2


#: Publishers with their own keys on a plain forest (routed per tree) and on the fanout
#: federation (class by class), with message properties (a TTL longer than any outage and no
#: node killed while holding: none is dropped, so the forest still routes them in aggregate,
#: simulations.holding); topic subscribers on the hubs draw from the whole key space, own
#: keys included.
OWN_KEYS = """[[publishers]]
nodes = "edge-*"
exchange = "sim.topic"
rate = 6
keys = ["orders.eu", "orders.us", "a1.b2", "audit"]
persistent = false
ttl_ms = 60000
[[publishers]]
nodes = "edge-00*"
exchange = "sim.fanout"
rate = 3
key = "audit"
mandatory = true
[[subscribers]]
nodes = "hub-*"
exchange = "sim.topic"
type = "topic"
queue = "own"
count = 6
wildcards = 0.3
"""


def test_publishers_own_keys(spark: SparkSession, tmp_path: Path) -> None:
    """Own keys route in both engines as drawn keys do: on the forest in aggregate, by every
    class's paths, and in Spark, the tables are equal, and they reach queues."""
    scenario = fanout_hierarchy_scenario(tmp_path, 9, OWN_KEYS)
    assert scenario.keys.own == ("orders.eu", "orders.us", "a1.b2", "audit")
    assert World(scenario).forest(2, "edge-000-000") is not None  # the own keys' tree
    by_paths = {name: normalised(name, df) for name, df in reference.tables(scenario, forests=False).items()}
    assert_same_tables(reference_tables(scenario), by_paths)
    found = spark_tables(spark, scenario)
    assert_same_tables(found, by_paths)
    without = reference_tables(replace(scenario, publishers=scenario.publishers[:2]))
    own = found["queues"].set_index(["node", "queue"])["delivered"]
    drawn_only = without["queues"].set_index(["node", "queue"])["delivered"]
    assert own.sum() > drawn_only.sum()  # the own keys' publishes were delivered


@pytest.mark.parametrize(
    ("spec", "seed", "failure"),
    [
        ("hierarchy:hubs=2,edges=2", 1, 'node = "hub-000"'),
        ("ring-of-regions:hubs=4,edges=1", 2, 'link = ["hub-000", "hub-001"]'),
        ("mesh-of-hubs:hubs=3,edges=1", 3, 'link = ["hub-001", "edge-001-000"]'),
        ("random-geometric:nodes=8,radius=0.4", 4, 'node = "n-00003"'),
    ],
)
def test_generated_over_seeds(spark: SparkSession, spec: str, seed: int, failure: str) -> None:
    scenario = generated(spec, seed, failure)
    expected = reference_tables(scenario)
    assert_same_tables(spark_tables(spark, scenario), expected)
    # Dynamic routes deliver once, around the ring and across the mesh alike.
    assert expected["queues"]["duplicates"].sum() == 0
    assert expected["queues"]["delivered"].sum() > 0
    # The failed link or node held messages back (every route here is durable).
    assert expected["queues"]["delayed"].sum() > 0 and expected["queues"]["lost"].sum() == 0


@pytest.mark.parametrize("shape", ["random forest", "hierarchy with a fanout federation"])
def test_plain_forests_in_aggregate_equal_routing_every_class(
    spark: SparkSession, tmp_path: Path, shape: str
) -> None:
    """The Spark engine routes publishes into plain forests per tree and chunk of steps
    (spark.trees); its tables equal the reference engine's routing every class by its paths:
    on a random forest with a transient link, a durable link and a node failing; on a
    hierarchy where a fanout federation (routed class by class) shares the links and two
    publisher entries publish on the forest's exchange."""
    forest = shape == "random forest"
    if forest:
        scenario = random_forest_scenario(tmp_path, 1)
    else:
        scenario = fanout_hierarchy_scenario(tmp_path, 9, SECOND_TOPIC_PUBLISHER)
    assert on_a_forest(scenario)  # the aggregate path is taken
    by_paths = {name: normalised(name, df) for name, df in reference.tables(scenario, forests=False).items()}
    found = spark_tables(spark, scenario)
    assert found["queues"]["delayed"].sum() > 0
    assert (found["links"]["lost"].sum() > 0) == forest  # the federation's links buffer
    assert_same_tables(found, by_paths)


def test_a_forest_link_down_the_whole_run(spark: SparkSession) -> None:
    """On a tree, the links behind a transient link that is always down carry nothing yet are
    in the links table (every publish's route crosses them), and the queues behind it lose
    everything with the hops their copies would have made."""
    scenario = load_scenario(SCENARIOS / "chain.toml")
    assert on_a_forest(scenario)
    by_paths = {name: normalised(name, df) for name, df in reference.tables(scenario, forests=False).items()}
    found = spark_tables(spark, scenario)
    assert_same_tables(found, by_paths)
    links = found["links"].groupby("link")[["messages", "lost"]].sum()
    assert links.loc["c>d", "messages"] == 0 and links.loc["b>c", "lost"] == links.loc["b>c", "messages"] > 0
    d = queue(found, "d", "q")
    assert (d["delivered"], d["max_hops"]) == (0, 3) and d["lost"] > 0


@pytest.fixture(scope="module")
def corners(spark: SparkSession) -> dict[str, pd.DataFrame]:
    scenario = load_scenario(SCENARIOS / "corners.toml")
    expected = reference_tables(scenario)
    assert_same_tables(spark_tables(spark, scenario), expected)
    return expected


def queue(tables: dict[str, pd.DataFrame], node: str, name: str) -> pd.Series:
    rows = tables["queues"]
    return rows[(rows["node"] == node) & (rows["queue"] == name)].iloc[0]


def test_a_static_cycle_duplicates_as_far_as_the_planner_follows_it(corners: dict[str, pd.DataFrame]) -> None:
    a, b, c = (queue(corners, n, "q") for n in "abc")
    assert a["delivered"] == b["delivered"] == c["delivered"] > 0
    assert a["duplicates"] > 0 and a["duplicates"] < a["delivered"]
    assert max(a["max_hops"], b["max_hops"], c["max_hops"]) == MAX_HOPS


def test_a_link_down_the_whole_run_loses_everything_behind_it(corners: dict[str, pd.DataFrame]) -> None:
    e = queue(corners, "e", "q")
    assert e["delivered"] == 0 and e["lost"] > 0
    links = corners["links"]
    assert (links[links["link"] == "a>e"]["lost"] == links[links["link"] == "a>e"]["messages"]).all()


def test_a_transient_link_loses_what_it_held_when_it_went_down(corners: dict[str, pd.DataFrame]) -> None:
    f = corners["links"][corners["links"]["link"] == "a>f"].set_index("step")
    first_down = int(f.index[f["down"]].min())
    assert f.loc[first_down, "lost_in_flight"] == f.loc[first_down - 1, "backlog"] > 0
    assert f.loc[first_down, "backlog"] == 0


def test_a_durable_route_buffers_while_a_node_is_down(corners: dict[str, pd.DataFrame]) -> None:
    b_to_c = corners["links"][corners["links"]["link"] == "b>c"].set_index("step")
    down = b_to_c[b_to_c["down"]]
    assert (down["lost"] == 0).all() and down["backlog"].iloc[-1] == down["messages"].sum()
    assert queue(corners, "c", "q")["delayed"] > 0


def test_a_subscriber_no_route_reaches_gets_nothing(corners: dict[str, pd.DataFrame]) -> None:
    assert "d" not in set(corners["queues"]["node"])
    d = corners["nodes"].set_index("node").loc["d"]
    assert (d["received"], d["delivered"]) == (0, 0)


def test_headers_exchange_bindings_route_by_header_values(corners: dict[str, pd.DataFrame]) -> None:
    hq = queue(corners, "a", "hq")
    a = corners["nodes"].set_index("node").loc["a"]
    assert 0 < hq["delivered"] and a["unrouted"] > 0  # some header sets match none of hq's bindings


def test_an_empty_workload(spark: SparkSession) -> None:
    scenario = load_scenario(SCENARIOS / "empty.toml")
    found = spark_tables(spark, scenario)
    assert_same_tables(found, reference_tables(scenario))
    assert [len(found[t]) for t in ("links", "queues", "delays")] == [0, 0, 0]
    assert len(found["nodes"]) == 6 and found["nodes"]["published"].sum() == 0


@pytest.mark.parametrize("name", ["recovery", "recovery-dynamic"])
def test_a_node_failure_recovers_on_the_links_retry_schedule(spark: SparkSession, name: str) -> None:
    """Issue 27's failure (tests.spark.test_hop_routing.check_recovery counts it by hand):
    exchange routes routed class by class, dynamic routes in aggregate."""
    scenario = load_scenario(SCENARIOS / f"{name}.toml")
    world = World(scenario)
    on_trees = [world.forest(entry, node) is not None for entry, node in publishing(scenario)]
    assert all(on_trees) == (name == "recovery-dynamic") and (any(on_trees) == all(on_trees))
    expected = reference_tables(scenario)
    check_recovery(expected)
    assert_same_tables(spark_tables(spark, scenario), expected)


def test_a_partition_is_noticed_by_heartbeat_and_one_healed_unnoticed_drops_nothing(
    spark: SparkSession,
) -> None:
    """partition.toml: a is cut off from 10 s to 44 s; b and c, which hold their links to a,
    notice at 10 + 2 x 10 s and retry at 32 s (hanging until the 10 s connect timeout) and at
    42 + 4 = 46 s, after the heal. a publishes 10 messages a second: what it sends to b's
    transient route from 10 s to 46 s is lost, to c's durable one delayed. From 50 s to 60 s,
    healed before anyone notices, both links stall: nothing lost, all of it delayed."""
    scenario = load_scenario(SCENARIOS / "partition.toml")
    assert World(scenario).recovery() == {"a>b": [(10, 46), (50, 60)], "a>c": [(10, 46), (50, 60)]}
    expected = reference_tables(scenario)
    queues = expected["queues"].set_index("node")
    rate = 10
    assert queues.loc["b", "lost"] == rate * (46 - 10)
    assert queues.loc["b", "delayed"] == rate * (60 - 50)
    assert (queues.loc["c", "lost"], queues.loc["c", "delayed"]) == (0, rate * (46 - 10 + 60 - 50))
    assert_same_tables(spark_tables(spark, scenario), expected)


@pytest.mark.parametrize("name", ["chain-node", "kinds"])
def test_validate_scenarios(spark: SparkSession, name: str) -> None:
    """Scenarios `amq-sim validate` holds to live nodes (tests/integration/validate): every
    route kind and federation type, and a transient route's binding withdrawn from the
    dynamic adverts while its link is down (chain-node: a>b carries 337 of a's 400)."""
    scenario = load_scenario(ROOT / "tests" / "integration" / "validate" / f"{name}.toml")
    expected = reference_tables(scenario)
    if name == "chain-node":
        links = expected["links"]
        assert (links["messages"] - links["lost"])[links["link"] == "a>b"].sum() == 337
    assert_same_tables(spark_tables(spark, scenario), expected)


@pytest.mark.parametrize("name", ["holding-ttl", "holding-kill", "holding-limit"])
def test_what_a_holding_link_drops(spark: SparkSession, name: str) -> None:
    """A link's source queue drops copies it holds (simulations.holding; counted by hand in
    tests/unit/test_simulation_holding.py): expired, lost with its killed node, or beyond its
    bridge queue's limit. holding-kill and holding-limit publish on a forest, whose publishes the
    engines route class by class when a drop may hit them (World.by_classes); both agree."""
    scenario = load_scenario(SCENARIOS / f"{name}.toml")
    assert not on_a_forest(scenario)
    expected = reference_tables(scenario)
    assert expected["links"]["dropped"].sum() > 0
    assert_same_tables(spark_tables(spark, scenario), expected)
