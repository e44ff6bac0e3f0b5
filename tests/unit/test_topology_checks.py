"""topology.checks: every check has a failing fixture (its exact findings: severity, code,
message with the proposal, where) and a passing one (no finding), on tiny topologies built in
code; run_checks orders the findings, and the demo configs check clean of errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from simulations.generators import GeneratorSpec, generate
from topology import checks_graph as graph_checks
from topology import checks_references as reference_checks
from topology.checks import CHECKS, has_errors, run_checks
from topology.graph import DynamicRoutes
from topology.model import (
    Binding,
    Exchange,
    Federation,
    Finding,
    Link,
    Node,
    Publisher,
    Queue,
    Route,
    Topology,
)

X = "x"
ABC = ("a", "b", "c")
ROOT = Path(__file__).resolve().parents[2]


def node(name: str, port: int, host: str = "127.0.0.1", tag: str = "") -> Node:
    return Node(name, host, port, tag=tag, where=f"t.toml:{port - 5700}: nodes.{name}")


def topo(
    names: tuple[str, ...] = ("a", "b"),
    *,
    nodes: tuple[Node, ...] = (),
    exchanges: tuple[Exchange, ...] | None = None,
    queues: tuple[Queue, ...] | None = None,
    bindings: tuple[Binding, ...] | None = None,
    **declarations: Any,
) -> Topology:
    """Nodes with topic exchange 'x' and queue 'q' bound with '#' unless given otherwise."""
    nodes = nodes or tuple(node(name, 5701 + i) for i, name in enumerate(names))
    names = tuple(n.name for n in nodes)
    if exchanges is None:
        exchanges = tuple(Exchange(n, X, "topic", where="t.toml:20: exchanges[0]") for n in names)
    if queues is None:
        queues = tuple(Queue(n, "q", where="t.toml:30: queues[0]") for n in names)
    if bindings is None:
        bindings = tuple(Binding(n, X, "q", "#", where="t.toml:40: bindings[0]") for n in names)
    return Topology("t", "t.toml", {n.name: n for n in nodes}, exchanges, queues, bindings, **declarations)


def dyn(source: str, destination: str, i: int, **options: Any) -> Route:
    return Route("dynamic", source, destination, X, where=f"t.toml:{60 + i}: routes[{i}]", **options)


def exr(source: str, destination: str, i: int, key: str = "#", **options: Any) -> Route:
    return Route(
        "exchange", source, destination, X, key=key, where=f"t.toml:{60 + i}: routes[{i}]", **options
    )


def fed(child: str, parent: str, i: int, kind: str = "fanout", exchange: str = X) -> Federation:
    return Federation(child, parent, exchange, kind, where=f"t.toml:{80 + i}: federations[{i}]")


def link(frm: str, to: str, i: int, **options: Any) -> Link:
    """As the file writes it: `from` is the peer, `to` opens the link."""
    return Link(to, frm, where=f"t.toml:{50 + i}: links[{i}]", **options)


def pub(name: str, key: str, i: int) -> Publisher:
    return Publisher(name, X, key, where=f"t.toml:{90 + i}: publishers[{i}]")


ONLY_A = (Exchange("a", X, "topic", where="t.toml:20: exchanges[0]"),)
E, W, INFO = "error", "warning", "info"

Check = Callable[[Topology], Iterator[Finding]]

# (check, failing fixture, its findings as (severity, code, message, where), passing fixture)
CASES: dict[str, tuple[Check, Topology, list[tuple[str, str, str, str]], Topology]] = {
    "unknown-node": (
        reference_checks.check_unknown_nodes,
        topo(links=(link("a", "z", 0),), publishers=(pub("y", "k", 0),)),
        [
            (E, "unknown-node", "link a -> z names node 'z', which is not declared", "t.toml:50: links[0]"),
            (
                E,
                "unknown-node",
                "publisher to 'x' (key 'k') names node 'y', which is not declared",
                "t.toml:90: publishers[0]",
            ),
        ],
        topo(links=(link("a", "b", 0),), publishers=(pub("a", "k", 0),)),
    ),
    "unknown-exchange": (
        reference_checks.check_unknown_exchanges,
        topo(
            exchanges=ONLY_A,
            bindings=(Binding("a", X, "q", "#"),),
            routes=(exr("a", "b", 0),),
            federations=(fed("a", "b", 0),),
        ),
        [
            (
                E,
                "unknown-exchange",
                "exchange route a -> b on 'x' (key '#'): no exchange 'x' on b",
                "t.toml:60: routes[0]",
            ),
            (
                E,
                "unknown-exchange",
                "federation a -> b of 'x' (fanout): no exchange 'x' on b",
                "t.toml:80: federations[0]",
            ),
        ],
        topo(routes=(exr("a", "b", 0),), federations=(fed("a", "b", 0, exchange="amq.data"),)),
    ),
    "unknown-queue": (
        reference_checks.check_unknown_queues,
        topo(
            queues=(Queue("a", "q"),),
            routes=(Route("queue", "b", "a", X, queue="out", where="t.toml:60: routes[0]"),),
        ),
        [
            (E, "unknown-queue", "binding of queue 'q' to 'x': no queue 'q' on b", "t.toml:40: bindings[0]"),
            (
                E,
                "unknown-queue",
                "queue route b -> a from queue 'out' into 'x': no queue 'out' on b",
                "t.toml:60: routes[0]",
            ),
        ],
        topo(routes=(Route("queue", "b", "a", X, queue="q"),)),
    ),
    "duplicate-node": (
        reference_checks.check_duplicate_nodes,
        topo(nodes=(node("hub", 5701), node("Hub", 5702))),
        [
            (
                E,
                "duplicate-node",
                "nodes 'hub' and 'Hub' differ only in case: their data directories ./var/hub and "
                "./var/Hub are one on case-insensitive file systems",
                "t.toml:2: nodes.Hub",
            )
        ],
        topo(),
    ),
    "duplicate-exchange": (
        reference_checks.check_duplicate_exchanges_and_queues,
        topo(exchanges=(*ONLY_A, Exchange("a", X, "topic", where="t.toml:24: exchanges[1]"))),
        [
            (
                E,
                "duplicate-exchange",
                "exchange 'x' is declared twice on a (first at t.toml:20: exchanges[0])",
                "t.toml:24: exchanges[1]",
            )
        ],
        topo(),
    ),
    "duplicate-queue": (
        reference_checks.check_duplicate_exchanges_and_queues,
        topo(
            queues=(
                Queue("a", "q", where="t.toml:30: queues[0]"),
                Queue("a", "q", where="t.toml:33: queues[1]"),
            )
        ),
        [
            (
                E,
                "duplicate-queue",
                "queue 'q' is declared twice on a (first at t.toml:30: queues[0])",
                "t.toml:33: queues[1]",
            )
        ],
        topo(),
    ),
    "duplicate-binding": (
        reference_checks.check_duplicate_bindings,
        topo(
            bindings=(
                Binding("a", X, "q", "k", where="t.toml:40: bindings[0]"),
                Binding("a", X, "q", "k", where="t.toml:44: bindings[1]"),
            )
        ),
        [
            (
                W,
                "duplicate-binding",
                "binding of queue 'q' to 'x' with key 'k' is declared twice on a "
                "(first at t.toml:40: bindings[0]): it makes one binding",
                "t.toml:44: bindings[1]",
            )
        ],
        topo(),
    ),
    "duplicate-link": (
        reference_checks.check_duplicate_links,
        topo(links=(link("a", "b", 0), link("a", "b", 1))),
        [
            (
                E,
                "duplicate-link",
                "link a -> b is declared twice (first at t.toml:50: links[0]): one link per pair of nodes",
                "t.toml:51: links[1]",
            )
        ],
        topo(links=(link("a", "b", 0), link("b", "a", 1))),
    ),
    "duplicate-route": (
        reference_checks.check_duplicate_routes,
        topo(routes=(exr("a", "b", 0), exr("a", "b", 1))),
        [
            (
                E,
                "duplicate-route",
                "exchange route a -> b on 'x' (key '#') is declared twice (first at t.toml:60: routes[0]): "
                "the node refuses the second as a duplicate",
                "t.toml:61: routes[1]",
            )
        ],
        topo(routes=(exr("a", "b", 0), exr("a", "b", 1, key="k"))),
    ),
    "duplicate-federation": (
        reference_checks.check_federated_twice,
        topo(federations=(fed("a", "b", 0), fed("a", "b", 1))),
        [
            (
                E,
                "duplicate-federation",
                "federation a -> b of 'x' (fanout) is declared twice (first at t.toml:80: federations[0])",
                "t.toml:81: federations[1]",
            )
        ],
        topo(federations=(fed("a", "b", 0),)),
    ),
    "federated-twice": (
        reference_checks.check_federated_twice,
        topo(ABC, federations=(fed("a", "b", 0), fed("a", "c", 1))),
        [
            (
                E,
                "federated-twice",
                "exchange 'x' of a is federated twice, to b (at t.toml:80: federations[0]) and to c: "
                "an exchange is federated at most once",
                "t.toml:81: federations[1]",
            )
        ],
        topo(ABC, federations=(fed("a", "b", 0), fed("c", "b", 1))),
    ),
    "shared-endpoint": (
        reference_checks.check_shared_endpoints,
        topo(nodes=(node("a", 5701), node("b", 5701, host="localhost"))),
        [(E, "shared-endpoint", "nodes 'a' and 'b' both listen on localhost:5701", "t.toml:1: nodes.b")],
        topo(),
    ),
    "self-link": (
        reference_checks.check_self_links,
        topo(links=(link("a", "a", 0),), routes=(exr("b", "b", 0),), federations=(fed("a", "a", 0),)),
        [
            (
                E,
                "self-link",
                "link a -> a connects a to itself: a node refuses to link to itself",
                "t.toml:50: links[0]",
            ),
            (
                E,
                "self-link",
                "exchange route b -> b on 'x' (key '#') connects b to itself: a node refuses to link to itself",
                "t.toml:60: routes[0]",
            ),
            (
                E,
                "self-link",
                "federation a -> a of 'x' (fanout) connects a to itself: a node refuses to link to itself",
                "t.toml:80: federations[0]",
            ),
        ],
        topo(links=(link("a", "b", 0),), routes=(exr("a", "b", 0),), federations=(fed("a", "b", 0),)),
    ),
    "transient-link": (
        reference_checks.check_durable_routes,
        topo(links=(link("a", "b", 0, durable=False),), routes=(dyn("a", "b", 0),)),
        [
            (
                E,
                "transient-link",
                "durable dynamic route a -> b on 'x' rides on the non-durable link a -> b (t.toml:50: links[0]): "
                "the node refuses it; make the link durable or the route durable = false",
                "t.toml:60: routes[0]",
            )
        ],
        topo(links=(link("a", "b", 0, durable=False),), routes=(dyn("a", "b", 0, durable=False),)),
    ),
    "transient-link (made by a route)": (
        reference_checks.check_durable_routes,
        topo(routes=(dyn("a", "b", 0, durable=False), exr("a", "b", 1))),
        [
            (
                E,
                "transient-link",
                "durable exchange route a -> b on 'x' (key '#') rides on the non-durable link a -> b "
                "(t.toml:60: routes[0], made by a non-durable route): the node refuses it; make the link "
                "durable or the route durable = false",
                "t.toml:61: routes[1]",
            )
        ],
        topo(routes=(dyn("a", "b", 0), exr("a", "b", 1, durable=False))),
    ),
    "dynamic-missing": (
        reference_checks.check_dynamic_exchanges,
        topo(exchanges=ONLY_A, routes=(dyn("a", "b", 0),)),
        [
            (
                E,
                "dynamic-missing",
                "dynamic route a -> b on 'x': no exchange 'x' on b (needed on both nodes)",
                "t.toml:60: routes[0]",
            )
        ],
        topo(routes=(dyn("a", "b", 0),)),
    ),
    "dynamic-mismatch": (
        reference_checks.check_dynamic_exchanges,
        topo(exchanges=(*ONLY_A, Exchange("b", X, "direct", durable=False)), routes=(dyn("a", "b", 0),)),
        [
            (
                E,
                "dynamic-mismatch",
                "dynamic route a -> b on 'x': 'x' is topic (durable) on a but direct (transient) on b; "
                "both need the same type and flags",
                "t.toml:60: routes[0]",
            )
        ],
        topo(routes=(dyn("a", "b", 0),)),
    ),
    "dynamic-push": (
        reference_checks.check_dynamic_push,
        topo(routes=(dyn("a", "b", 0, push=True),)),
        [
            (
                E,
                "dynamic-push",
                "dynamic route a -> b on 'x' is a push route: dynamic routes are pulled by their destination "
                '(mode = "pull")',
                "t.toml:60: routes[0]",
            )
        ],
        topo(routes=(exr("a", "b", 0, push=True),)),
    ),
    "duplicate-tag": (
        reference_checks.check_dynamic_tags,
        topo(
            nodes=(node("a", 5701, tag="eu"), node("b", 5702, tag="eu")),
            routes=(dyn("a", "b", 0), dyn("b", "a", 1)),
        ),
        [
            (
                E,
                "duplicate-tag",
                "nodes 'a' and 'b' both carry tag 'eu' on 'x': dynamic routing tells nodes apart by tag, "
                "so one of them misses messages; give each its own tag",
                "t.toml:2: nodes.b",
            )
        ],
        topo(routes=(dyn("a", "b", 0), dyn("b", "a", 1))),
    ),
    "unknown-exclude": (
        reference_checks.check_excludes,
        topo(ABC, routes=(dyn("a", "b", 0, excludes=("zz",)), dyn("b", "c", 1))),
        [
            (
                W,
                "unknown-exclude",
                "dynamic route a -> b on 'x' excludes 'zz', which is no node's tag on 'x' (tags: a, b, c): "
                "it excludes nothing",
                "t.toml:60: routes[0]",
            )
        ],
        topo(ABC, routes=(dyn("a", "b", 0, excludes=("c",)), dyn("b", "c", 1))),
    ),
    "federation-mismatch": (
        reference_checks.check_federation_exchanges,
        topo(exchanges=(*ONLY_A, Exchange("b", X, "direct")), federations=(fed("a", "b", 0),)),
        [
            (
                E,
                "federation-mismatch",
                "federation a -> b of 'x' (fanout): 'x' is topic (durable) on a but direct (durable) on b; "
                "both need the same type and flags",
                "t.toml:80: federations[0]",
            )
        ],
        topo(federations=(fed("a", "b", 0),)),
    ),
    "unfederatable": (
        reference_checks.check_unfederatable,
        topo(
            exchanges=(Exchange("a", X, "topic", internal=True),),
            federations=(fed("a", "b", 0), fed("b", "a", 1, exchange="amq.gateway.management")),
        ),
        [
            (
                E,
                "unfederatable",
                "federation a -> b of 'x' (fanout): internal exchange 'x' cannot be federated",
                "t.toml:80: federations[0]",
            ),
            (
                E,
                "unfederatable",
                "federation b -> a of 'amq.gateway.management' (fanout): system exchange "
                "'amq.gateway.management' cannot be federated",
                "t.toml:81: federations[1]",
            ),
        ],
        topo(federations=(fed("a", "b", 0), fed("b", "a", 1, exchange="amq.data"))),
    ),
    "federated-dynamic": (
        reference_checks.check_federated_dynamic,
        topo(ABC, routes=(dyn("a", "b", 0),), federations=(fed("b", "c", 0),)),
        [
            (
                E,
                "federated-dynamic",
                "federation b -> c of 'x' (fanout): 'x' has dynamic routes on b (dynamic route a -> b on 'x'): "
                "an exchange is federated at most once",
                "t.toml:80: federations[0]",
            )
        ],
        topo(ABC, routes=(dyn("a", "b", 0),), federations=(fed("c", "b", 0),)),
    ),
    "static-loop": (
        graph_checks.check_loops,
        topo(ABC, routes=(exr("a", "b", 0), exr("b", "c", 1), exr("c", "a", 2))),
        [
            (
                E,
                "static-loop",
                "messages of 'x' (e.g. key '#') go round a -> b -> c -> a forever: static routes and federations "
                "have no hop limit; break the cycle: delete the exchange route c -> a on 'x' (key '#') or make it "
                "a dynamic route (they never loop)",
                "t.toml:62: routes[2]",
            )
        ],
        # Routes both ways whose keys no message matches both of: no loop.
        topo(ABC, routes=(exr("a", "b", 0, key="to.b"), exr("b", "a", 1, key="to.a"))),
    ),
    "static-loop (federations)": (
        graph_checks.check_loops,
        topo(ABC, federations=(fed("a", "b", 0), fed("b", "c", 1), fed("c", "a", 2))),
        [
            (
                E,
                "static-loop",
                f"messages of 'x' (any key) go round {ring} forever: static routes and federations have no hop "
                "limit; break the cycle: delete the federation c -> a of 'x' (fanout)",
                "t.toml:82: federations[2]",
            )
            for ring in ("a -> b -> c -> a", "a -> c -> b -> a")
        ],
        # A fanout tree: what a child gets back from its parent is never sent up again.
        topo(ABC, federations=(fed("a", "b", 0), fed("c", "b", 1))),
    ),
    "mixed-loop": (
        graph_checks.check_loops,
        topo(routes=(dyn("a", "b", 0), exr("b", "a", 1))),
        [
            (
                W,
                "mixed-loop",
                "messages of 'x' (e.g. key '#') can go round a -> b -> a: the trace of dynamic routes drops a copy "
                "that comes back to a dynamically routed node, but the static hops deliver copies again "
                "(duplicates); break the cycle: delete the exchange route b -> a on 'x' (key '#') or make it a "
                "dynamic route (they never loop)",
                "t.toml:61: routes[1]",
            )
        ],
        topo(routes=(dyn("a", "b", 0), dyn("b", "a", 1))),
    ),
    "dynamic-loop": (
        graph_checks.check_loops,
        topo(ABC, routes=(dyn("a", "b", 0), dyn("b", "c", 1), dyn("c", "a", 2))),
        [
            (
                INFO,
                "dynamic-loop",
                "dynamic routes on 'x' form the cycle a -> b -> c -> a: safe, a message never comes back (its "
                "trace holds the nodes it passed) and interest never loops (adverts carry their path), so no "
                "tag, exclude list or hop limit is needed",
                "t.toml:60: routes[0]",
            )
        ],
        topo(ABC, routes=(dyn("a", "b", 0), dyn("b", "c", 1))),
    ),
    "multiple-paths": (
        graph_checks.check_multiple_paths,
        topo(ABC, routes=(exr("a", "b", 0), exr("b", "c", 1), exr("a", "c", 2))),
        [
            (
                W,
                "multiple-paths",
                "a message of 'x' published on a (e.g. key '#') reaches c over 2 paths (a -> c by exchange; "
                "a -> b -> c by exchange), so c gets it 2 times; keep the first: delete the exchange route "
                "a -> b on 'x' (key '#') or make it a dynamic route (they never loop)",
                "t.toml:60: routes[0]",
            )
        ],
        topo(ABC, routes=(dyn("a", "b", 0), dyn("b", "c", 1), dyn("a", "c", 2))),
    ),
    "multiple-paths (dynamic and exchange route)": (
        graph_checks.check_multiple_paths,
        topo(routes=(dyn("a", "b", 0), exr("a", "b", 1, key="k.#"))),
        [
            (
                W,
                "multiple-paths",
                "a message of 'x' published on a (e.g. key 'k.#') reaches b over 2 paths (a -> b by dynamic; "
                "a -> b by exchange), so b gets it 2 times; keep the first: delete the exchange route a -> b "
                "on 'x' (key 'k.#') or make it a dynamic route (they never loop)",
                "t.toml:61: routes[1]",
            )
        ],
        # b's only binding takes no key the exchange route carries: no copy twice.
        topo(
            routes=(dyn("a", "b", 0), exr("a", "b", 1, key="k.#")),
            bindings=(Binding("b", X, "q", "other.#"),),
        ),
    ),
    "dynamic-paths": (
        graph_checks.check_dynamic_paths,
        topo(ABC, routes=(dyn("a", "b", 0), dyn("b", "c", 1), dyn("a", "c", 2))),
        [
            (
                INFO,
                "dynamic-paths",
                "dynamic routes on 'x' give 1 pair(s) of nodes more than one path (a <-> c): safe, each node "
                "forwards along one best path per destination (the nodes' path-vector interest tables), so every node gets "
                "each message once",
                "t.toml:60: routes[0]",
            )
        ],
        # b does not advertise c's interest to a: one path from a to c.
        topo(ABC, routes=(dyn("a", "b", 0, excludes=("c",)), dyn("b", "c", 1), dyn("a", "c", 2))),
    ),
    "unreached-binding": (
        graph_checks.check_unreached_bindings,
        topo(
            routes=(dyn("a", "b", 0),),
            bindings=(Binding("b", X, "q", "other", where="t.toml:40: bindings[0]"),),
            publishers=(pub("a", "k", 0),),
        ),
        [
            (
                W,
                "unreached-binding",
                "no publisher's messages reach queue 'q' on b through its binding to 'x' (key 'other')",
                "t.toml:40: bindings[0]",
            )
        ],
        topo(routes=(dyn("a", "b", 0),), publishers=(pub("a", "k", 0),)),
    ),
    "no-publishers": (
        graph_checks.check_unreached_bindings,
        topo(),
        [
            (
                INFO,
                "no-publishers",
                "no publishers declared: whether the 2 binding(s) get messages is not checked",
                "",
            )
        ],
        topo(publishers=(pub("a", "k", 0), pub("b", "k", 1))),
    ),
    "unrouted-publisher": (
        graph_checks.check_unrouted_publishers,
        topo(bindings=(), publishers=(pub("a", "k", 0),)),
        [
            (
                W,
                "unrouted-publisher",
                "messages published on a to 'x' with key 'k' reach no queue",
                "t.toml:90: publishers[0]",
            )
        ],
        topo(publishers=(pub("a", "k", 0),)),
    ),
    "cut-off": (
        graph_checks.check_cut_off_nodes,
        topo(("a", "b", "c", "d"), links=(link("a", "b", 0), link("c", "b", 1))),
        [
            (
                W,
                "cut-off",
                "node 'd' is cut off from the rest [a, b, c]: no link, route or federation joins the two",
                "t.toml:4: nodes.d",
            )
        ],
        topo(ABC, links=(link("a", "b", 0), link("c", "b", 1))),
    ),
    "single-point-of-failure": (
        graph_checks.check_articulation_points,
        topo(ABC, links=(link("a", "b", 0), link("c", "b", 1))),
        [
            (
                W,
                "single-point-of-failure",
                "node 'b' is a single point of failure: without it, [a] | [c] cannot reach each other",
                "t.toml:2: nodes.b",
            )
        ],
        topo(ABC, links=(link("a", "b", 0), link("c", "b", 1), link("a", "c", 2))),
    ),
    "bridge": (
        graph_checks.check_bridges,
        topo(ABC, links=(link("a", "b", 0), link("c", "b", 1)), routes=(dyn("a", "b", 0),)),
        [
            (
                W,
                "bridge",
                "the connection a - b (dynamic route a -> b on 'x', link a -> b) is a single point of failure: "
                "without it, [a] | [b, c] cannot reach each other",
                "t.toml:60: routes[0]",
            ),
            (
                W,
                "bridge",
                "the connection b - c (link c -> b) is a single point of failure: without it, [c] | [a, b] "
                "cannot reach each other",
                "t.toml:51: links[1]",
            ),
        ],
        topo(ABC, links=(link("a", "b", 0), link("c", "b", 1), link("a", "c", 2))),
    ),
    "diameter": (
        graph_checks.check_diameter,
        topo(ABC, routes=(dyn("a", "b", 0), dyn("b", "c", 1))),
        [
            (
                INFO,
                "diameter",
                "exchange 'x': a message crosses at most 2 hop(s) (a -> b -> c)",
                "t.toml:60: routes[0]",
            )
        ],
        topo(ABC, links=(link("a", "b", 0),)),
    ),
}


def found(check: Check, topology: Topology) -> list[tuple[str, str, str, str]]:
    return [(f.severity, f.code, f.message, f.where) for f in check(topology)]


@pytest.mark.parametrize("name", CASES)
def test_the_failing_fixture_gives_exactly_these_findings(name: str) -> None:
    check, failing, expected, _ = CASES[name]
    assert found(check, failing) == expected


@pytest.mark.parametrize("name", CASES)
def test_the_passing_fixture_gives_none(name: str) -> None:
    check, _, _, passing = CASES[name]
    assert found(check, passing) == []


def test_every_check_is_listed_and_has_a_fixture() -> None:
    tested = {case[0] for case in CASES.values()}
    assert set(CHECKS) == tested
    assert len(CHECKS) == len(set(CHECKS))


def test_run_checks_puts_errors_first_then_orders_by_line() -> None:
    topology = topo(
        ABC,
        links=(link("a", "z", 0),),
        routes=(dyn("a", "b", 9), dyn("b", "a", 10), exr("b", "b", 1)),
        publishers=(pub("a", "k", 0),),
    )
    findings = run_checks(topology)
    assert has_errors(findings)
    severities = [f.severity for f in findings]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)
    errors = [(f.code, f.where) for f in findings if f.severity == "error"]
    assert errors == [("unknown-node", "t.toml:50: links[0]"), ("self-link", "t.toml:61: routes[1]")]
    assert (
        str(findings[0])
        == "t.toml:50: links[0]: error [unknown-node] link a -> z names node 'z', which is not declared"
    )


def test_a_clean_topology_has_no_errors() -> None:
    findings = run_checks(topo(routes=(dyn("a", "b", 0), dyn("b", "a", 1)), publishers=(pub("a", "k", 0),)))
    assert not has_errors(findings)
    assert [f.code for f in findings] == ["bridge", "diameter"]


@pytest.mark.parametrize("name", ["pair", "ring", "three-regions"])
def test_the_demo_topologies_check_without_errors_or_loops(name: str) -> None:
    loader = pytest.importorskip("topology.loader")
    findings = run_checks(loader.load_topology(ROOT / "configs" / f"topology-{name}.toml"))
    assert not has_errors(findings)
    assert not {f.code for f in findings} & {
        "static-loop",
        "mixed-loop",
        "multiple-paths",
        "unreached-binding",
    }


def test_docs_list_every_code_and_their_examples_are_exact() -> None:
    text = (ROOT / "docs" / "topology-checks.md").read_text()
    findings = [f for check, failing, _, _ in CASES.values() for f in check(failing)]
    produced, codes = {str(f) for f in findings}, {f.code for f in findings}
    headed = {code for line in text.splitlines() if line.startswith("### ") for code in line.split("`")[1::2]}
    assert codes == headed
    examples = [
        line for line in text.splitlines() if line.startswith(("t.toml:", "info [", "error [", "warning ["))
    ]
    assert examples and not set(examples) - produced


def test_tree_shaped_exchanges_skip_the_pairwise_path_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a tree of dynamic routes both ways, with fanout federations up it and a binding on
    every node, no two nodes have two paths: the multiple-paths and dynamic-paths checks see
    that in linear time instead of enumerating every pair's paths (a 200-node hierarchy took
    minutes); a ring still gets its finding (from its bridges, test_topology_checks_scale)."""
    enumerated: list[tuple[str, str]] = []
    real = DynamicRoutes.paths

    def counting(routes: DynamicRoutes, start: str, end: str) -> list[list[str]]:
        enumerated.append((start, end))
        return real(routes, start, end)

    monkeypatch.setattr(DynamicRoutes, "paths", counting)

    def delivering(graphs: Any, start: str, end: str) -> list[Any]:
        enumerated.append((start, end))
        return []

    monkeypatch.setattr(graph_checks, "_delivering_paths", delivering)
    tree = generate(GeneratorSpec("hierarchy", 1, hubs=3, edges=3, fanout_federation="sim.fanout"))
    bound = tuple(
        Binding(node, exchange, "q", "#") for node in tree.nodes for exchange in ("sim.topic", "sim.fanout")
    )
    tree = replace(tree, bindings=bound)
    assert list(graph_checks.check_multiple_paths(tree)) == []
    assert list(graph_checks.check_dynamic_paths(tree)) == []
    assert enumerated == []
    ring = generate(GeneratorSpec("ring-of-regions", 1, hubs=3, edges=1))
    assert [f.code for f in graph_checks.check_dynamic_paths(ring)] == ["dynamic-paths"]
