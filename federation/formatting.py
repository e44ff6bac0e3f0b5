"""Management records turned into the exact text qpid-route and qpid-config print.

Pure functions from records (docs/federation-design.md, "Management") to lines, so every layout
is tested against golden text without a node. Layouts follow the MRG Messaging guide's examples
(seed 001) where it shows them, and qpid's tools where it does not; see docs/cli.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from federation.address import BrokerAddress
from gateway.names import DEFAULT_VHOST

Record = Mapping[str, Any]

#: A table's (caption, least width) per column; the last column is as wide as its text.
Columns = Sequence[tuple[str, int]]

_LINK_COLUMNS = (
    ("Host", 16),
    ("Port", 8),
    ("Node", 10),
    ("Transport", 10),
    ("Durable", 9),
    ("State", 18),
    ("Last Error", 0),
)
_LINK_RULE_WIDTH = 77
#: federate list: the least widths fit the captions and every type, source and state; the
#: other columns grow with their cells.
_FEDERATION_COLUMNS = (
    ("Exchange", 10),
    ("Type", 12),
    ("Parent", 8),
    ("Source", 9),
    ("State", 13),
    ("Outbox", 8),
    ("Forwarded", 11),
    ("Received", 10),
    ("Returned", 10),
    ("Last Error", 0),
)
_QUEUE_RULE_WIDTH = 91
#: The summary's labels are right-aligned to the width of its widest, "Total Exchanges".
_SUMMARY_LABEL_WIDTH = 15
#: How a binding to the nameless default exchange names it.
_DEFAULT_EXCHANGE = "''"


def yes_no(value: object) -> str:
    """Y or N, as both tools print flags."""
    return "Y" if value else "N"


def table(columns: Columns, rows: Sequence[Sequence[str]], rule: int = 0) -> list[str]:
    """qpid-route's fixed-width table: the captions, a rule of "=" (`rule` wide, or as wide as
    the captions if longer), then the rows. Each column but the last is padded to its width,
    widened to keep two spaces after its longest cell (qpid's ran into the next column); the
    last is as wide as its text."""
    widths = [
        max([width, *(len(row[index]) + 2 for row in rows)]) for index, (_, width) in enumerate(columns[:-1])
    ]

    def line(cells: Sequence[str]) -> str:
        return "".join(cell.ljust(width) for cell, width in zip(cells[:-1], widths, strict=True)) + cells[-1]

    header = line([caption for caption, _ in columns])
    return [header, "=" * max(rule, len(header)), *(line(row) for row in rows)]


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


def route_selector(kind: str, key: str | None, queue: str | None) -> str | None:
    """What tells routes of one kind and exchange on a link apart (qpid-route's rule): an
    exchange route's key, a queue route's queue (None for a dynamic route, which has neither)."""
    return key if kind == "exchange" else queue


def route_label(exchange: str, selector: str | None) -> str:
    """How messages, -v and duplicate warnings name a route: `exchange(key)` or
    `exchange(queue)`, empty parentheses for a dynamic route."""
    return f"{exchange}({selector or ''})"


def route_description(route: Record) -> str:
    """`route_label` of a route record."""
    return route_label(route["exchange"], route_selector(route["kind"], route.get("key"), route.get("queue")))


def traffic(messages: object, size: object) -> str:
    """`3 messages, 120 bytes`: what a route or a federation's direction forwarded."""
    return f"{messages} messages, {size} bytes"


def state_text(record: Record) -> str:
    """`Operational`, or `Failed since 2026-11-26 14:02:11 UTC: <last error>` (Waiting alike):
    a route's or federation's state (federation.health) as the listings show it."""
    state = str(record["state"])
    if state == "Operational":
        return state
    when = f" since {_since(record)}" if record.get("since") else ""
    error = record.get("last_error")
    return f"{state}{when}: {error}" if error else f"{state}{when}"


def _since(record: Record) -> str:
    """When a record's state began, in UTC (nodes and operators may be in other zones)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record["since"]))


def route_status(record: Record) -> str:
    """`  [<state>; <traffic>]` after a route's line; nothing for a record that was not read
    from a running node (no `since`: the offline map's, planned from a file)."""
    if "since" not in record:
        return ""
    return f"  [{state_text(record)}; {traffic(record['messages'], record['bytes'])}]"


def federation_status(record: Record) -> str:
    """`  [<state>; forwarded <traffic>; received <traffic>]` after a federation's map line;
    nothing for a record that was not read from a running node (no `since`)."""
    if "since" not in record:
        return ""
    forwarded = traffic(record["forwarded"], record.get("forwarded_bytes", 0))
    received = traffic(record["received"], record.get("received_bytes", 0))
    return f"  [{state_text(record)}; forwarded {forwarded}; received {received}]"


#: Which of a pair's states `route map` shows: the least healthy.
_STATE_RANK = {"Operational": 0, "Waiting": 1, "Failed": 2}


def _pair_status(routes: Sequence[Record]) -> str:
    """A dynamic pair's status: the least healthy route's state, the traffic of both."""
    if any("since" not in route for route in routes):
        return ""
    worst = max(routes, key=lambda route: _STATE_RANK.get(str(route["state"]), 0))
    total = {
        **worst,
        "messages": sum(int(route["messages"]) for route in routes),
        "bytes": sum(int(route["bytes"]) for route in routes),
    }
    return route_status(total)


# -- amq-route ------------------------------------------------------------------------------


def link_table(links: Sequence[Record]) -> list[str]:
    """`link list`: the fixed-width table, or "No Links Found"."""
    if not links:
        return ["No Links Found"]
    # The state keeps its padding even when there is no last error, as qpid-route's rows do.
    rows = [
        [
            str(link["host"]),
            str(link["port"]),
            # The name the peer gave when it was last reached: which node the address is.
            str(link.get("node") or "-"),
            str(link["transport"]),
            # Durable sits under the middle of its caption, as in qpid-route's rows.
            f"   {yes_no(link['durable'])}",
            str(link["state"]),
            link.get("last_error") or "",
        ]
        for link in links
    ]
    return table(_LINK_COLUMNS, rows, rule=_LINK_RULE_WIDTH)


#: `link list --stats`: each counter's caption and record field (docs/federation.md, "Counters").
_LINK_COUNTERS = (
    ("Msgs In", "messages_in"),
    ("Msgs Out", "messages_out"),
    ("Bytes In", "bytes_in"),
    ("Bytes Out", "bytes_out"),
)


def link_stats(links: Sequence[Record]) -> list[str]:
    """`link list --stats`: each link's state, what its routes and federations carried each way
    since the node started, the seconds it was not Operational and the seconds in its state."""
    if not links:
        return ["No Links Found"]
    rows = [
        [
            str(link["host"]),
            str(link["port"]),
            str(link["state"]),
            *(str(link[field]) for _, field in _LINK_COUNTERS),
            f"{link['down_seconds']:.1f}",
            f"{link['state_seconds']:.1f}",
        ]
        for link in links
    ]
    captions = ["Host", "Port", "State", *(caption for caption, _ in _LINK_COUNTERS), "Down s", "In State s"]
    return counter_table(captions, 3, rows)


def counter_table(captions: Sequence[str], labels: int, rows: Sequence[Sequence[str]]) -> list[str]:
    """A `--stats` listing: the first `labels` columns left-aligned, the counters after them
    right-aligned under their captions, two spaces apart, a rule of "=" under the captions."""
    widths = [
        max([len(caption), *(len(row[index]) for row in rows)]) for index, caption in enumerate(captions)
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(width) if index < labels else cell.rjust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    header = line(captions)
    return [header, "=" * len(header), *(line(row) for row in rows)]


def federation_parent(federation: Record) -> BrokerAddress:
    """A federations.list record's parent (`host:port`, an IPv6 host with or without brackets)
    as an address without credentials; its str() is how listings name the node."""
    host, _, port = str(federation["parent"]).rpartition(":")
    return BrokerAddress(host.removeprefix("[").removesuffix("]"), int(port))


def exchange_in_vhost(federation: Record) -> str:
    """A federation's or a route's exchange, with its vhost when that is not the default one."""
    if federation.get("vhost", DEFAULT_VHOST) == DEFAULT_VHOST:
        return str(federation["exchange"])
    return f"{federation['exchange']} (vhost {federation['vhost']})"


def federation_line(child: str, federation: Record) -> str:
    """`child => parent exchange (type)`: how `route map` and -v name a federation (without the
    type when the record has none, as when naming one to delete)."""
    line = f"{child} => {federation_parent(federation)} {exchange_in_vhost(federation)}"
    return f"{line} ({federation['type']})" if federation.get("type") else line


def _federation_source(federation: Record) -> str:
    """Where a federation comes from, which says whether it outlives a restart: config (the
    node's configuration, applied at every start), durable (added with -d, stored) or runtime."""
    if federation["source"] == "config":
        return "config"
    return "durable" if federation["durable"] else "runtime"


def _outbox_cell(outbox: Record) -> str:
    """`messages/limit`, and how many the drop-oldest policy dropped when it dropped any."""
    text = f"{outbox['messages']}/{outbox['limit']}"
    return f"{text} ({outbox['dropped']} dropped)" if outbox.get("dropped") else text


def _count_cell(messages: object, size: object) -> str:
    """Messages, and their bytes when the record has them: `3 (120 B)`."""
    return f"{messages} ({size} B)" if size is not None else str(messages)


def _since_error(record: Record) -> str:
    """Last Error of a row not Operational: the error and since when the state holds."""
    error = str(record.get("last_error") or "")
    if record["state"] == "Operational" or not record.get("since"):
        return error
    return f"{error} (since {_since(record)})" if error else f"since {_since(record)}"


def federation_table(federations: Sequence[Record]) -> list[str]:
    """`federate list`: link list's table for the node's federated exchanges, or
    "No Federations Found"."""
    if not federations:
        return ["No Federations Found"]
    rows = [
        [
            exchange_in_vhost(federation),
            str(federation["type"]),
            node_label(str(federation_parent(federation)), federation.get("parent_node")),
            _federation_source(federation),
            str(federation["state"]),
            _outbox_cell(federation["outbox"]),
            _count_cell(federation["forwarded"], federation.get("forwarded_bytes")),
            _count_cell(federation["received"], federation.get("received_bytes")),
            str(federation["returned"]),
            _since_error(federation),
        ]
        for federation in federations
    ]
    return table(_FEDERATION_COLUMNS, rows)


def route_list(node: str, routes: Iterable[Record]) -> list[str]:
    """`route list`: `<node> <peer> <exchange> <key>` per route on the node (the exchange with
    its vhost when not the default one)."""
    return [
        f"{node} {route_peer(route)} {exchange_in_vhost(route)} {route_key_text(route)}{route_status(route)}"
        for route in routes
    ]


def map_probe(node: str, failure: str | None, name: str | None = None) -> str:
    """One line of `route map`'s walk: the node (with the name it gave) and Ok, or why it
    could not be read."""
    return f"{node_label(node, name)}... {failure or 'Ok'}"


def node_label(address: str, name: str | None) -> str:
    """`host:port (name)`: a node as the listings name it, by the name it reports where known
    (two addresses may reach one node: localhost:5672 and 127.0.0.1:5672)."""
    return f"{address} ({name})" if name else address


def map_routes(routes_by_node: Sequence[tuple[str, Sequence[Record]]]) -> list[str]:
    """`route map`'s two sections for the routes found on every node reached, in walk order."""
    return [*_dynamic_section(routes_by_node), "", *_static_section(routes_by_node)]


def map_federations(federations_by_node: Sequence[tuple[str, Sequence[Record]]]) -> list[str]:
    """`route map`'s federation section, one `child => parent exchange (type)` per federated
    exchange found, in walk order; nothing at all without any, so a map of routes alone keeps
    qpid-route's text."""
    lines = [
        federation_line(node, federation) + federation_status(federation)
        for node, federations in federations_by_node
        for federation in federations
    ]
    return ["", "Federations:", "", *lines] if lines else []


def _dynamic_section(routes_by_node: Sequence[tuple[str, Sequence[Record]]]) -> list[str]:
    """Dynamic routes per exchange, as node pairs: a route from A into B and one from B into A
    are one reciprocal pair `A <=> B` (named in the order first met), a lone one `A  => B`."""
    pairs: dict[str, dict[tuple[str, str], list[Record]]] = {}
    for node, routes in routes_by_node:
        for route in routes:
            if route["kind"] != "dynamic":
                continue
            known = pairs.setdefault(route["exchange"], {})
            source = route_peer(route)
            known.setdefault((node, source) if (node, source) in known else (source, node), []).append(route)
    lines = ["Dynamic Routes:"]
    if not pairs:
        return [*lines, "none found"]
    for exchange, known in pairs.items():
        lines += ["", f"Exchange {exchange}:"]
        lines += [
            f"{a} {'<=>' if len(routes) > 1 else ' =>'} {b}{_pair_status(routes)}"
            for (a, b), routes in known.items()
        ]
    return lines


def _static_section(routes_by_node: Sequence[tuple[str, Sequence[Record]]]) -> list[str]:
    """Exchange and queue routes, each from the side of the node that holds it."""
    lines = [
        static_route_line(node, route) + route_status(route)
        for node, routes in routes_by_node
        for route in routes
        if route["kind"] != "dynamic"
    ]
    if not lines:
        return ["Static Routes:", "none found"]
    return ["Static Routes:", "", *lines]


def static_route_line(node: str, route: Record) -> str:
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


def node_status(info: Record) -> list[str]:
    """`node`: the node's name, connections, resource alarms, and the message bodies it keeps
    in its spill file (management's node.info)."""
    lines = [
        f"Node:        {info['name']}",
        f"Connections: {info['connections']} ({info.get('blocked_connections', 0)} blocked)",
    ]
    memory = info.get("memory")
    if memory is not None:
        lines.append(
            f"Memory:      {_size(memory['used'])} used, high watermark {_size(memory['high_watermark'])},"
            f" alarm {'ON: publishers held' if memory['alarm'] else 'off'}"
        )
    disk = info.get("disk")
    if disk is not None:
        lines.append(
            f"Disk:        {_size(disk['free'])} free, limit {_size(disk['free_limit'])},"
            f" alarm {'ON: publishers of persistent messages held' if disk['alarm'] else 'off'}"
        )
    spill = info.get("spill")
    if spill is not None:
        lines.append(
            f"Spill:       {spill['bodies']} bodies, {_size(spill['bytes'])} (emptied at every start)"
        )
    return lines


def _size(count: int) -> str:
    """Bytes in the largest binary unit that keeps a number of at least 1."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


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


#: `exchanges --stats` and `queues --stats`: each counter's caption and record field.
_EXCHANGE_COUNTERS = (
    ("Published", "published"),
    ("Routed", "routed"),
    ("Unroutable", "unroutable"),
    ("Looping", "dropped_looping"),
)
_QUEUE_COUNTERS = (
    ("Enqueued", "enqueued"),
    ("Delivered", "delivered"),
    ("Acked", "acknowledged"),
    ("Dead-lettered", "dead_lettered"),
    ("Dropped", "dropped"),
    ("Messages", "messages"),
)


def exchange_stats(exchanges: Sequence[Record]) -> list[str]:
    """`exchanges --stats`: per exchange, messages published to it since the node started,
    those routed, unroutable, and dropped by dynamic routing as looping."""
    return _named_counters("Exchange Name", exchanges, _EXCHANGE_COUNTERS)


def queue_stats(queues: Sequence[Record]) -> list[str]:
    """`queues --stats`: per queue, messages enqueued, delivered, acknowledged, dead-lettered
    and dropped by its length limit since the node started (or the queue was made), and its
    depth."""
    return _named_counters("Queue Name", queues, _QUEUE_COUNTERS)


def _named_counters(
    caption: str, records: Sequence[Record], counters: Sequence[tuple[str, str]]
) -> list[str]:
    rows = [
        [str(record["name"]) or _DEFAULT_EXCHANGE, *(str(record[field]) for _, field in counters)]
        for record in records
    ]
    return counter_table([caption, *(caption for caption, _ in counters)], 1, rows)


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
    journal geometry "Store Size (files x file pages)", which has no meaning for our store, and
    three more before the name: Bytes (of the ready messages), On disk (how many of those bytes
    are bodies kept on disk, not in memory) and Flow (producer flow control: `-` without a
    capacity, `ok`, or `OVERFULL` while the queue holds its publishers)."""
    lines = [
        "",
        "Durable  AutoDel  Excl  Bindings  Messages       Bytes     On disk  Flow      Queue Name",
        "=" * _QUEUE_RULE_WIDTH,
    ]
    for queue in queues:
        flow = "-" if queue.get("capacity") is None else "OVERFULL" if queue.get("overfull") else "ok"
        # qpid has no queue types: a quorum queue is marked after its name.
        kind = "" if queue.get("type", "classic") == "classic" else f"  ({queue['type']})"
        lines.append(
            f"  {yes_no(queue['durable'])}        {yes_no(queue['auto_delete'])}      "
            f"{yes_no(queue['exclusive'])}     {queue['bindings']:>5}     {queue['messages']:>8}"
            f"  {queue.get('bytes', 0):>10}  {queue.get('bytes_on_disk', 0):>10}  {flow:<8}  {queue['name']}{kind}"
        )
    return lines
