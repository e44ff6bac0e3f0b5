"""The planner's declaration checks: references, duplicates, addresses and the rules the nodes
enforce when the topology is applied (each refusal found here, before anything is changed).

Each check is `check_<name>(topology) -> Iterator[Finding]`; topology.checks lists them all.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

from federation.formatting import route_selector
from gateway.routing.bindings import binding_identity
from topology.graph import declarations, describe, dynamic_tags
from topology.model import (
    Binding,
    Exchange,
    Federation,
    Finding,
    Link,
    Publisher,
    Queue,
    Route,
    Topology,
    federatable,
)

LOOPBACK = {"localhost": "127.0.0.1", "::1": "127.0.0.1", "[::1]": "127.0.0.1"}


def label(decl: Any) -> str:
    """Any declaration as findings name it."""
    if isinstance(decl, Exchange):
        return f"exchange '{decl.name}'"
    if isinstance(decl, Queue):
        return f"queue '{decl.name}'"
    if isinstance(decl, Binding):
        return f"binding of queue '{decl.queue}' to '{decl.exchange}'"
    if isinstance(decl, Publisher):
        return f"publisher to '{decl.exchange}' (key '{decl.key}')"
    return describe(decl)


def node_references(decl: Any) -> tuple[str, ...]:
    if isinstance(decl, Link):
        return (decl.peer, decl.opener)
    if isinstance(decl, Route):
        return (decl.source, decl.destination)
    if isinstance(decl, Federation):
        return (decl.child, decl.parent)
    return (decl.node,)


def every_declaration(topology: Topology) -> Iterator[Any]:
    for group in ("exchanges", "queues", "bindings", "links", "routes", "federations", "publishers"):
        yield from getattr(topology, group)


def _known(topology: Topology, *nodes: str) -> bool:
    return all(node in topology.nodes for node in nodes)


# -- references -----------------------------------------------------------------------------------


def check_unknown_nodes(topology: Topology) -> Iterator[Finding]:
    for decl in every_declaration(topology):
        for node in dict.fromkeys(node_references(decl)):
            if node not in topology.nodes:
                yield Finding(
                    "error",
                    "unknown-node",
                    f"{label(decl)} names node '{node}', which is not declared",
                    decl.where,
                )


def _exchange_references(topology: Topology) -> Iterator[tuple[Any, str, str]]:
    """(declaration, node, exchange) for every exchange a declaration needs (dynamic routes are
    check_dynamic_exchanges')."""
    for binding in topology.bindings:
        yield binding, binding.node, binding.exchange
    for publisher in topology.publishers:
        yield publisher, publisher.node, publisher.exchange
    for route in topology.routes:
        if route.kind == "exchange":
            yield route, route.source, route.exchange
        if route.kind != "dynamic":
            yield route, route.destination, route.exchange
    for federation in topology.federations:
        yield federation, federation.child, federation.exchange
        yield federation, federation.parent, federation.exchange


def check_unknown_exchanges(topology: Topology) -> Iterator[Finding]:
    for decl, node, name in _exchange_references(topology):
        if _known(topology, node) and topology.exchange(node, name) is None:
            yield Finding(
                "error", "unknown-exchange", f"{label(decl)}: no exchange '{name}' on {node}", decl.where
            )


def check_unknown_queues(topology: Topology) -> Iterator[Finding]:
    needed: list[tuple[Binding | Route, str, str]] = [(b, b.node, b.queue) for b in topology.bindings]
    needed += [(r, r.source, r.queue or "") for r in topology.routes if r.kind == "queue"]
    for decl, node, name in needed:
        if _known(topology, node) and topology.queue(node, name) is None:
            yield Finding("error", "unknown-queue", f"{label(decl)}: no queue '{name}' on {node}", decl.where)


# -- duplicates -----------------------------------------------------------------------------------


def _twice(items: Iterable[Any], identity: Callable[[Any], Hashable]) -> Iterator[tuple[Any, Any]]:
    """(first, repeat) for every declaration whose identity an earlier one has."""
    first: dict[Hashable, Any] = {}
    for item in items:
        earlier = first.setdefault(identity(item), item)
        if earlier is not item:
            yield earlier, item


def check_duplicate_nodes(topology: Topology) -> Iterator[Finding]:
    for first, repeat in _twice(topology.nodes.values(), lambda node: node.name.casefold()):
        yield Finding(
            "error",
            "duplicate-node",
            f"nodes '{first.name}' and '{repeat.name}' differ only in case: their data directories "
            f"./var/{first.name} and ./var/{repeat.name} are one on case-insensitive file systems",
            repeat.where,
        )


def check_duplicate_exchanges_and_queues(topology: Topology) -> Iterator[Finding]:
    for code, items in (("duplicate-exchange", topology.exchanges), ("duplicate-queue", topology.queues)):
        for first, repeat in _twice(items, lambda decl: (decl.node, decl.name)):
            message = f"{label(repeat)} is declared twice on {repeat.node} (first at {first.where})"
            yield Finding("error", code, message, repeat.where)


def check_duplicate_bindings(topology: Topology) -> Iterator[Finding]:
    def identity(b: Binding) -> Hashable:
        return (b.node, b.exchange, b.queue, binding_identity(b.key, b.arguments))

    for first, repeat in _twice(topology.bindings, identity):
        message = (
            f"{label(repeat)} with key '{repeat.key}' is declared twice on {repeat.node} "
            f"(first at {first.where}): it makes one binding"
        )
        yield Finding("warning", "duplicate-binding", message, repeat.where)


def check_duplicate_links(topology: Topology) -> Iterator[Finding]:
    for first, repeat in _twice(topology.links, lambda link: (link.opener, link.peer)):
        message = f"{describe(repeat)} is declared twice (first at {first.where}): one link per pair of nodes"
        yield Finding("error", "duplicate-link", message, repeat.where)


def check_duplicate_routes(topology: Topology) -> Iterator[Finding]:
    def identity(r: Route) -> Hashable:
        return (r.holder, r.far_end, r.kind, r.exchange, route_selector(r.kind, r.key, r.queue))

    for first, repeat in _twice(topology.routes, identity):
        message = (
            f"{describe(repeat)} is declared twice (first at {first.where}): "
            "the node refuses the second as a duplicate"
        )
        yield Finding("error", "duplicate-route", message, repeat.where)


def check_federated_twice(topology: Topology) -> Iterator[Finding]:
    for first, repeat in _twice(topology.federations, lambda f: (f.child, f.exchange)):
        if first.parent == repeat.parent:
            message = f"{describe(repeat)} is declared twice (first at {first.where})"
            yield Finding("error", "duplicate-federation", message, repeat.where)
            continue
        message = (
            f"exchange '{repeat.exchange}' of {repeat.child} is federated twice, to {first.parent} "
            f"(at {first.where}) and to {repeat.parent}: an exchange is federated at most once"
        )
        yield Finding("error", "federated-twice", message, repeat.where)


# -- addresses and rules the nodes enforce ------------------------------------------------------------


def check_shared_endpoints(topology: Topology) -> Iterator[Finding]:
    def address(node: Any) -> Hashable:
        host = node.host.lower()
        return (LOOPBACK.get(host, host), node.port)

    for first, repeat in _twice(topology.nodes.values(), address):
        message = f"nodes '{first.name}' and '{repeat.name}' both listen on {repeat.endpoint}"
        yield Finding("error", "shared-endpoint", message, repeat.where)


def check_self_links(topology: Topology) -> Iterator[Finding]:
    for decl in declarations(topology):
        start, end = node_references(decl)
        if start == end:
            message = f"{describe(decl)} connects {start} to itself: a node refuses to link to itself"
            yield Finding("error", "self-link", message, decl.where)


def check_durable_routes(topology: Topology) -> Iterator[Finding]:
    links = {(link.opener, link.peer): link for link in topology.effective_links()}
    for route in topology.routes:
        link = links.get((route.holder, route.far_end))
        if route.durable and link is not None and not link.durable:
            made_by = "" if link in topology.links else ", made by a non-durable route"
            message = (
                f"durable {describe(route)} rides on the non-durable {describe(link)} ({link.where}{made_by}): "
                "the node refuses it; make the link durable or the route durable = false"
            )
            yield Finding("error", "transient-link", message, route.where)


def _shape(exchange: Exchange) -> str:
    flags = ["durable" if exchange.durable else "transient"]
    flags += ["auto-delete"] * exchange.auto_delete + ["internal"] * exchange.internal
    return f"{exchange.type} ({', '.join(flags)})"


def _same_shape(one: Exchange, two: Exchange) -> bool:
    return (one.type, one.durable, one.auto_delete, one.internal) == (
        two.type,
        two.durable,
        two.auto_delete,
        two.internal,
    )


def check_dynamic_exchanges(topology: Topology) -> Iterator[Finding]:
    for route in topology.routes:
        if route.kind != "dynamic" or not _known(topology, route.source, route.destination):
            continue
        source = topology.exchange(route.source, route.exchange)
        destination = topology.exchange(route.destination, route.exchange)
        for node, exchange in ((route.source, source), (route.destination, destination)):
            if exchange is None:
                message = (
                    f"{describe(route)}: no exchange '{route.exchange}' on {node} (needed on both nodes)"
                )
                yield Finding("error", "dynamic-missing", message, route.where)
        if source and destination and not _same_shape(source, destination):
            message = (
                f"{describe(route)}: '{route.exchange}' is {_shape(source)} on {route.source} but "
                f"{_shape(destination)} on {route.destination}; both need the same type and flags"
            )
            yield Finding("error", "dynamic-mismatch", message, route.where)


def check_dynamic_push(topology: Topology) -> Iterator[Finding]:
    for route in topology.routes:
        if route.kind == "dynamic" and route.push:
            message = f'{describe(route)} is a push route: dynamic routes are pulled by their destination (mode = "pull")'
            yield Finding("error", "dynamic-push", message, route.where)


def check_federation_exchanges(topology: Topology) -> Iterator[Finding]:
    for federation in topology.federations:
        child = topology.exchange(federation.child, federation.exchange)
        parent = topology.exchange(federation.parent, federation.exchange)
        if child is None or parent is None or federation.exchange.startswith("amq."):
            continue
        if not _same_shape(child, parent):
            message = (
                f"{describe(federation)}: '{federation.exchange}' is {_shape(child)} on {federation.child} "
                f"but {_shape(parent)} on {federation.parent}; both need the same type and flags"
            )
            yield Finding("error", "federation-mismatch", message, federation.where)


def check_unfederatable(topology: Topology) -> Iterator[Finding]:
    for federation in topology.federations:
        exchange = topology.exchange(federation.child, federation.exchange)
        reason = federatable(exchange or Exchange(federation.child, federation.exchange, "direct"))
        if reason is not None:
            yield Finding("error", "unfederatable", f"{describe(federation)}: {reason}", federation.where)


def check_federated_dynamic(topology: Topology) -> Iterator[Finding]:
    # The first dynamic route on each (exchange, node), looked up per federation (a scan of
    # every route per federation took 6 s at 10,000 nodes).
    first: dict[tuple[str, str], Route] = {}
    for route in topology.routes:
        if route.kind == "dynamic":
            for node in (route.source, route.destination):
                first.setdefault((route.exchange, node), route)
    for federation in topology.federations:
        clash = first.get((federation.exchange, federation.child))
        if clash is not None:
            message = (
                f"{describe(federation)}: '{federation.exchange}' has dynamic routes on "
                f"{federation.child} ({describe(clash)}): an exchange is federated at most once"
            )
            yield Finding("error", "federated-dynamic", message, federation.where)


def _dynamic_nodes(topology: Topology, exchange: str) -> list[str]:
    nodes = [
        n
        for r in topology.routes
        if r.kind == "dynamic" and r.exchange == exchange
        for n in (r.source, r.destination)
    ]
    return [node for node in dict.fromkeys(nodes) if node in topology.nodes]


def check_dynamic_tags(topology: Topology) -> Iterator[Finding]:
    for exchange in dict.fromkeys(r.exchange for r in topology.routes if r.kind == "dynamic"):
        tags = dynamic_tags(topology, exchange)
        for first, repeat in _twice(_dynamic_nodes(topology, exchange), tags.__getitem__):
            message = (
                f"nodes '{first}' and '{repeat}' both carry tag '{tags[repeat]}' on '{exchange}': dynamic "
                "routing tells nodes apart by tag, so one of them misses messages; give each its own tag"
            )
            yield Finding("error", "duplicate-tag", message, topology.nodes[repeat].where)


def check_excludes(topology: Topology) -> Iterator[Finding]:
    known: dict[str, list[str]] = {}  # each exchange's tags, worked out once (not per route)
    for route in topology.routes:
        if route.kind != "dynamic" or not route.excludes:
            continue
        if route.exchange not in known:
            tags = dynamic_tags(topology, route.exchange)
            known[route.exchange] = sorted({tags[node] for node in _dynamic_nodes(topology, route.exchange)})
        for tag in route.excludes:
            if tag not in known[route.exchange]:
                message = (
                    f"{describe(route)} excludes '{tag}', which is no node's tag on '{route.exchange}' "
                    f"(tags: {', '.join(known[route.exchange])}): it excludes nothing"
                )
                yield Finding("warning", "unknown-exclude", message, route.where)
