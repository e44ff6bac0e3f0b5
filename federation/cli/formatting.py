"""Management records turned into the exact text qpid-route and qpid-config print.

Pure functions from records (docs/federation-design.md, "Management") to lines, so every layout
is tested against golden text without a node. Layouts follow the MRG Messaging guide's examples
(seed 001) where it shows them, and qpid's tools where it does not; see docs/cli.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Record = Mapping[str, Any]

#: link list: (caption, width) per column; the last column is as wide as its text.
_LINK_COLUMNS = (("Host", 16), ("Port", 8), ("Transport", 10), ("Durable", 9), ("State", 18))
_LINK_RULE_WIDTH = 77
_QUEUE_RULE_WIDTH = 91
#: The summary's labels are right-aligned to the width of its widest, "Total Exchanges".
_SUMMARY_LABEL_WIDTH = 15
#: How a binding to the nameless default exchange names it.
_DEFAULT_EXCHANGE = "''"


def yes_no(value: object) -> str:
    """Y or N, as both tools print flags."""
    return "Y" if value else "N"


def route_peer(route: Record) -> str:
    """The host:port at the other end of a route's link. A route lives on the node that opens
    its link: the destination for a pull route, the source for a push (src_local) route."""
    return str(route["dest"] if route.get("src_local") else route["src"])


def route_key_text(route: Record) -> str:
    """The fourth field of `route list`: the key, `<dynamic>`, or nothing for a queue route
    (which has no key; qpid-route prints it empty too, and `route map` shows the queue)."""
    if route["kind"] == "dynamic":
        return "<dynamic>"
    if route["kind"] == "queue":
        return ""
    return str(route.get("key") or "")


def route_description(route: Record) -> str:
    """How messages, -v and duplicate warnings name a route: `exchange(key)` or
    `exchange(queue)`, empty parentheses for a dynamic route."""
    if route["kind"] == "queue":
        return f"{route['exchange']}({route['queue']})"
    return f"{route['exchange']}({route.get('key') or ''})"


# -- amq-route ------------------------------------------------------------------------------


def link_table(links: Sequence[Record]) -> list[str]:
    """`link list`: the fixed-width table, or "No Links Found"."""
    if not links:
        return ["No Links Found"]
    header = "".join(caption.ljust(width) for caption, width in _LINK_COLUMNS) + "Last Error"
    lines = [header, "=" * _LINK_RULE_WIDTH]
    for link in links:
        # Durable sits under the middle of its caption; the state keeps its padding even when
        # there is no last error, as qpid-route's rows do.
        lines.append(
            f"{link['host']:<16}{link['port']:<8}{link['transport']:<13}{yes_no(link['durable'])}     "
            f"{link['state']:<18}{link.get('last_error') or ''}"
        )
    return lines


def route_list(node: str, routes: Iterable[Record]) -> list[str]:
    """`route list`: `<node> <peer> <exchange> <key>` per route on the node."""
    return [f"{node} {route_peer(route)} {route['exchange']} {route_key_text(route)}" for route in routes]


def map_probe(node: str, failure: str | None) -> str:
    """One line of `route map`'s walk: the node and Ok, or why it could not be read."""
    return f"{node}... {failure or 'Ok'}"


def map_routes(routes_by_node: Sequence[tuple[str, Sequence[Record]]]) -> list[str]:
    """`route map`'s two sections for the routes found on every node reached, in walk order."""
    return [*_dynamic_section(routes_by_node), "", *_static_section(routes_by_node)]


def _dynamic_section(routes_by_node: Sequence[tuple[str, Sequence[Record]]]) -> list[str]:
    """Dynamic routes per exchange, as node pairs: a route from A into B and one from B into A
    are one reciprocal pair `A <=> B` (named in the order first met), a lone one `A  => B`."""
    pairs: dict[str, dict[tuple[str, str], bool]] = {}
    for node, routes in routes_by_node:
        for route in routes:
            if route["kind"] != "dynamic":
                continue
            known = pairs.setdefault(route["exchange"], {})
            source = route_peer(route)
            if (node, source) in known:
                known[(node, source)] = True
            else:
                known.setdefault((source, node), False)
    lines = ["Dynamic Routes:"]
    if not pairs:
        return [*lines, "none found"]
    for exchange, known in pairs.items():
        lines += ["", f"Exchange {exchange}:"]
        lines += [f"{a} {'<=>' if both else ' =>'} {b}" for (a, b), both in known.items()]
    return lines


def _static_section(routes_by_node: Sequence[tuple[str, Sequence[Record]]]) -> list[str]:
    """Exchange and queue routes, each from the side of the node that holds it."""
    lines = [
        _static_route(node, route)
        for node, routes in routes_by_node
        for route in routes
        if route["kind"] != "dynamic"
    ]
    if not lines:
        return ["Static Routes:", "none found"]
    return ["Static Routes:", "", *lines]


def _static_route(node: str, route: Record) -> str:
    """`dest(ex=X) <= src(ex=X) key=K` for a pull route, `src(...) => dest(...)` for a push one,
    with `queue=Q` on the source side of a queue route."""
    here, there = f"ex={route['exchange']}", f"ex={route['exchange']}"
    push = bool(route.get("src_local"))
    if route["kind"] == "queue":
        if push:
            here = f"queue={route['queue']}"
        else:
            there = f"queue={route['queue']}"
    line = f"{node}({here}) {'=>' if push else '<='} {route_peer(route)}({there})"
    if route["kind"] == "queue":
        return line
    return f"{line} key={route.get('key') or ''}"


# -- amq-config -----------------------------------------------------------------------------


def summary(exchanges: Sequence[Record], queues: Sequence[Record]) -> list[str]:
    """The view without a command: exchanges per type and queues by durability, the labels
    right-aligned; types in the order the node lists them."""
    per_type: dict[str, int] = {}
    for exchange in exchanges:
        per_type[exchange["type"]] = per_type.get(exchange["type"], 0) + 1
    durable = sum(1 for queue in queues if queue["durable"])
    rows = [
        ("Total Exchanges", len(exchanges)),
        *per_type.items(),
        ("Total Queues", len(queues)),
        ("durable", durable),
        ("non-durable", len(queues) - durable),
    ]
    return ["", *(f"{label:>{_SUMMARY_LABEL_WIDTH}}: {number}" for label, number in rows)]


def exchange_table(exchanges: Sequence[Record]) -> list[str]:
    """`exchanges`: type, name and the options that would recreate each one."""
    width = max([len("Exchange Name"), *(len(exchange["name"]) for exchange in exchanges)])
    lines = [f"{'Type':<10}{'Exchange Name':<{width}}  Attributes", "=" * (5 * ((width + 10) // 5 + 5))]
    for exchange in exchanges:
        attributes = []
        if exchange["durable"]:
            attributes.append("--durable")
        if exchange.get("alternate_exchange"):
            attributes.append(f"--alternate-exchange={exchange['alternate_exchange']}")
        lines.append(f"{exchange['type']:<10}{exchange['name']:<{width}}  {' '.join(attributes)}".rstrip())
    return lines


def exchange_bindings(exchanges: Sequence[Record], bindings: Sequence[Record]) -> list[str]:
    """`-b exchanges`: each exchange, then one ` bind <key> => <destination>` per binding."""
    lines = []
    for exchange in exchanges:
        lines.append(f"Exchange '{exchange['name']}' ({exchange['type']})")
        lines += [
            f" bind {binding['routing_key']} => {binding['destination']}"
            for binding in bindings
            if binding["exchange"] == exchange["name"]
        ]
    return lines


def queue_bindings(queues: Sequence[Record], bindings: Sequence[Record]) -> list[str]:
    """`-b queues`: each queue, then one ` bind <key> => <exchange>` per binding to it."""
    lines = []
    for queue in queues:
        lines.append(f"Queue '{queue['name']}'")
        lines += [
            f" bind {binding['routing_key']} => {binding['exchange'] or _DEFAULT_EXCHANGE}"
            for binding in bindings
            if binding["destination_kind"] == "queue" and binding["destination"] == queue["name"]
        ]
    return lines


def queue_table(queues: Sequence[Record]) -> list[str]:
    """`queues`: qpid-config's columns, with Messages (the queue's depth) where qpid showed the
    journal geometry "Store Size (files x file pages)", which has no meaning for our store."""
    lines = [
        "",
        "Durable  AutoDel  Excl  Bindings  Messages  Queue Name",
        "=" * _QUEUE_RULE_WIDTH,
    ]
    for queue in queues:
        lines.append(
            f"  {yes_no(queue['durable'])}        {yes_no(queue['auto_delete'])}      "
            f"{yes_no(queue['exclusive'])}     {queue['bindings']:>5}     {queue['messages']:>8}  {queue['name']}"
        )
    return lines
