"""Generated topologies: seeded, the sizes asked for, clean under `amq-route topology check`,
and written out as topology files that load back to the same model. No Spark."""

from __future__ import annotations

import networkx as nx
import pytest

from simulations.generators import GeneratorSpec, generate, to_toml
from topology.checks import run_checks
from topology.graph import connection_graph
from topology.loader import load_topology_text

SPECS = [
    "hierarchy:hubs=3,edges=4,seed=1,fanout_federation=sim.fanout",
    "ring-of-regions:hubs=5,edges=2,seed=2",
    "random-geometric:nodes=20,radius=0.2,seed=3",
    "mesh-of-hubs:hubs=4,edges=3,seed=4",
]


@pytest.mark.parametrize("text", SPECS)
def test_generated_topologies_pass_the_checks_and_are_connected(text: str) -> None:
    topology = generate(GeneratorSpec.parse(text))
    assert [f for f in run_checks(topology) if f.severity == "error"] == []
    assert nx.is_connected(connection_graph(topology))


@pytest.mark.parametrize("text", SPECS)
def test_written_out_they_load_back_to_the_same_model(text: str) -> None:
    topology = generate(GeneratorSpec.parse(text))
    loaded = load_topology_text(to_toml(topology), "generated.toml")
    assert loaded.nodes.keys() == topology.nodes.keys()
    assert [(n.port, n.region) for n in loaded.nodes.values()] == [
        (n.port, n.region) for n in topology.nodes.values()
    ]
    assert [(r.kind, r.source, r.destination, r.exchange) for r in loaded.routes] == [
        (r.kind, r.source, r.destination, r.exchange) for r in topology.routes
    ]
    assert [(f.child, f.parent, f.exchange, f.type) for f in loaded.federations] == [
        (f.child, f.parent, f.exchange, f.type) for f in topology.federations
    ]
    assert sorted((e.node, e.name, e.type) for e in loaded.exchanges) == sorted(
        (e.node, e.name, e.type) for e in topology.exchanges
    )


def test_the_same_seed_gives_the_same_topology_and_another_seed_another() -> None:
    one = generate(GeneratorSpec.parse("random-geometric:nodes=40,radius=0.15,seed=7"))
    again = generate(GeneratorSpec.parse("random-geometric:nodes=40,radius=0.15,seed=7"))
    other = generate(GeneratorSpec.parse("random-geometric:nodes=40,radius=0.15,seed=8"))
    assert one.routes == again.routes and one.routes != other.routes


def test_hierarchy_sizes_for_regions_10k() -> None:
    topology = generate(
        GeneratorSpec.parse("hierarchy:hubs=100,nodes=10000,seed=1,fanout_federation=sim.fanout")
    )
    hubs = [n for n in topology.nodes if n.startswith("hub-")]
    edges = [n for n in topology.nodes if n.startswith("edge-")]
    assert (len(topology.nodes), len(hubs), len(edges)) == (10_000, 100, 9_899)
    # Dynamic routes both ways along every tree edge, a fanout federation up every one.
    assert len(topology.routes) == 2 * 9_999 and len(topology.federations) == 9_999


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tree:hubs=1", "unknown generator 'tree'"),
        ("hierarchy:hubs=1", "generator hierarchy: give edges"),
        ("mesh-of-hubs:hubs=1", "generator mesh-of-hubs: missing edges"),
        ("hierarchy:hubs=1,edges=1,colour=1", "unknown generator parameter 'colour'"),
    ],
)
def test_bad_specs_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate(GeneratorSpec.parse(text))
