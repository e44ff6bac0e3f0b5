"""Scenario files: the loader's conventions (every problem at once, `file:line: key.path:
message`, unknown keys are errors) and what a good file turns into. No Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulations.scenario import KeySpace, ScenarioError, load_scenario, load_scenario_text

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "simulations").glob("*.toml"))


def problems(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        load_scenario_text(text, str(ROOT / "simulations" / "bad.toml"))
    return [line.split("simulations/", 1)[1] for line in caught.value.problems]


def test_every_problem_is_reported_at_once_with_its_line() -> None:
    found = problems(
        """[scenario]
duration = 10
step = "1"
colour = "red"

[topology]
generator = "hierarchy"
hubs = 2
edges = 1

[keys]
words = []

[[publishers]]
nodes = "nowhere-*"
exchange = "sim.topic"
rate = -1

[[failures]]
from = 5
to = 1
"""
    )
    assert found == [
        "bad.toml:3: scenario.step: expected a number 0.001-1e+06, got '1'",
        "bad.toml:4: scenario.colour: unknown key (known: name, seed, duration, step, restart)",
        "bad.toml:12: keys.words: expected an array of 1-8 word counts, each 1-10000, got an array",
        "bad.toml:15: publishers[0].nodes: no node of the topology matches 'nowhere-*'",
        "bad.toml:17: publishers[0].rate: expected a number 0-1e+09, got -1",
        "bad.toml:19: failures[0]: give exactly one of 'link', 'node' or 'partition'",
        "bad.toml:21: failures[0].to: must not be before 'from'",
    ]


def test_a_generator_missing_sizes_and_a_topology_file_with_problems() -> None:
    assert problems(
        '[scenario]\nduration = 1\nstep = 1\n[topology]\ngenerator = "mesh-of-hubs"\nradius = 1\n'
    ) == ["bad.toml:4: topology: generator mesh-of-hubs: missing hubs, edges; does not take radius"]
    found = problems(
        '[scenario]\nduration = 1\nstep = 1\n[topology]\nfile = "../tests/spark/scenarios/nope.toml"\n'
    )
    assert (
        len(found) == 1 and found[0].startswith("bad.toml:5: topology.file: ") and "cannot read" in found[0]
    )


def test_failures_name_nodes_of_the_topology() -> None:
    found = problems(
        '[scenario]\nduration = 1\nstep = 1\n[topology]\ngenerator = "hierarchy"\nhubs = 1\nedges = 1\n'
        '[[failures]]\nlink = ["root", "hub-009"]\nfrom = 0\nto = 1\n'
    )
    assert found == ["bad.toml:8: failures[0]: unknown node 'hub-009'"]


def test_partitions_and_restart_times_are_checked() -> None:
    """hierarchy hubs=1, edges=1 has the nodes root, hub-000 and edge-000-000."""
    head = '[scenario]\nduration = 1\nstep = 1\n[topology]\ngenerator = "hierarchy"\nhubs = 1\nedges = 1\n'
    found = problems(
        head
        + '[[failures]]\npartition = [["root"], ["root", "hub-009"]]\nfrom = 0\nto = 1\n'
        + '[[failures]]\npartition = [["root", "hub-000", "edge-000-000"]]\nfrom = 0\nto = 1\n'
        + '[[failures]]\nlink = ["root", "hub-000"]\nfrom = 0\nto = 1\nrestart = 2\n'
        + '[[failures]]\npartition = ["root"]\nfrom = 0\nto = 1\n'
    )
    assert found == [
        "bad.toml:8: failures[0]: unknown node 'hub-009'",
        "bad.toml:9: failures[0].partition: nodes in more than one group: root",
        "bad.toml:13: failures[1].partition: separates nothing: name two groups, or leave some nodes out",
        "bad.toml:20: failures[2].restart: only a node's failure restarts",
        "bad.toml:21: failures[3]: give exactly one of 'link', 'node' or 'partition'",
        'bad.toml:22: failures[3].partition: expected groups of node names, [["a", "b"], ["c"]], got an array',
    ]
    scenario = load_scenario_text(
        head.replace("step = 1\n", "step = 1\nrestart = 3\n")
        + '[[failures]]\nnode = "hub-000"\nfrom = 0\nto = 1\n[[failures]]\npartition = [["root"]]\nfrom = 0\nto = 1\n',
        str(ROOT / "simulations" / "x.toml"),
    )
    assert scenario.restart == 3 and scenario.failures[1].partition == (("root",),)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_scenario_loads(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.topology.nodes and scenario.publishers and scenario.steps >= 1


def test_defaults_and_steps() -> None:
    scenario = load_scenario_text(
        '[scenario]\nduration = 2.5\nstep = 1\n[topology]\ngenerator = "hierarchy"\nhubs = 1\nedges = 2\n',
        str(ROOT / "simulations" / "x.toml"),
    )
    assert (scenario.name, scenario.steps, scenario.step_ms, scenario.keys) == ("x", 3, 1000, KeySpace())
    assert sorted(scenario.topology.nodes) == ["edge-000-000", "edge-000-001", "hub-000", "root"]


def test_publishers_own_keys_and_properties() -> None:
    scenario = load_scenario_text(
        '[scenario]\nduration = 1\nstep = 1\n[topology]\ngenerator = "hierarchy"\nhubs = 1\nedges = 1\n'
        "[keys]\nwords = [2]\n"
        '[[publishers]]\nnodes = "*"\nexchange = "x"\nrate = 1\nkeys = ["o.1", "a1", "o.2"]\n'
        '[[publishers]]\nnodes = "*"\nexchange = "x"\nrate = 1\nkey = "o.2"\npersistent = false\n'
        "mandatory = true\nttl_ms = 5000\n",
        str(ROOT / "simulations" / "x.toml"),
    )
    one, two = scenario.publishers
    assert (one.keys, one.persistent, one.mandatory, one.ttl_ms) == (("o.1", "a1", "o.2"), True, False, None)
    assert (two.keys, two.persistent, two.mandatory, two.ttl_ms) == (("o.2",), False, True, 5000)
    # Own keys are numbered after the drawn ones, once each ("a1" too: numbers, not words).
    assert (scenario.keys.drawn, scenario.keys.own, scenario.keys.size) == (2, ("o.1", "a1", "o.2"), 5)


def test_bad_publisher_keys_and_properties() -> None:
    found = problems(
        '[scenario]\nduration = 1\nstep = 1\n[topology]\ngenerator = "hierarchy"\nhubs = 1\nedges = 1\n'
        "publishers_rate = 3\n"
        '[[publishers]]\nnodes = "*"\nexchange = "x"\nrate = 1\nkeys = ["k"]\nkey = "k"\n'
        'persistent = "yes"\nttl_ms = -1\n'
        '[[publishers]]\nnodes = "*"\nexchange = "x"\nrate = 1\nkeys = ["ok", 3]\n'
        '[[publishers]]\nnodes = "*"\nexchange = "x"\nrate = 1\nkeys = []\n'
    )
    assert found == [
        "bad.toml:8: topology.publishers_rate: only with 'file' (a generator has no publishers)",
        "bad.toml:14: publishers[0].key: give at most one of 'keys' or 'key'",
        "bad.toml:15: publishers[0].persistent: expected true or false, got 'yes'",
        "bad.toml:16: publishers[0].ttl_ms: expected an integer 0-4294967295, got -1",
        "bad.toml:21: publishers[1].keys: expected a routing key (a string of at most 255 bytes), got 3",
        "bad.toml:26: publishers[2].keys: expected an array of 1-100000 routing keys, got an array",
    ]


def test_a_topology_files_publishers_are_used_or_refused(tmp_path: Path) -> None:
    """The topology file's [[publishers]] have no rate: a scenario says one (publishers_rate)
    or is refused at its `file` line; never silently left out."""
    topology = ROOT / "configs" / "topology-three-regions.toml"
    head = f'[scenario]\nduration = 4\nstep = 1\n[topology]\nfile = "{topology}"\n'
    with pytest.raises(ScenarioError) as caught:
        load_scenario_text(head, str(tmp_path / "s.toml"))
    assert caught.value.problems == [
        f"{tmp_path}/s.toml:5: topology.file: the topology's 4 [[publishers]] (the first at {topology}:223) "
        "have no rate: give publishers_rate (msg/s per publisher, 0 to leave them out) in [topology], "
        "or publish from this scenario's [[publishers]]"
    ]
    used = load_scenario_text(head + "publishers_rate = 2.5\n", str(tmp_path / "s.toml"))
    assert [(p.nodes, p.exchange, p.rate, p.keys) for p in used.publishers][:2] == [
        ("edge-eu-1", "fed.topic", 2.5, ("orders.eu.new",)),
        ("edge-us-1", "fed.topic", 2.5, ("orders.us.new",)),
    ]
    assert len(used.publishers) == 4 and used.keys.own[-1] == "metrics.eu.edge-eu-2"
    assert load_scenario_text(head + "publishers_rate = 0\n", str(tmp_path / "s.toml")).publishers == ()
