"""topology.flow at growing sizes: the work of building the model (mirroring bindings up
federations, propagating dynamic routes' interest) and of routing one publish, counted, not
timed, must grow linearly with the hierarchy (issue 13: it grew quadratically, so regions-10k
never finished building)."""

from __future__ import annotations

from dataclasses import replace

from simulations.generators import EXCHANGE, GeneratorSpec, generate
from topology.flow import model_work, routing_work
from topology.model import Binding, Publisher, Queue, Topology

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
        bindings += [
            Binding(node, EXCHANGE, "feed", f"k{(number * 7 + i) % KEYS}.*") for i in range(2)
        ]
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
