"""topology.flow: how many copies of one publish each queue gets, on topologies built in code:
pairs and rings of dynamic routes (exactly once), static exchange and queue routes, each
federation type, and what the nodes refuse (which carries nothing)."""

from __future__ import annotations

from collections import Counter

import pytest

from topology.flow import reached_queues, trace_flow
from topology.model import Binding, Exchange, Federation, Node, Publisher, Queue, Route, Topology

from ..routing_vectors import GraphCase, all_cases, case_id

X = "fed.topic"


def network(
    names: list[str],
    routes: tuple[Route, ...] = (),
    federations: tuple[Federation, ...] = (),
    keys: dict[str, str] | None = None,
    exchange: str = X,
    exchange_type: str = "topic",
    extra_queues: tuple[Queue, ...] = (),
    extra_bindings: tuple[Binding, ...] = (),
) -> Topology:
    """Nodes with `exchange` and a queue 'q' bound with keys[node] (default '#'; None: unbound)."""
    keys = {name: "#" for name in names} | (keys or {})
    builtin = exchange.startswith("amq.")
    return Topology(
        "t",
        "t.toml",
        {name: Node(name, "127.0.0.1", 5701 + i) for i, name in enumerate(names)},
        exchanges=() if builtin else tuple(Exchange(n, exchange, exchange_type) for n in names),
        queues=tuple(Queue(n, "q") for n in names) + extra_queues,
        bindings=tuple(Binding(n, exchange, "q", keys[n]) for n in names if keys[n] is not None)
        + extra_bindings,
        routes=routes,
        federations=federations,
    )


def dynamic(source: str, destination: str, *excludes: str, exchange: str = X) -> Route:
    return Route("dynamic", source, destination, exchange, excludes=excludes)


def both_ways(*pairs: tuple[str, str]) -> tuple[Route, ...]:
    return tuple(route for a, b in pairs for route in (dynamic(a, b), dynamic(b, a)))


def got(topology: Topology, node: str, key: str = "k.1", exchange: str = X) -> Counter[tuple[str, str]]:
    return reached_queues(topology, Publisher(node, exchange, key))


def everyone(names: list[str], count: int = 1) -> Counter[tuple[str, str]]:
    return Counter({(name, "q"): count for name in names})


# -- dynamic routes -----------------------------------------------------------------------------


def test_a_pair_of_dynamic_routes_delivers_once_each_way() -> None:
    topology = network(["a", "b"], both_ways(("a", "b")))
    assert got(topology, "a") == everyone(["a", "b"])
    assert got(topology, "b") == everyone(["a", "b"])


@pytest.mark.parametrize("publisher", ["a", "b", "c", "d"])
def test_a_ring_of_dynamic_routes_delivers_exactly_once(publisher: str) -> None:
    names = ["a", "b", "c", "d"]
    topology = network(names, both_ways(("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")))
    result = trace_flow(topology, Publisher(publisher, X, "k.1"))
    assert result.queues == everyone(names)
    assert (result.looped, result.cut) == (0, 0)


def test_a_full_mesh_of_dynamic_routes_delivers_exactly_once() -> None:
    names = ["a", "b", "c", "d"]
    pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1 :]]
    topology = network(names, both_ways(*pairs))
    for publisher in names:
        assert got(topology, publisher) == everyone(names)


def test_a_one_way_ring_delivers_once_around() -> None:
    names = ["a", "b", "c"]
    topology = network(names, (dynamic("a", "b"), dynamic("b", "c"), dynamic("c", "a")))
    assert got(topology, "b") == everyone(names)


def test_dynamic_routes_forward_only_to_interest_and_relay_through_unbound_nodes() -> None:
    topology = network(
        ["a", "b", "c"], both_ways(("a", "b"), ("b", "c")), keys={"a": "other.#", "b": None, "c": "k.*"}
    )
    assert got(topology, "a") == Counter({("c", "q"): 1})
    assert got(topology, "a", key="nothing") == Counter()


def test_an_exclude_list_keeps_interest_from_crossing_a_route() -> None:
    routes = (dynamic("a", "b", "c"), dynamic("b", "c"))
    topology = network(["a", "b", "c"], routes)
    assert got(topology, "a") == everyone(["a", "b"])
    assert got(topology, "b") == everyone(["b", "c"])


def test_a_dynamic_route_needs_the_same_exchange_type_on_both_nodes() -> None:
    topology = network(["a", "b"], (dynamic("a", "b"),))
    mismatched = Topology(
        "t",
        "t.toml",
        topology.nodes,
        (Exchange("a", X, "topic"), Exchange("b", X, "direct")),
        topology.queues,
        topology.bindings,
        routes=topology.routes,
    )
    assert got(mismatched, "a", key="#") == Counter({("a", "q"): 1})


def test_a_pushed_dynamic_route_is_refused_and_carries_nothing() -> None:
    route = Route("dynamic", "a", "b", X, push=True)
    assert got(network(["a", "b"], (route,)), "a") == everyone(["a"])


# -- static routes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("push", [False, True])
def test_an_exchange_route_carries_what_its_key_matches(push: bool) -> None:
    topology = network(["a", "b"], (Route("exchange", "a", "b", X, key="k.#", push=push),))
    assert got(topology, "a", key="k.1") == everyone(["a", "b"])
    assert got(topology, "a", key="other") == everyone(["a"])
    assert got(topology, "b", key="k.1") == everyone(["b"])


def test_an_exchange_route_beside_a_dynamic_route_delivers_twice() -> None:
    routes = (dynamic("a", "b"), Route("exchange", "a", "b", X, key="#"))
    assert got(network(["a", "b"], routes), "a") == Counter({("a", "q"): 1, ("b", "q"): 2})


def test_a_ring_of_exchange_routes_loops_until_cut() -> None:
    routes = tuple(Route("exchange", s, d, X, key="#") for s, d in (("a", "b"), ("b", "c"), ("c", "a")))
    result = trace_flow(network(["a", "b", "c"], routes), Publisher("a", X, "k.1"))
    assert result.cut == 1
    assert result.queues[("a", "q")] > 1


def test_a_dynamic_route_back_against_an_exchange_route_duplicates_and_drops_the_loop() -> None:
    """b's publish: b's queue, then a (exchange route), then back to b by the dynamic route,
    whose trace makes a drop the copy b's exchange route sends it again."""
    routes = (dynamic("a", "b"), Route("exchange", "b", "a", X, key="#"))
    result = trace_flow(network(["a", "b"], routes), Publisher("b", X, "k.1"))
    assert result.queues == Counter({("a", "q"): 1, ("b", "q"): 2})
    assert result.looped == 1


def test_a_queue_route_moves_messages_out_of_the_source_queue() -> None:
    outbox = Queue("a", "out")
    binding = Binding("a", X, "out", "k.#")
    route = Route("queue", "a", "b", X, queue="out")
    topology = network(
        ["a", "b"], (route,), keys={"a": None}, extra_queues=(outbox,), extra_bindings=(binding,)
    )
    assert got(topology, "a") == Counter({("b", "q"): 1})


def test_a_queue_route_into_a_missing_exchange_leaves_messages_in_the_queue() -> None:
    outbox, binding = Queue("a", "out"), Binding("a", X, "out", "#")
    route = Route("queue", "a", "b", "nowhere", queue="out")
    topology = network(
        ["a", "b"], (route,), keys={"a": None}, extra_queues=(outbox,), extra_bindings=(binding,)
    )
    assert got(topology, "a") == Counter({("a", "out"): 1})


# -- federation types ----------------------------------------------------------------------------


def federated(kind: str, keys: dict[str, str | None] | None = None, exchange: str = X) -> Topology:
    """Children c1 and c2 of parent p, both federated as `kind`."""
    federations = tuple(Federation(child, "p", exchange, kind) for child in ("c1", "c2"))
    return network(["p", "c1", "c2"], federations=federations, keys=keys, exchange=exchange)


@pytest.mark.parametrize(
    ("kind", "publisher", "expected"),
    [
        ("subscriber", "p", ["p", "c1", "c2"]),
        ("subscriber", "c1", ["c1"]),
        ("publisher", "c1", ["c1", "p"]),
        ("publisher", "p", ["p"]),
        ("fanout", "c1", ["c1", "p", "c2"]),
        ("fanout", "p", ["p", "c1", "c2"]),
        ("data", "c1", ["c1", "p", "c2"]),
        ("service", "p", ["p", "c1", "c2"]),
    ],
)
def test_each_federation_type_moves_a_publish_as_the_attachment_does(
    kind: str, publisher: str, expected: list[str]
) -> None:
    assert got(federated(kind), publisher) == everyone(expected)


@pytest.mark.parametrize("kind", ["locator", "service"])
def test_locator_and_service_forward_only_what_no_local_queue_took(kind: str) -> None:
    topology = federated(kind, keys={"c1": "mine"})
    assert got(topology, "c1", key="mine") == everyone(["c1"])
    others = Counter({("p", "q"): 1}) + (Counter({("c2", "q"): 1}) if kind == "service" else Counter())
    assert got(topology, "c1", key="k.1") == others


def test_service_federation_carries_a_reply_to_the_client_node() -> None:
    """queue@host: the reply has no local queue on the service's node, reaches the parent and
    the client node's mirrored binding there."""
    topology = federated("service", keys={"p": None, "c1": None, "c2": "reply@c2"}, exchange="amq.service")
    assert got(topology, "c1", key="reply@c2", exchange="amq.service") == Counter({("c2", "q"): 1})


def test_a_three_level_fanout_tree_delivers_once_everywhere() -> None:
    names = ["root", "mid", "leaf", "other"]
    federations = (
        Federation("mid", "root", X, "fanout"),
        Federation("leaf", "mid", X, "fanout"),
        Federation("other", "root", X, "fanout"),
    )
    topology = network(names, federations=federations)
    for publisher in names:
        assert got(topology, publisher) == everyone(names)


def test_a_federation_needs_a_federatable_exchange() -> None:
    topology = network(["p", "c"], federations=(Federation("c", "p", X, "fanout"),))
    internal = Topology(
        "t",
        "t.toml",
        topology.nodes,
        (Exchange("p", X, "topic"), Exchange("c", X, "topic", internal=True)),
        topology.queues,
        topology.bindings,
        federations=topology.federations,
    )
    assert got(internal, "c") == everyone(["c"])


def test_only_the_first_federation_of_an_exchange_counts() -> None:
    federations = (Federation("c", "p1", X, "publisher"), Federation("c", "p2", X, "publisher"))
    assert got(network(["p1", "p2", "c"], federations=federations), "c") == everyone(["c", "p1"])


def test_a_fanout_federation_cycle_loops_until_cut() -> None:
    federations = (
        Federation("a", "b", X, "fanout"),
        Federation("b", "c", X, "fanout"),
        Federation("c", "a", X, "fanout"),
    )
    assert trace_flow(network(["a", "b", "c"], federations=federations), Publisher("a", X, "k")).cut > 0


def test_the_default_exchange_routes_by_queue_name_and_unknown_exchanges_go_nowhere() -> None:
    topology = network(["a"])
    assert got(topology, "a", key="q", exchange="") == everyone(["a"])
    assert got(topology, "a", exchange="nowhere") == Counter()


def test_reached_bindings_are_the_ones_that_matched() -> None:
    extra = (Binding("a", X, "q", "other"),)
    topology = network(["a"], extra_bindings=extra)
    assert trace_flow(topology, Publisher("a", X, "k.1")).bindings == {topology.bindings[0]}


# -- the shared routing cases (tests/vectors/routing.json) ---------------------------------------


def one_node(case: GraphCase) -> Topology:
    """The case declared on one node: its exchanges, queues and queue bindings."""
    return Topology(
        "t",
        "t.toml",
        {"n": Node("n", "127.0.0.1", 5701)},
        exchanges=tuple(Exchange("n", name, kind) for name, kind, _ in case.exchanges),
        queues=tuple(Queue("n", name) for name in case.queues),
        bindings=tuple(Binding("n", b.source, b.destination, b.key, b.arguments) for b in case.bindings),
    )


#: The model's publishers carry no headers, and its files declare no exchange-to-exchange
#: bindings or alternate exchanges: the cases within that.
MODELLED = [case for case in all_cases() if not case.headers and case.plain_bindings_only]


@pytest.mark.parametrize("case", MODELLED, ids=case_id)
def test_the_model_routes_the_shared_cases_as_the_broker_does(case: GraphCase) -> None:
    reached = reached_queues(one_node(case), Publisher("n", case.exchange, case.routing_key))
    assert reached == Counter({("n", queue): 1 for queue in case.expected})
