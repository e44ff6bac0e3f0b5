"""topology.plan's diff on live states built in code, topology.apply against recording fake
nodes, and topology.live's reading: creates, changes, deletes, prune, what is never pruned,
unreachable nodes, and requests identical to what amq-config and amq-route send."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import trio

from federation.address import BrokerAddress
from federation.cli import config_cli, route_cli, route_options
from federation.cli.common import broker_address as address
from federation.management_client import ManagementFailed
from federation.requests import RouteOptions
from gateway.names import STANDARD_EXCHANGES
from topology.apply import apply_plan
from topology.changes import Plan, ordered_requests
from topology.live import LiveNode, LiveState, read_live
from topology.model import Binding, Credentials, Exchange, Federation, Link, Node, Queue, Route, Topology
from topology.plan import diff

A, B = "127.0.0.1:5701", "127.0.0.1:5702"
#: The names the nodes report, as `amq-gateway up` starts them; any other address is a node
#: outside the file.
NAMES = {A: "a", B: "b"}


def name_at(endpoint: str) -> str:
    """The name the node at `endpoint` reports."""
    return NAMES.get(endpoint, f"node-at-{endpoint}")


def topology(**changes: Any) -> Topology:
    """Two nodes: b pulls fed.topic dynamically from a, pushes amq.topic(global.#) to a, and
    federates `events` to a; b's queue `orders` takes fed.topic's orders.#."""
    base = Topology(
        name="pair",
        path="pair.toml",
        nodes={
            "a": Node("a", "127.0.0.1", 5701, tag="eu"),
            "b": Node("b", "127.0.0.1", 5702),
        },
        exchanges=(
            Exchange("a", "fed.topic", "topic"),
            Exchange("b", "fed.topic", "topic"),
            Exchange("a", "events", "fanout"),
            Exchange("b", "events", "fanout"),
        ),
        queues=(Queue("b", "orders"),),
        bindings=(Binding("b", "fed.topic", "orders", "orders.#"),),
        links=(Link("b", "a"),),
        routes=(
            Route("dynamic", source="a", destination="b", exchange="fed.topic", excludes=("us",)),
            Route(
                "exchange",
                source="b",
                destination="a",
                exchange="amq.topic",
                key="global.#",
                push=True,
                ack=10,
            ),
        ),
        federations=(Federation("b", "a", "events", "fanout"),),
    )
    return replace(base, **changes)


# -- live records, shaped as the management operations return them ---------------------------


def exchange(name: str, kind: str, durable: bool = True, **flags: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "durable": durable,
        "auto_delete": flags.get("auto_delete", False),
        "internal": flags.get("internal", False),
        "alternate_exchange": None,
        "arguments": {},
        "bindings": 0,
    }


def queue(name: str, durable: bool = True, **fields: Any) -> dict[str, Any]:
    record = {
        "name": name,
        "durable": durable,
        "auto_delete": False,
        "exclusive": False,
        "messages": 0,
        "dropped": 0,
        "consumers": 0,
        "bindings": 1,
        "arguments": {},
    }
    return {**record, **fields}


def binding(exchange: str, queue: str, key: str, **arguments: Any) -> dict[str, Any]:
    return {
        "exchange": exchange,
        "destination_kind": "queue",
        "destination": queue,
        "routing_key": key,
        "arguments": arguments,
    }


def link(endpoint: str, durable: bool = True, state: str = "Operational") -> dict[str, Any]:
    """A link that reached its peer (it records the peer's name)."""
    host, _, port = endpoint.rpartition(":")
    return {
        "host": host,
        "port": int(port),
        "transport": "tcp",
        "durable": durable,
        "state": state,
        "last_error": "",
        "node": name_at(endpoint),
        "connected_since": 0,
        "reconnects": 0,
    }


def route(
    here: str, there: str, kind: str, exchange: str, push: bool = False, **fields: Any
) -> dict[str, Any]:
    record = {
        "kind": kind,
        "dest": there if push else here,
        "src": here if push else there,
        "exchange": exchange,
        "key": None,
        "queue": None,
        "tag": None,
        "excludes": [],
        "durable": True,
        "src_local": push,
        "ack": 100,
        "credit": 1000,
        "messages": 0,
        "bytes": 0,
        "in_flight": 0,
        "last_transfer": None,
        "last_error": "",
    }
    return {**record, **fields}


def federation(exchange: str, parent: str, kind: str, **fields: Any) -> dict[str, Any]:
    record = {
        "exchange": exchange,
        "vhost": "/",
        "type": kind,
        "parent": parent,
        "login": "peering",
        "durable": True,
        "source": "runtime",
        "state": "Operational",
        "last_error": "",
        "parent_node": name_at(parent),
        "outbox": {"messages": 0, "limit": 100000, "policy": "block", "dropped": 0},
        "forwarded": 0,
        "received": 0,
        "returned": 0,
    }
    return {**record, **fields}


def built_in() -> list[dict[str, Any]]:
    return [exchange(name, kind) for name, kind in STANDARD_EXCHANGES]


def empty() -> LiveNode:
    """A node just started: built-in exchanges, the default exchange's bindings, a management
    reply queue."""
    reply = queue("amq.gen-reply", durable=False, exclusive=True, auto_delete=True)
    return LiveNode(
        exchanges=built_in(), queues=[reply], bindings=[binding("", "amq.gen-reply", "amq.gen-reply")]
    )


def applied() -> dict[str, LiveNode]:
    """What the nodes hold once `topology()` is applied, with what federation made itself."""
    a = LiveNode(
        name="a",
        exchanges=[*built_in(), exchange("fed.topic", "topic"), exchange("events", "fanout")],
        queues=[
            queue("federation.b.events"),
            queue("federation.bridge.b.fed.topic", durable=False, exclusive=True, auto_delete=True),
        ],
        bindings=[
            binding("events", "federation.b.events", ""),
            binding("fed.topic", "federation.bridge.b.fed.topic", "orders.#"),
            binding("", "federation.b.events", "federation.b.events"),
        ],
    )
    b = LiveNode(
        name="b",
        exchanges=[*built_in(), exchange("fed.topic", "topic"), exchange("events", "fanout")],
        queues=[queue("orders"), queue("federation.outbox.events"), queue("federation.a.amq.topic.global.#")],
        bindings=[
            binding("", "orders", "orders"),
            binding("fed.topic", "orders", "orders.#"),
            binding("amq.topic", "federation.a.amq.topic.global.#", "global.#"),
        ],
        links=[link(A)],
        routes=[
            route(B, A, "dynamic", "fed.topic", excludes=["us"]),
            route(B, A, "exchange", "amq.topic", push=True, key="global.#", ack=10),
        ],
        federations=[federation("events", A, "fanout")],
    )
    return {"a": a, "b": b}


def state(**nodes: LiveNode | str) -> LiveState:
    return LiveState(dict(nodes))


def requests(plan: Plan) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (plan.changes[index].node, method, arguments)
        for index, (method, arguments) in ordered_requests(plan.changes)
    ]


# -- plans ------------------------------------------------------------------------------------

EMPTY_PLAN = """\
Node a (127.0.0.1:5701):
  + exchange fed.topic (topic, durable)
  + exchange events (fanout, durable)

Node b (127.0.0.1:5702):
  + exchange fed.topic (topic, durable)
  + exchange events (fanout, durable)
  + queue orders (durable)
  + binding fed.topic -> orders key "orders.#"
  + link to a 127.0.0.1:5701 (durable, tcp)
  + route dynamic fed.topic <= a 127.0.0.1:5701 (durable, ack 100, credit 1000, excludes ["us"])
  + route exchange amq.topic(global.#) => a 127.0.0.1:5701 (durable, push, ack 10, credit 1000)
  + federation events => a 127.0.0.1:5701 (fanout, durable)

Plan: 10 to create, 0 to change, 0 to delete."""


def test_a_plan_on_empty_nodes_creates_everything_in_dependency_order() -> None:
    plan = diff(topology(), state(a=empty(), b=empty()), prune=False)
    assert "\n".join(plan.lines()) == EMPTY_PLAN
    assert plan.complete and not plan.drift
    assert [(node, method) for node, method, _ in requests(plan)] == [
        ("a", "exchanges.add"),
        ("a", "exchanges.add"),
        ("b", "exchanges.add"),
        ("b", "exchanges.add"),
        ("b", "queues.add"),
        ("b", "bindings.add"),
        ("b", "links.add"),
        ("b", "routes.add"),
        ("b", "routes.add"),
        ("b", "federations.add"),
    ]


def test_the_plan_of_applied_nodes_is_no_changes_even_with_prune() -> None:
    for prune in (False, True):
        plan = diff(topology(), state(**applied()), prune=prune)
        assert plan.lines() == ["No changes. The live nodes match pair.toml."]
        assert plan.changes == [] and plan.drift == []


def test_requests_are_what_amq_config_and_amq_route_send() -> None:
    """Each request equals the one the CLI command doing the same thing sends."""
    plan = diff(topology(), state(a=empty(), b=empty()), prune=False)
    sent = {(node, method, str(sorted(arguments.items()))) for node, method, arguments in requests(plan)}
    recorder = Recorder(lists_added=True)
    config = [
        (A, "add exchange topic fed.topic --durable"),
        (A, "add exchange fanout events --durable"),
        (B, "add exchange topic fed.topic --durable"),
        (B, "add exchange fanout events --durable"),
        (B, "add queue orders --durable"),
        (B, "bind fed.topic orders orders.#"),
    ]
    for node, command in config:
        assert config_cli.main(["-a", node, *command.split()], connect=recorder.connect) == 0
    # amq-route's commands, past its argument parser (the options and arguments it would make).
    durable = route_options.Options(
        verbose=False, quiet=False, del_empty_link=False, timeout=10.0, route=RouteOptions(durable=True)
    )
    pushed = replace(durable, route=replace(durable.route, src_local=True, ack=10))
    steps = [
        (route_cli.add_link, durable, {"dest": address(B), "src": address(A)}),
        (
            partial(route_cli.exchange_route, "dynamic", add=True),
            durable,
            {"dest": address(B), "src": address(A), "exchange": "fed.topic", "tag": None, "excludes": "us"},
        ),
        (
            partial(route_cli.exchange_route, "exchange", add=True),
            pushed,
            {"dest": address(A), "src": address(B), "exchange": "amq.topic", "key": "global.#"},
        ),
        (
            route_cli.federate_add,
            durable,
            {"child": address(B), "parent": route_cli.parent_address(A), "exchange": "events", "vhost": "/"}
            | {"type": "fanout"},
        ),
    ]
    for handler, options, arguments in steps:
        context = route_options.Context(options, recorder.connect)
        assert trio.run(handler, context, argparse.Namespace(**arguments)) == 0
    by_cli = {
        ({A: "a", B: "b"}[node], method, str(sorted(arguments.items())))
        for node, method, arguments in recorder.requests
        if not method.endswith(".list") and method != "node.info"  # reads
    }
    assert sent == by_cli


def test_a_node_tag_is_sent_as_the_tag_of_its_routes() -> None:
    nodes = topology().nodes
    tagged = topology(nodes={"a": nodes["a"], "b": replace(nodes["b"], tag="west")})
    plan = diff(tagged, state(a=empty(), b=empty()), prune=False)
    tags = [arguments.get("tag") for _, method, arguments in requests(plan) if method == "routes.add"]
    assert tags == ["west", "west"]
    own = topology(routes=(replace(topology().routes[0], tag="mine"),))
    plan = diff(own, state(a=empty(), b=empty()), prune=False)
    assert [arguments["tag"] for _, method, arguments in requests(plan) if method == "routes.add"] == ["mine"]


def test_links_and_federations_log_in_with_the_files_credentials() -> None:
    admin = Credentials("admin", "admin", "secret")
    nodes = topology().nodes
    plan = diff(
        topology(nodes={"a": replace(nodes["a"], credentials=admin), "b": nodes["b"]}),
        state(a=empty(), b=empty()),
        prune=False,
    )
    sent = {method: arguments for _, method, arguments in requests(plan)}
    assert (sent["links.add"]["username"], sent["links.add"]["password"]) == ("admin", "secret")
    assert (sent["federations.add"]["username"], sent["federations.add"]["password"]) == ("admin", "secret")
    default = diff(topology(), state(a=empty(), b=empty()), prune=False)
    sent = {method: arguments for _, method, arguments in requests(default)}
    assert (sent["links.add"]["username"], sent["federations.add"]["username"]) == ("guest", None)


# -- drift: changed objects ---------------------------------------------------------------------


def changed_nodes() -> dict[str, LiveNode]:
    """a's `events` is a topic exchange, b's `orders` is not durable, b's dynamic route has other
    excludes and b's link is transient."""
    nodes = applied()
    a, b = nodes["a"], nodes["b"]
    a.exchanges[-1] = exchange("events", "topic")
    b.queues[0] = queue("orders", durable=False)
    b.routes[0] = route(B, A, "dynamic", "fed.topic", excludes=["asia"], credit=5)
    b.links[0] = link(A, durable=False)
    return nodes


CHANGED_PLAN = """\
Node a (127.0.0.1:5701):
  ! exchange events: cannot be changed in place: apply --prune deletes and creates it
      type: "topic" -> "fanout"

Node b (127.0.0.1:5702):
  ! queue orders: cannot be changed in place: apply --prune deletes and creates it
      durable: false -> true
  ! link to a 127.0.0.1:5701: cannot be changed in place: apply --prune deletes and creates it
      durable: false -> true
  ! route dynamic fed.topic <= a 127.0.0.1:5701: cannot be changed in place: apply --prune deletes and creates it
      credit: 5 -> 1000
      excludes: ["asia"] -> ["us"]

4 difference(s) (!) need --prune: apply --prune deletes and creates them.
Plan: 0 to create, 0 to change, 0 to delete."""


def test_changes_that_need_delete_and_create_are_drift_without_prune() -> None:
    plan = diff(topology(), state(**changed_nodes()), prune=False)
    assert "\n".join(plan.lines()) == CHANGED_PLAN
    assert plan.changes == [] and len(plan.errors) == 4


CHANGED_PRUNE_PLAN = """\
Node a (127.0.0.1:5701):
  ~ exchange events (delete and create: it cannot be changed in place)
      type: "topic" -> "fanout"

Node b (127.0.0.1:5702):
  ~ queue orders (delete and create: it cannot be changed in place)
      durable: false -> true
  + binding fed.topic -> orders key "orders.#"
  ~ link to a 127.0.0.1:5701 (delete and create: it cannot be changed in place)
      durable: false -> true
  + route dynamic fed.topic <= a 127.0.0.1:5701 (durable, ack 100, credit 1000, excludes ["us"])
  + route exchange amq.topic(global.#) => a 127.0.0.1:5701 (durable, push, ack 10, credit 1000)

Plan: 3 to create, 3 to change, 0 to delete."""


def test_with_prune_changed_objects_are_replaced_with_what_hangs_on_them() -> None:
    """The queue's binding and the link's routes go with them, so they are created again."""
    plan = diff(topology(), state(**changed_nodes()), prune=True)
    assert "\n".join(plan.lines()) == CHANGED_PRUNE_PLAN
    assert [
        (node, method, arguments.get("name", arguments.get("host")))
        for node, method, arguments in requests(plan)
    ] == [
        ("b", "links.delete", "127.0.0.1"),
        ("b", "queues.delete", "orders"),
        ("a", "exchanges.delete", "events"),
        ("a", "exchanges.add", "events"),
        ("b", "queues.add", "orders"),
        ("b", "bindings.add", None),
        ("b", "links.add", "127.0.0.1"),
        ("b", "routes.add", "127.0.0.1"),
        ("b", "routes.add", "127.0.0.1"),
    ]
    assert ("queues.delete", {"name": "orders", "if_empty": True, "if_unused": True}) in plan.changes[
        1
    ].requests


def test_routes_on_a_replaced_exchange_are_created_again() -> None:
    nodes = applied()
    nodes["b"].exchanges[-2] = exchange("fed.topic", "topic", durable=False)
    plan = diff(topology(), state(**nodes), prune=True)
    assert [(change.action, change.kind, change.name) for change in plan.changes] == [
        ("change", "exchange", "fed.topic"),
        ("create", "binding", 'fed.topic -> orders key "orders.#"'),
        ("change", "route", "dynamic fed.topic <= a 127.0.0.1:5701"),
    ]
    assert plan.changes[2].detail == ["its exchange fed.topic is deleted and created again"]


def test_built_in_exchanges_are_never_changed() -> None:
    plan = diff(
        topology(exchanges=(Exchange("b", "amq.topic", "fanout"),), bindings=(), routes=(), federations=()),
        state(**applied()),
        prune=True,
    )
    errors = [(drift.node, drift.name, drift.message) for drift in plan.errors]
    assert errors == [("b", "amq.topic", "a built-in exchange cannot be changed")]
    assert plan.lines()[-2:] == [
        "1 difference(s) (!) apply cannot make: see each line.",
        "Plan: 0 to create, 0 to change, 8 to delete.",
    ]
    assert not any(change.kind == "exchange" and change.name.startswith("amq.") for change in plan.changes)


def test_a_federation_to_another_parent_or_of_another_type() -> None:
    nodes = applied()
    nodes["b"].federations[0] = federation("events", "127.0.0.1:5799", "subscriber")
    plan = diff(topology(), state(**nodes), prune=True)
    (change,) = plan.changes
    assert change.lines() == [
        "  ~ federation events => a 127.0.0.1:5701 (delete and create: it cannot be changed in place)",
        '      parent: "127.0.0.1:5799" -> "127.0.0.1:5701"',
        '      type: "subscriber" -> "fanout"',
    ]
    assert change.requests[0] == (
        "federations.delete",
        {"host": "127.0.0.1", "port": 5799, "exchange": "events", "vhost": "/"},
    )
    nodes["b"].federations[0]["source"] = "config"
    plan = diff(topology(), state(**nodes), prune=True)
    assert plan.changes == []
    assert plan.errors[0].message == "federated by the node's configuration: change it there"


# -- drift: objects the file does not declare ----------------------------------------------------


def extra_nodes() -> dict[str, LiveNode]:
    nodes = applied()
    a, b = nodes["a"], nodes["b"]
    a.exchanges.append(exchange("scratch", "direct", durable=False))
    a.queues.append(queue("leftover", messages=3))
    a.bindings.append(binding("amq.topic", "leftover", "#"))
    a.links.append(link(B, durable=False))
    a.routes.append(route(A, B, "queue", "amq.fanout", queue="public"))
    b.federations.append(federation("amq.data", A, "fanout"))
    return nodes


EXTRA_PLAN = """\
Node a (127.0.0.1:5701):
  ? exchange scratch (direct, transient): not in the file (kept: apply --prune deletes it)
  ? queue leftover (durable, 3 message(s)): not in the file (kept: apply --prune deletes it)
  ? binding amq.topic -> leftover key "#": not in the file (kept: apply --prune deletes it)
  ? link to b 127.0.0.1:5702 (transient, tcp): not in the file (kept: apply --prune deletes it)
  ? route queue amq.fanout(public) <= b 127.0.0.1:5702 (durable, ack 100, credit 1000): not in the file (kept: apply --prune deletes it)

Node b (127.0.0.1:5702):
  ? federation amq.data => a 127.0.0.1:5701 (fanout): not in the file (kept: apply --prune deletes it)

6 object(s) (?) not in the file are kept: apply --prune deletes them.
Plan: 0 to create, 0 to change, 0 to delete."""

EXTRA_PRUNE_PLAN = """\
Node a (127.0.0.1:5701):
  - exchange scratch (direct, transient)
  - queue leftover (durable, 3 message(s))
  - binding amq.topic -> leftover key "#"
  - link to b 127.0.0.1:5702 (transient, tcp)
  - route queue amq.fanout(public) <= b 127.0.0.1:5702 (durable, ack 100, credit 1000)

Node b (127.0.0.1:5702):
  - federation amq.data => a 127.0.0.1:5701 (fanout)

Plan: 0 to create, 0 to change, 6 to delete."""


def test_extra_objects_are_kept_without_prune_and_deleted_with_it() -> None:
    kept = diff(topology(), state(**extra_nodes()), prune=False)
    assert "\n".join(kept.lines()) == EXTRA_PLAN
    assert kept.changes == [] and kept.errors == []
    pruned = diff(topology(), state(**extra_nodes()), prune=True)
    assert "\n".join(pruned.lines()) == EXTRA_PRUNE_PLAN
    assert [(node, method) for node, method, _ in requests(pruned)] == [
        ("b", "federations.delete"),
        ("a", "routes.delete"),
        ("a", "links.delete"),
        ("a", "bindings.delete"),
        ("a", "queues.delete"),
        ("a", "exchanges.delete"),
    ]
    assert requests(pruned)[1][2] == {
        "host": "127.0.0.1",
        "port": 5702,
        "kind": "queue",
        "exchange": "amq.fanout",
        "queue": "public",
    }


def test_what_is_not_the_topologys_is_never_pruned() -> None:
    """Built-in and system exchanges, federation's queues, server-named and exclusive queues,
    the default exchange's bindings and protected queues' bindings, links, routes and
    federations to nodes outside the file, and federations from the node's configuration."""
    outside = "10.9.9.9:5672"
    nodes = applied()
    a = nodes["a"]
    a.queues.extend(
        [
            queue("amq.gen-abc", durable=False, exclusive=True),
            queue("federation.outbox.x"),
            queue("client-private", durable=False, exclusive=True),
        ]
    )
    a.bindings.extend(
        [
            binding("", "client-private", "client-private"),
            binding("amq.topic", "client-private", "#"),
            binding("amq.fanout", "federation.outbox.x", ""),
            {**binding("amq.topic", "amq.fanout", "x"), "destination_kind": "exchange"},
        ]
    )
    a.links.append(link(outside))
    a.routes.append(route(A, outside, "dynamic", "fed.topic"))
    a.federations.append(federation("amq.service", outside, "service"))
    a.federations.append(federation("amq.data", B, "fanout", source="config"))
    plan = diff(topology(), state(**nodes), prune=True)
    assert plan.lines() == ["No changes. The live nodes match pair.toml."]


def test_an_extra_binding_on_a_declared_queue_is_pruned_but_not_its_default_binding() -> None:
    nodes = applied()
    nodes["b"].bindings.append(binding("amq.topic", "orders", "all.#"))
    plan = diff(topology(), state(**nodes), prune=True)
    assert [change.lines() for change in plan.changes] == [['  - binding amq.topic -> orders key "all.#"']]
    assert plan.changes[0].requests == [
        ("bindings.delete", {"exchange": "amq.topic", "queue": "orders", "routing_key": "all.#"})
    ]


def test_headers_bindings_are_compared_with_their_arguments() -> None:
    match = {"x-match": "all", "region": "eu"}
    nodes = applied()
    nodes["b"].bindings.append(binding("amq.match", "orders", "", **match))
    declared = (*topology().bindings, Binding("b", "amq.match", "orders", "", dict(match)))
    assert diff(topology(bindings=declared), state(**nodes), prune=True).changes == []
    other = (*topology().bindings, Binding("b", "amq.match", "orders", "", {"x-match": "any"}))
    plan = diff(topology(bindings=other), state(**nodes), prune=True)
    assert [(change.action, change.name) for change in plan.changes] == [
        ("create", 'amq.match -> orders key "" arguments {"x-match": "any"}'),
        ("delete", 'amq.match -> orders key "" arguments {"region": "eu", "x-match": "all"}'),
    ]
    assert plan.changes[0].requests == [
        (
            "bindings.add",
            {"exchange": "amq.match", "queue": "orders", "routing_key": "", "arguments": {"x-match": "any"}},
        )
    ]


# -- nodes known by the name they report -------------------------------------------------------

#: Node a as b reached it: another address of the same node (the file says 127.0.0.1).
A_LOCALHOST = "localhost:5701"


def linked_as_localhost() -> dict[str, LiveNode]:
    """`applied()`, with b's link, routes and federation to a made as localhost:5701: a
    reported its name there, so the link and the peering record it."""
    nodes = applied()
    b = nodes["b"]
    b.links[0] = {**link(A_LOCALHOST), "node": "a"}
    b.routes[:] = [
        {**record, "src" if not record["src_local"] else "dest": A_LOCALHOST} for record in b.routes
    ]
    b.federations[0] = federation("events", A_LOCALHOST, "fanout", parent_node="a")
    return nodes


def test_what_another_address_of_a_node_made_matches_the_file() -> None:
    for prune in (False, True):
        plan = diff(topology(), state(**linked_as_localhost()), prune=prune)
        assert plan.lines() == ["No changes. The live nodes match pair.toml."]


def test_routes_are_planned_on_the_link_the_node_has_whatever_its_address() -> None:
    nodes = linked_as_localhost()
    b = nodes["b"]
    del b.routes[0]  # the dynamic route
    b.routes.append(route("127.0.0.1:5702", A_LOCALHOST, "queue", "amq.fanout", queue="public"))
    plan = diff(topology(), state(**nodes), prune=True)
    assert plan.lines() == [
        "Node b (127.0.0.1:5702):",
        '  + route dynamic fed.topic <= a localhost:5701 (durable, ack 100, credit 1000, excludes ["us"])',
        "  - route queue amq.fanout(public) <= a localhost:5701 (durable, ack 100, credit 1000)",
        "",
        "Plan: 1 to create, 0 to change, 1 to delete.",
    ]
    assert [(method, arguments["host"], arguments["port"]) for _, method, arguments in requests(plan)] == [
        ("routes.delete", "localhost", 5701),
        ("routes.add", "localhost", 5701),
    ]


def test_a_replaced_link_is_made_at_the_files_address_with_its_routes() -> None:
    nodes = linked_as_localhost()
    nodes["b"].links[0]["durable"] = False
    plan = diff(topology(), state(**nodes), prune=True)
    assert [(method, arguments["host"]) for _, method, arguments in requests(plan)] == [
        ("links.delete", "localhost"),
        ("links.add", "127.0.0.1"),
        ("routes.add", "127.0.0.1"),
        ("routes.add", "127.0.0.1"),
    ]


def test_a_second_link_to_a_node_under_another_address_is_extra() -> None:
    nodes = applied()
    nodes["b"].links.append({**link(A_LOCALHOST), "node": "a", "durable": False})
    plan = diff(topology(), state(**nodes), prune=True)
    assert [line for change in plan.changes for line in change.lines()] == [
        "  - link to a localhost:5701 (transient, tcp)"
    ]
    assert plan.changes[0].requests == [("links.delete", {"host": "localhost", "port": 5701})]


def test_a_federation_whose_parent_reports_its_name_at_another_address_matches() -> None:
    nodes = applied()
    nodes["b"].federations[0] = federation("events", A_LOCALHOST, "subscriber", parent_node="a")
    plan = diff(topology(), state(**nodes), prune=True)
    (change,) = plan.changes
    assert change.lines() == [
        "  ~ federation events => a localhost:5701 (delete and create: it cannot be changed in place)",
        '      type: "subscriber" -> "fanout"',
    ]


UNNAMED_PLAN = """\
Node b (127.0.0.1:5702):
  + link to a 127.0.0.1:5701 (durable, tcp)
  + route dynamic fed.topic <= a 127.0.0.1:5701 (durable, ack 100, credit 1000, excludes ["us"])
  + route exchange amq.topic(global.#) => a 127.0.0.1:5701 (durable, push, ack 10, credit 1000)
  ! federation events => a 127.0.0.1:5701: cannot be changed in place: apply --prune deletes and creates it
      parent: "localhost:5701" -> "127.0.0.1:5701"
  * localhost:5701 gave no name (not reached yet, or not an amq-gateway node): matched by address, it is no node of the file

1 difference(s) (!) need --prune: apply --prune deletes and creates them.
Plan: 3 to create, 0 to change, 0 to delete."""


def test_a_far_end_that_gave_no_name_is_matched_by_address_and_the_plan_says_so() -> None:
    """Named 127.0.0.1:5701 in the file and never reached as localhost:5701, a is two nodes to
    the planner: it plans the file's link and routes, and says why."""
    nodes = linked_as_localhost()
    b = nodes["b"]
    b.links[0]["node"] = None
    b.federations[0]["parent_node"] = None
    plan = diff(topology(), state(**nodes), prune=False)
    assert "\n".join(plan.lines()) == UNNAMED_PLAN
    # Reached at the file's address, a far end without a name is the file's node there.
    nodes = applied()
    nodes["b"].links[0]["node"] = None
    assert diff(topology(), state(**nodes), prune=True).lines() == [
        "No changes. The live nodes match pair.toml."
    ]


def test_a_node_reporting_another_name_than_the_files_is_matched_by_that_name() -> None:
    nodes = linked_as_localhost()
    nodes["a"] = replace(nodes["a"], name="alpha")
    nodes["b"].links[0]["node"] = "alpha"
    nodes["b"].federations[0]["parent_node"] = "alpha"
    del nodes["a"].exchanges[-1]
    del nodes["b"].routes[0]
    plan = diff(topology(), state(**nodes), prune=False)
    assert plan.lines() == [
        "Node a (127.0.0.1:5701, reports name 'alpha'):",
        "  + exchange events (fanout, durable)",
        "",
        "Node b (127.0.0.1:5702):",
        '  + route dynamic fed.topic <= a localhost:5701 (durable, ack 100, credit 1000, excludes ["us"])',
        "",
        "Plan: 2 to create, 0 to change, 0 to delete.",
    ]


# -- unreachable nodes ------------------------------------------------------------------------------


def test_an_unreachable_node_is_reported_and_nothing_is_planned_for_it() -> None:
    plan = diff(topology(), state(a=applied()["a"], b="ConnectFailed - Connection refused"), prune=True)
    assert not plan.complete
    assert plan.unreachable == {"b": "ConnectFailed - Connection refused"}
    assert plan.lines() == [
        "Node b (127.0.0.1:5702): not read: ConnectFailed - Connection refused",
        "",
        "1 node(s) could not be read: nothing is planned for them, and apply refuses to run until every "
        "node answers.",
        "Plan: 0 to create, 0 to change, 0 to delete.",
    ]


async def test_apply_refuses_an_incomplete_plan() -> None:
    plan = diff(topology(), state(a=empty(), b="Timeout - no reply"), prune=False)
    recorder = Recorder()
    result = await apply_plan(plan, say=pytest.fail, connect=recorder.connect)
    assert (result.ok, result.applied) == (False, 0)
    assert result.failure == "nothing applied: cannot read b (Timeout - no reply)"
    assert recorder.requests == []


# -- apply ------------------------------------------------------------------------------------------


class Recorder:
    """Fake nodes by host:port: every request recorded, lists empty, refusals by method."""

    def __init__(
        self,
        refusals: dict[tuple[str, str], ManagementFailed] | None = None,
        down: frozenset[str] = frozenset(),
        lists_added: bool = False,
    ) -> None:
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        #: Whether exchanges.list and queues.list show amq.topic and those added (else: empty).
        self.lists_added = lists_added
        self.connected: list[BrokerAddress] = []
        self.refusals = refusals or {}
        self.down = down

    @asynccontextmanager
    async def connect(self, address: BrokerAddress, timeout: float) -> AsyncIterator[Any]:
        name = str(BrokerAddress(address.host, address.port))
        if name in self.down:
            raise ManagementFailed("ConnectFailed", "Connection refused")
        self.connected.append(address)
        recorder = self

        class Client:
            async def call(self, method: str, arguments: dict[str, Any] | None = None) -> Any:
                recorder.requests.append((name, method, arguments or {}))
                if (name, method) in recorder.refusals:
                    raise recorder.refusals[(name, method)]
                if method == "federations.add":  # the record amq-route -v prints
                    parent = f"{arguments['host']}:{arguments['port']}" if arguments else ""
                    return {**(arguments or {}), "parent": parent}
                if recorder.lists_added and method in ("exchanges.list", "queues.list"):
                    added = [
                        a["name"] for n, m, a in recorder.requests if (n, m) == (name, f"{method[:-5]}.add")
                    ]
                    return [{"name": found} for found in ["amq.topic", *added]]
                return [] if method.endswith(".list") else {}

        yield Client()


async def test_apply_sends_the_requests_in_order_and_says_each() -> None:
    plan = diff(topology(), state(**extra_nodes()), prune=True)
    plan.changes += diff(topology(), state(a=empty(), b=empty()), prune=False).changes
    said: list[str] = []
    recorder = Recorder()
    result = await apply_plan(plan, say=said.append, connect=recorder.connect)
    assert (result.ok, result.failure, result.applied) == (True, "", 16)
    expected = [({"a": A, "b": B}[node], method, arguments) for node, method, arguments in requests(plan)]
    assert recorder.requests == expected
    assert said[:2] == [
        "b: deleted federation amq.data => a 127.0.0.1:5701",
        "a: deleted route queue amq.fanout(public) <= b 127.0.0.1:5702",
    ]
    assert said[-1] == "b: created federation events => a 127.0.0.1:5701"
    assert len(said) == 16
    assert {(a.host, a.port, a.username) for a in recorder.connected} == {
        ("127.0.0.1", 5701, "guest"),
        ("127.0.0.1", 5702, "guest"),
    }


async def test_apply_stops_at_the_first_refusal_with_the_nodes_message() -> None:
    plan = diff(topology(), state(a=empty(), b=empty()), prune=False)
    refusal = ManagementFailed("NOT_FOUND", "no exchange 'fed.topic' in vhost '/'")
    recorder = Recorder({(B, "bindings.add"): refusal})
    said: list[str] = []
    result = await apply_plan(plan, say=said.append, connect=recorder.connect)
    assert not result.ok
    assert result.failure == (
        'b: creating binding fed.topic -> orders key "orders.#": Failed: NOT_FOUND - no exchange '
        "'fed.topic' in vhost '/'"
    )
    assert result.applied == 5 and len(said) == 5
    assert recorder.requests[-1][1] == "bindings.add"


async def test_apply_reports_an_unreachable_node_as_a_failure() -> None:
    plan = diff(topology(), state(a=empty(), b=empty()), prune=False)
    result = await apply_plan(plan, say=lambda _: None, connect=Recorder(down={B}).connect)
    assert not result.ok and result.applied == 2
    assert result.failure == "b: creating exchange fed.topic: Failed: ConnectFailed - Connection refused"


async def test_apply_with_drift_it_cannot_fix_is_not_ok() -> None:
    plan = diff(topology(), state(**changed_nodes()), prune=False)
    said: list[str] = []
    result = await apply_plan(plan, say=said.append, connect=Recorder().connect)
    assert (result.ok, result.applied) == (False, 0)
    assert result.failure == "4 difference(s) (!) left as they are: apply --prune makes them"
    assert said[:2] == [
        "a: ! exchange events: cannot be changed in place: apply --prune deletes and creates it",
        '      type: "topic" -> "fanout"',
    ]


# -- reading live nodes -----------------------------------------------------------------------------


async def test_read_live_reads_every_node_and_records_why_one_could_not_be_read() -> None:
    recorder = Recorder(down={B})
    live = await read_live(topology(), timeout=3, connect=recorder.connect)
    assert live.nodes == {"a": LiveNode(), "b": "ConnectFailed - Connection refused"}
    assert [method for _, method, _ in recorder.requests] == [
        "exchanges.list",
        "queues.list",
        "bindings.list",
        "links.list",
        "routes.list",
        "federations.list",
        "node.info",
    ]
    assert live.unreachable() == {"b": "ConnectFailed - Connection refused"}
    assert not live.all_operational()


def test_all_operational_needs_every_node_link_and_peering_operational() -> None:
    assert LiveState(applied()).all_operational()
    nodes = applied()
    nodes["b"].links[0]["state"] = "Waiting"
    assert not LiveState(nodes).all_operational()
    nodes = applied()
    nodes["b"].federations[0]["state"] = "Connecting"
    assert not LiveState(nodes).all_operational()
    view = applied()["b"].view
    assert (view.links, view.routes, view.federations) == (
        applied()["b"].links,
        applied()["b"].routes,
        applied()["b"].federations,
    )


async def test_apply_of_a_plan_without_changes_sends_nothing_and_says_so() -> None:
    plan = diff(topology(), state(**applied()), prune=True)
    said: list[str] = []
    recorder = Recorder()
    result = await apply_plan(plan, say=said.append, connect=recorder.connect)
    assert (result.ok, result.applied, recorder.connected) == (True, 0, [])
    assert said == ["No changes. The live nodes match pair.toml."]
