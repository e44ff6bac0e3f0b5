"""Routing in aggregate on plain forests (simulations.hops) gives the reference engine exactly
the tables that routing every class by its paths gives: on random forests of dynamic routes
(deep trees, several trees, transient and durable links, small capacities so that queueing
delays differ by link and step, link and node failures), on a regions-10k-like hierarchy with
a fanout federation and publishers on both exchanges (plain forest and per-class routing in
one run), over several seeds. No Spark."""

from __future__ import annotations

import gc
import math
import random
import tracemalloc
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from simulations import reference
from simulations.generators import GeneratorSpec, generate, to_toml
from simulations.hops import TreeTraffic
from simulations.scenario import Scenario, load_scenario, load_scenario_text
from simulations.tables import normalised
from simulations.world import Outages, World
from tests.spark.conftest import BURSTY_TOPIC_WORKLOAD, assert_same_tables
from topology.model import Exchange, Node, Route, Topology


def random_forest(rng: random.Random, size: int) -> Topology:
    """`size` nodes, each joined to an earlier one by dynamic routes both ways (one in eight
    starts a tree of its own), half the pairs transient."""
    names = [f"n-{number:03d}" for number in range(size)]
    nodes = {name: Node(name, "127.0.0.1", 10_000 + i, region=f"r{i % 3}") for i, name in enumerate(names)}
    routes = []
    for number in range(1, size):
        if rng.random() < 1 / 8:
            continue
        parent = names[rng.randrange(max(0, number - 4), number)]  # deep trees, not stars
        durable = rng.random() < 0.5
        routes += [
            Route("dynamic", names[number], parent, "sim.topic", durable=durable),
            Route("dynamic", parent, names[number], "sim.topic", durable=durable),
        ]
    exchanges = tuple(Exchange(name, "sim.topic", "topic") for name in names)
    return Topology("forest", "<forest>", nodes, exchanges, routes=tuple(routes))


def scenario_text(seed: int, topology: str, failures: str, extra: str = "") -> str:
    return f"""[scenario]
seed = {seed}
duration = 8
step = 0.5
[topology]
file = "{topology}"
[links.default]
capacity_msgs = 30
capacity_bytes = 40000
{BURSTY_TOPIC_WORKLOAD}[[subscribers]]
nodes = "*"
exchange = "sim.topic"
type = "direct"
queue = "other"
{extra}
{failures}
"""


Tables = dict[str, pd.DataFrame]


def tables_both_ways(scenario: Scenario) -> tuple[Tables, Tables]:
    """The reference engine's tables with plain forests in aggregate, and by paths."""

    def norm(found: Tables) -> Tables:
        return {name: normalised(name, frame) for name, frame in found.items()}

    return norm(reference.tables(scenario)), norm(reference.tables(scenario, forests=False))


def random_forest_scenario(tmp_path: Path, seed: int) -> Scenario:
    """A random forest of dynamic routes with a transient link, a durable link and a node
    failing at overlapping times."""
    rng = random.Random(seed)
    topology = random_forest(rng, rng.randrange(12, 26))
    (tmp_path / "forest.toml").write_text(to_toml(topology))
    one = rng.choice(sorted((r.source, r.destination) for r in topology.routes if not r.durable))
    two = rng.choice(sorted((r.source, r.destination) for r in topology.routes if r.durable))
    node = rng.choice(sorted(topology.nodes))
    failures = f"""[[failures]]
link = ["{one[0]}", "{one[1]}"]
from = 1
to = 3.5
[[failures]]
link = ["{two[0]}", "{two[1]}"]
from = 2.5
to = 6
[[failures]]
node = "{node}"
from = 5
to = 7
"""
    scenario = load_scenario_text(scenario_text(seed, "forest.toml", failures), str(tmp_path / "s.toml"))
    world = World(scenario)
    assert all(
        world.forest(0, name) is not None for r in topology.routes for name in (r.source, r.destination)
    )
    return scenario


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_random_forests(tmp_path: Path, seed: int) -> None:
    fast, paths = tables_both_ways(random_forest_scenario(tmp_path, seed))
    assert fast["links"]["lost"].sum() > 0 and fast["queues"]["delayed"].sum() > 0  # failures bite
    assert fast["delays"]["delay_ms"].nunique() > 3  # queueing differs by link and step
    assert_same_tables(fast, paths)


#: A second publisher entry on the plain forest's exchange, on the same nodes as the first.
SECOND_TOPIC_PUBLISHER = """[[publishers]]
nodes = "edge-*"
exchange = "sim.topic"
rate = 5
"""


def fanout_hierarchy_scenario(tmp_path: Path, seed: int, extra: str = "") -> Scenario:
    """regions-10k's shape, small: dynamic routes on sim.topic, fanout federations up the
    tree on sim.fanout, direct bindings there, edges publishing on both exchanges; a transient
    link and a node fail. Written to tmp_path / "s.toml"."""
    topology = generate(GeneratorSpec("hierarchy", seed, hubs=3, edges=3, fanout_federation="sim.fanout"))
    transient = {("hub-001", "edge-001-000"), ("edge-001-000", "hub-001")}
    topology = replace(
        topology,
        routes=tuple(replace(r, durable=(r.source, r.destination) not in transient) for r in topology.routes),
    )
    (tmp_path / "tree.toml").write_text(to_toml(topology))
    extra = f"""[[publishers]]
nodes = "edge-*"
exchange = "sim.fanout"
rate = 6
[[subscribers]]
nodes = "*"
exchange = "sim.fanout"
type = "direct"
queue = "audit"
count = 4
{extra}"""
    failures = """[[failures]]
link = ["hub-001", "edge-001-000"]
from = 1
to = 3
[[failures]]
node = "hub-002"
from = 2
to = 5
"""
    (tmp_path / "s.toml").write_text(scenario_text(seed, "tree.toml", failures, extra))
    scenario = load_scenario(tmp_path / "s.toml")
    world = World(scenario)
    assert world.forest(0, "edge-000-000") is not None and world.forest(1, "edge-000-000") is None
    return scenario


@pytest.mark.parametrize("seed", [7, 8])
def test_hierarchy_with_a_fanout_federation(tmp_path: Path, seed: int) -> None:
    fast, paths = tables_both_ways(fanout_hierarchy_scenario(tmp_path, seed))
    assert set(fast["queues"]["queue"]) == {"sim", "other", "audit"}
    assert_same_tables(fast, paths)


def test_two_publishers_on_one_node_of_a_forest_both_count(tmp_path: Path) -> None:
    """Two publisher entries on one exchange publish the same key at the same node and step:
    the tree adds both (it used to keep one of the two)."""
    scenario = fanout_hierarchy_scenario(tmp_path, 9, SECOND_TOPIC_PUBLISHER)
    fast, paths = tables_both_ways(scenario)
    assert World(scenario).forest(2, "edge-000-000") is not None
    assert_same_tables(fast, paths)


@pytest.mark.parametrize("spec", ["ring-of-regions:hubs=4,edges=1", "mesh-of-hubs:hubs=3,edges=1"])
def test_no_forest_no_aggregate(tmp_path: Path, spec: str) -> None:
    """Dynamic routes with a cycle are routed class by class."""
    topology = generate(GeneratorSpec.parse(spec))
    (tmp_path / "t.toml").write_text(to_toml(topology))
    scenario = load_scenario_text(scenario_text(1, "t.toml", ""), str(tmp_path / "s.toml"))
    assert World(scenario).forest(0, "hub-000") is None


def test_a_tree_keeps_its_counted_cells_as_arrays_alone(tmp_path: Path) -> None:
    """The reference engine's tree turns each step's counted cells into an array once and lets
    the list of tuples go (it kept both, the list about 2.5 times the array's bytes: about
    0.9 GB more at regions-10k); cells counted after that still count."""
    scenario = fanout_hierarchy_scenario(tmp_path, 9)
    world = World(scenario)
    found = world.forest(0, "edge-000-000")
    assert found is not None
    rng = random.Random(5)
    nodes = TreeTraffic(*found, scenario.keys).nodes
    cells = [
        (rng.choice(nodes), rng.randrange(scenario.keys.size), rng.randrange(scenario.steps), 1000, 600_000)
        for _ in range(20_000)
    ]
    no_failures = Outages(world, [])

    def offered(tree: TreeTraffic) -> dict[str, list[list[int]]]:
        found: dict[str, list[list[int]]] = defaultdict(lambda: [[0, 0] for _ in range(scenario.steps)])
        tree.offer(no_failures, found)
        return dict(found)

    whole, split = TreeTraffic(*found, scenario.keys), TreeTraffic(*found, scenario.keys)
    for cell in cells:
        whole.add(*cell)
    for cell in cells[:5_000]:
        split.add(*cell)
    split.crossed()  # every step's array made
    for cell in cells[5_000:]:
        split.add(*cell)
    assert offered(split) == offered(whole) != {}

    tree = TreeTraffic(*found, scenario.keys)
    gc.collect()
    tracemalloc.start()
    try:
        for cell in cells:
            tree.add(*cell)
        tree.crossed()
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    arrays = len(cells) * 4 * 8  # (node, key, messages, bytes) as int64
    assert held < 1.5 * arrays, f"{held:,} bytes held for {arrays:,} bytes of arrays"


def test_the_reference_engines_progress_moves_through_its_trees(tmp_path: Path) -> None:
    """The trees' passes report per step (they had said nothing between routing and the
    end, minutes at regions-10k's size)."""
    scenario = fanout_hierarchy_scenario(tmp_path, 9)
    shown: list[tuple[str, float]] = []
    reference.tables(scenario, lambda stage, share: shown.append((stage, share)))
    for stage in ("trees: traffic", "trees: outcomes"):
        shares = [share for name, share in shown if name == stage]
        assert len(shares) == scenario.steps and shares == sorted(shares) and shares[-1] == 1.0


# Failures as the federation recovers them (issue 27) ----------------------------------------

SCENARIOS = Path(__file__).parent / "scenarios"
#: recovery*.toml's run, by hand: 0.5 s steps; b publishes 5 messages a step (10/s), c2 2 (4/s).
STEP, FROM_B, FROM_C2 = 0.5, 5, 2
#: c2 is killed at 20 s and ready at 35 + 1.5 s: b -> c2, which c2 holds, is back then; d and e
#: hold their links to c2 and retry 2, 4, 8 and 16 s apart from 20 s: refused at 22, 26 and
#: 34 s, back at 50 s, 13.5 s after c2 is ready.
DOWN, READY, RETRIED = 20, 35 + 1.5, 20 + 2 + 4 + 8 + 16


def step(seconds: float) -> int:
    """The first step starting at or after `seconds`."""
    return math.ceil(seconds / STEP)


def check_recovery(found: Tables) -> None:
    """The issue's case, counted by hand from the retry schedule."""
    down, ready, retried = step(DOWN), step(READY), step(RETRIED)
    queues = found["queues"].set_index("node")
    # What b publishes until d's link is back reaches c2 -> d while it is down: lost, whether
    # it reached c2 then or was held by b -> c2 and drained into c2 at READY; so is what c2
    # publishes from READY until d's link is back. c2 refuses what its own publishers send
    # while it is dead.
    assert queues.loc["d", "lost"] == FROM_B * (retried - down) + FROM_C2 * (retried - ready) == 354
    assert found["nodes"].set_index("node").loc["c2", "refused"] == FROM_C2 * (ready - down) == 66
    # c2's queue gets what b -> c2 held; e's what b -> c2 and then c2 -> e held.
    assert queues.loc["c2", "delayed"] == FROM_B * (ready - down)
    assert queues.loc["e", "delayed"] == queues.loc["d", "lost"] and queues.loc["e", "lost"] == 0
    # Each message is in one backlog at a time: b's (b -> c2) until c2 is ready, then c2's
    # (c2 -> e, with what c2 publishes) until e's link is back; none on c2's links while it
    # is dead, and c2 -> d, transient, holds nothing.
    links = found["links"].set_index(["link", "step"])["backlog"]
    steps = range(found["links"]["step"].max() + 1)
    assert [links["b>c2", s] for s in steps] == [
        FROM_B * (s - down + 1) if down <= s < ready else 0 for s in steps
    ]
    assert [links["c2>e", s] for s in steps] == [
        FROM_B * (ready - down) + (FROM_B + FROM_C2) * (s - ready + 1) if ready <= s < retried else 0
        for s in steps
    ]
    assert not links["c2>d"].any()
    # Every message held on the way to e arrives when e's link is back: one published at step s
    # waits (retried - s) steps (plus a few ms of latency and queueing).
    delays = found["delays"][(found["delays"]["node"] == "e") & (found["delays"]["delay_ms"] >= 500)]
    waited = delays.groupby(delays["delay_ms"] // 500)["messages"].sum().to_dict()
    assert waited == {retried - s: FROM_B + (FROM_C2 if s >= ready else 0) for s in range(down, retried)}


def test_a_node_failure_recovers_on_the_links_retry_schedule() -> None:
    """Issue 27's failure on a plain forest of dynamic routes, routed in aggregate and class by
    class: losses behind the transient route and backlogs follow the links' recovery."""
    scenario = load_scenario(SCENARIOS / "recovery-dynamic.toml")
    assert World(scenario).forest(0, "b") is not None
    fast, paths = tables_both_ways(scenario)
    check_recovery(fast)
    assert_same_tables(fast, paths)
