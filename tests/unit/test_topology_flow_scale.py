"""topology.flow at growing sizes: the work of building the model (mirroring bindings up
federations, propagating dynamic routes' interest) and of routing one publish, counted, not
timed, must grow linearly with the hierarchy (issue 13: it grew quadratically, so regions-10k
never finished building)."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import networkx as nx
import pytest

from gateway.routing.bindings import binding_identity
from simulations.generators import EXCHANGE, GeneratorSpec, generate
from topology.flow import _Network, model_work, routing_work
from topology.model import Binding, Exchange, Federation, Node, Publisher, Queue, Topology

FANOUT = "sim.fanout"
#: Distinct keys subscribers draw from: a hub's federation mirrors at most this many.
KEYS = 40


def hierarchy(nodes: int) -> Topology:
    """A root, nodes / 25 hubs and the rest edges; dynamic routes both ways on sim.topic and
    fanout federations up the tree on sim.fanout; every node binds two topic keys and three
    fanout keys from a fixed key space."""
    topology = generate(
        GeneratorSpec("hierarchy", seed=1, hubs=nodes // 25, nodes=nodes, fanout_federation=FANOUT)
    )
    queues, bindings = [], []
    for number, node in enumerate(topology.nodes):
        queues += [Queue(node, "feed"), Queue(node, "audit")]
        bindings += [Binding(node, EXCHANGE, "feed", f"k{(number * 7 + i) % KEYS}.*") for i in range(2)]
        bindings += [Binding(node, FANOUT, "audit", f"k{(number * 11 + i) % KEYS}") for i in range(3)]
    return replace(topology, queues=tuple(queues), bindings=tuple(bindings))


def test_building_the_model_grows_linearly_with_the_hierarchy() -> None:
    small, large = model_work(hierarchy(200)), model_work(hierarchy(400))
    assert set(small) == set(large) and small
    for kind, count in small.items():
        # twice the nodes: about twice the work (quadratic growth would be four times)
        assert large[kind] <= 2.5 * count, (kind, count, large[kind])


def test_routing_a_publish_grows_with_the_origins_it_reaches_not_nodes_times_origins() -> None:
    # a publish on an edge whose key matches 1 in 20 nodes' bindings: the copies it makes
    # double with the hierarchy, and so may the origins of interest examined on the way (a
    # match over every origin at every node visited would quadruple them)
    publishers = [Publisher("edge-000-000", EXCHANGE, f"k{key}.x") for key in (0, 1, 7)]
    small, large = (routing_work(hierarchy(nodes), publishers) for nodes in (200, 400))
    assert small["origins examined"] and set(small) == set(large)
    for kind, count in small.items():
        assert large[kind] <= 2.5 * count, (kind, count, large[kind])


def _mirrored_by_rounds(bound: dict[Any, list[Any]], subscribing: list[Federation]) -> dict[Any, Any]:
    """The mirroring topology.flow did before issue 13 (rounds over every federation's
    mirrors, quadratic and more), kept as the oracle for the one that replaced it."""
    mirrored: dict[Federation, list[tuple[str, dict[str, Any]]]] = {}
    for _ in range(len(subscribing) + 1):
        for federation in subscribing:
            distinct: dict[Any, tuple[str, dict[str, Any]]] = {}
            entries = [(k, a) for k, a, _ in bound.get((federation.child, federation.exchange), [])]
            for child, keys in mirrored.items():
                if child.parent == federation.child and child.exchange == federation.exchange:
                    entries += keys
            for key, arguments in entries:
                distinct[binding_identity(key, arguments)] = (key, arguments)
            mirrored[federation] = list(distinct.values())
    return mirrored


@pytest.mark.parametrize("seed", range(8))
def test_mirroring_up_federations_equals_the_rounds_it_replaced(seed: int) -> None:
    # random parents on one fanout exchange (trees, and cycles when a parent lies below)
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(12)]
    federations = tuple(
        Federation(name, rng.choice([n for n in names if n != name]), FANOUT, "fanout")
        for name in names
        if rng.random() < 0.8
    )
    topology = Topology(
        "t",
        "t.toml",
        {name: Node(name, "127.0.0.1", 5701 + i) for i, name in enumerate(names)},
        tuple(Exchange(name, FANOUT, "fanout") for name in names),
        tuple(Queue(name, "q") for name in names),
        tuple(
            Binding(name, FANOUT, "q", f"k{rng.randrange(6)}")
            for name in names
            for _ in range(rng.randrange(4))
        ),
        federations=federations,
    )
    network = _Network(topology)
    subscribing = list(network.federations.values())
    own = {place: [b for b in entries if b[2][0] != "mirror"] for place, entries in network.bound.items()}
    expected = _mirrored_by_rounds(own, subscribing)
    found = network._mirrored(own, subscribing)
    up = nx.DiGraph([(f.child, f.parent) for f in subscribing])
    cyclic = {node for cycle in nx.simple_cycles(up) for node in cycle}
    cyclic |= {above for node in cyclic for above in nx.descendants(up, node)}
    for federation in subscribing:
        if federation.child in cyclic:  # on or above a cycle, the order may differ
            assert sorted(found[federation]) == sorted(expected[federation])
        else:
            assert found[federation] == expected[federation]
