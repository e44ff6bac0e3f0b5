"""`amq-sim capture --from TOPOLOGY --duration 60s -o workload.toml`: what a running federation
does, sampled through management, as a workload a scenario uses (simulations.captured).

Theory of operation. Every node of the topology file is read twice through management, as
`amq-route topology map --live` reads it (topology.live, with the file's credentials for
each node): at the start of the window and at its end. Counters run since each node started
(docs/federation.md, "Counters"), so the workload is made of the differences:

- **Publish rates.** An exchange's `published` counts every message published into it:
  by clients, and by the routes and federations delivering into it, and dead-lettering.
  What clients published on node N to exchange X is N's `published` for X, less what N's
  pull routes on X accepted (`messages`), what other nodes' push routes into N on X carried,
  what N's federation on X received from its parent and what N's federation children on X
  forwarded to it, and what N's queues dead-lettered to X. Divided by the window: msg/s.
- **Keys.** Nodes do not count routing keys, so keys are not measured: a publisher gets the
  keys the topology file's `[[publishers]]` give its node and exchange, else one key per
  binding on the exchange anywhere in the federation (a topic pattern's `*` made `x`, its
  `#` left out; a direct binding's key as is; fanout and headers exchanges: ""), so every
  binding sees traffic, in equal shares. The workload's comments say which.
- **Sizes.** Nodes count bytes only where routes and federations carry messages: a
  publisher's size is the mean body size of what they carried on its exchange in the
  window, across the federation (none carried: left out, the scenario default).
- **Bindings.** The live bindings the topology file does not declare (queues bound by
  applications), except the federation's own queues (`federation.*`) and bindings to
  exchanges (not modelled by scenarios).

A node that cannot be read at either reading, or whose counters went back (it restarted in
the window), stops the capture with a clear error: the counts would be wrong.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import trio

from federation.formatting import Record, route_peer
from gateway.names import SYSTEM_EXCHANGES
from simulations.captured import CapturedBinding, CapturedPublisher, CaptureError, Workload
from topology.live import LiveNode, read_live
from topology.model import Topology

Say = Callable[[str], None]
#: A node's exchange: (node, exchange).
At = tuple[str, str]

#: Queues named so are the federation's own (bridge queues, outboxes, attachments' queues).
FEDERATION_QUEUES = "federation."
#: The word a topic binding's `*` becomes in a key made from it.
ANY_WORD = "x"
#: Seconds for each management connection and request.
REQUEST_TIMEOUT = 10.0


class CaptureFailed(CaptureError):
    """The federation could not be sampled; the message says which node and why."""


@dataclass(frozen=True)
class Reading:
    """Every node's records at one moment (Trio's clock)."""

    at: float
    nodes: dict[str, LiveNode]


async def read(topology: Topology, timeout: float) -> Reading:
    """Every node of the topology, read now; CaptureFailed naming the ones that cannot be."""
    state = await read_live(topology, timeout)
    unreachable = state.unreachable()
    if unreachable:
        raise CaptureFailed(
            "cannot read " + "; ".join(f"{name}: {reason}" for name, reason in unreachable.items())
        )
    return Reading(
        trio.current_time(), {name: node for name, node in state.nodes.items() if isinstance(node, LiveNode)}
    )


async def sample(topology: Topology, seconds: float, say: Say, timeout: float = REQUEST_TIMEOUT) -> Workload:
    """Read the federation, wait `seconds`, read it again: the workload in between."""
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    first = await read(topology, timeout)
    say(f"capture: read {len(first.nodes)} nodes at {started}; the next reading in {seconds:g} s")
    await trio.sleep_until(first.at + seconds)
    last = await read(topology, timeout)
    return infer(topology, first, last, started)


def capture(topology: Topology, seconds: float, say: Say) -> Workload:
    """`sample`, run (the amq-sim console script hands this to simulations.cli)."""
    return trio.run(sample, topology, seconds, say)


# -- what the two readings say (pure) -----------------------------------------------------------


def infer(topology: Topology, first: Reading, last: Reading, started: str = "") -> Workload:
    """The workload between two readings (see the module)."""
    seconds = last.at - first.at
    published = _exchange_deltas(first, last)
    inbound, in_flight = _inbound(topology, first, last)
    keys, notes = _keys(topology, last)
    sizes = _sizes(first, last)
    publishers = []
    for (node, exchange), (count, unroutable) in sorted(
        published.items(), key=lambda item: _order(topology, item[0])
    ):
        clients = count - inbound.get((node, exchange), 0)
        edges = in_flight.get((node, exchange), 0)
        if clients <= edges:  # what routes carried across the window's edges, likely
            if clients > 0:
                notes.append(
                    f"{node} {exchange}: {clients} left out, no more than the {edges} in flight into it"
                )
            continue
        if exchange == "":
            notes.append(f"{node}: {clients} publishes to the default exchange not captured")
            continue
        if unroutable:
            notes.append(
                f"{node} {exchange}: {unroutable} of {count} reached nothing (the simulation routes by the keys written)"
            )
        if topology.exchange(node, exchange) is None:
            notes.append(
                f"{node} {exchange}: not in the topology file: declare it there, or scenarios refuse this workload"
            )
        publishers.append(
            CapturedPublisher(
                node,
                exchange,
                round(clients / seconds, 3),
                keys.get((node, exchange)) or keys.get(("", exchange)) or ("",),
                messages=clients,
                size=sizes.get(exchange),
            )
        )
    bindings, skipped = _extra_bindings(topology, last)
    notes += [
        f"{b.node} {b.exchange}: not in the topology file: declare it there, or scenarios refuse this workload"
        for b in bindings
        if topology.exchange(b.node, b.exchange) is None
    ]
    if skipped:
        notes.append(f"{skipped} exchange-to-exchange bindings not captured (scenarios do not model them)")
    return Workload(
        seconds=round(seconds, 3),
        topology=topology.path,
        started=started,
        publishers=tuple(publishers),
        bindings=tuple(bindings),
        notes=tuple(_header(topology, seconds, started)),
        findings=tuple(dict.fromkeys(notes)),
    )


def _order(topology: Topology, at: tuple[str, str]) -> tuple[int, str]:
    """Nodes in the file's order, then exchanges by name."""
    return list(topology.nodes).index(at[0]), at[1]


def _header(topology: Topology, seconds: float, started: str) -> list[str]:
    return [
        f"amq-sim capture --from {topology.path}: {len(topology.nodes)} nodes, {seconds:.1f} s from {started}",
        "Rates: what clients published per node and exchange in the window (the exchange's",
        "`published`, less what routes, federations and dead-lettering delivered into it), per second.",
        "Keys are not counted by nodes: a publisher's keys are the topology file's [[publishers]]",
        "keys for its node and exchange, else one per binding on the exchange (topic: * made",
        f"'{ANY_WORD}', # left out), in equal shares. Sizes: the mean body size routes and",
        "federations carried on the exchange (none carried: the scenario default).",
    ]


def _identity(record: Record, fields: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(str(record.get(f)) for f in fields)


def _by(records: Iterable[Record], fields: tuple[str, ...]) -> dict[tuple[str, ...], Record]:
    return {_identity(record, fields): record for record in records}


def _delta(
    before: Iterable[Record], after: Iterable[Record], fields: tuple[str, ...], *counters: str
) -> Iterable[tuple[Record, list[int]]]:
    """Each record of `after` (known by `fields`) with how much each of `counters` grew since
    `before` (from 0 for a record made in between)."""
    earlier = _by(before, fields)
    for key, record in _by(after, fields).items():
        previous = earlier.get(key) or {}
        yield record, [int(record.get(c) or 0) - int(previous.get(c) or 0) for c in counters]


_ROUTE: tuple[str, ...] = ("kind", "dest", "src", "exchange", "key", "queue", "vhost")
_FEDERATION: tuple[str, ...] = ("exchange", "vhost", "parent")


def _exchange_deltas(first: Reading, last: Reading) -> dict[tuple[str, str], tuple[int, int]]:
    """(node, exchange) -> (published, unroutable) in the window, system exchanges left out."""
    found = {}
    for name, node in last.nodes.items():
        before = first.nodes[name].exchanges
        for record, (grown, unroutable) in _delta(
            before, node.exchanges, ("name",), "published", "unroutable"
        ):
            if grown < 0:
                raise CaptureFailed(
                    f"{name}'s counters went back (it restarted during the window): capture again"
                )
            if record["name"] not in SYSTEM_EXCHANGES - {""} and grown:
                found[(name, record["name"])] = (grown, unroutable)
    return found


def _peer_name(topology: Topology, node: LiveNode, address: str) -> str | None:
    """The topology's name for the node `node` reaches at `address` (host:port): by the name
    its link reports, else by the file's address for it."""
    for link in node.links:
        if f"{link['host']}:{link['port']}" == address and link.get("node") in topology.nodes:
            return str(link["node"])
    return next((n.name for n in topology.nodes.values() if f"{n.host}:{n.port}" == address), None)


def _deliveries(
    topology: Topology, name: str, node: LiveNode
) -> Iterator[tuple[Record, tuple[str, ...], At, str]]:
    """Every way `node`'s routes and federations deliver into some node's exchange: (record,
    the fields it is known by, (node, exchange) delivered into, the counter counting it)."""
    for route in node.routes:
        into = _peer_name(topology, node, route_peer(route)) if route.get("src_local") else name
        if into is not None:
            yield route, _ROUTE, (into, route["exchange"]), "messages"
    for federation in node.federations:
        yield federation, _FEDERATION, (name, federation["exchange"]), "received"
        parent = federation.get("parent_node")
        if parent not in topology.nodes:
            parent = _peer_name(topology, node, str(federation["parent"]))
        if parent is not None:
            yield federation, _FEDERATION, (parent, federation["exchange"]), "forwarded"


def _inbound(topology: Topology, first: Reading, last: Reading) -> tuple[dict[At, int], dict[At, int]]:
    """(node, exchange) -> messages routes, federations and dead-lettering put into it in the
    window; and -> what was in flight into it at either reading (taken, not yet confirmed,
    so perhaps counted in the exchange and not yet by the route: how far the first may be off)."""
    found: dict[At, int] = defaultdict(int)
    in_flight: dict[At, int] = defaultdict(int)
    for name, node in last.nodes.items():
        before = first.nodes[name]
        earlier = {
            fields: _by(records, fields)
            for fields, records in ((_ROUTE, before.routes), (_FEDERATION, before.federations))
        }
        for record, fields, into, counter in _deliveries(topology, name, node):
            previous = earlier[fields].get(_identity(record, fields)) or {}
            found[into] += int(record.get(counter) or 0) - int(previous.get(counter) or 0)
        for reading in (before, node):
            for record, _, into, _ in _deliveries(topology, name, reading):
                in_flight[into] += int(record.get("in_flight") or 0)
        for queue, (dead,) in _delta(before.queues, node.queues, ("name",), "dead_lettered"):
            target = (queue.get("arguments") or {}).get("x-dead-letter-exchange")
            if target is not None:
                found[(name, str(target))] += dead
    return found, in_flight


def _sizes(first: Reading, last: Reading) -> dict[str, int]:
    """Exchange -> mean body bytes of what routes and federations carried on it."""
    carried: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, node in last.nodes.items():
        before = first.nodes[name]
        counted = [
            (before.routes, node.routes, _ROUTE, "messages", "bytes"),
            (before.federations, node.federations, _FEDERATION, "forwarded", "forwarded_bytes"),
            (before.federations, node.federations, _FEDERATION, "received", "received_bytes"),
        ]
        for earlier, now, fields, messages, size in counted:
            for record, (sent, grown) in _delta(earlier, now, fields, messages, size):
                carried[record["exchange"]][0] += sent
                carried[record["exchange"]][1] += grown
    return {exchange: max(1, round(size / count)) for exchange, (count, size) in carried.items() if count > 0}


def _is_app_binding(record: Record) -> bool:
    return record.get("destination_kind") == "queue" and not str(record["destination"]).startswith(
        FEDERATION_QUEUES
    )


def key_for(exchange_type: str, binding_key: str) -> str:
    """A routing key a binding with `binding_key` matches (see the module)."""
    if exchange_type == "direct":
        return binding_key
    if exchange_type != "topic":
        return ""
    words = [ANY_WORD if word == "*" else word for word in binding_key.split(".") if word != "#"]
    return ".".join(words) or ANY_WORD


def _keys(topology: Topology, last: Reading) -> tuple[dict[tuple[str, str], tuple[str, ...]], list[str]]:
    """(node, exchange) -> keys from the file's publishers, ("", exchange) -> keys from every
    binding on the exchange; and a note on headers bindings, whose headers are not kept."""
    found: dict[tuple[str, str], tuple[str, ...]] = {}
    for publisher in topology.publishers:
        found[(publisher.node, publisher.exchange)] = (
            *found.get((publisher.node, publisher.exchange), ()),
            publisher.key,
        )
    made: dict[str, dict[str, None]] = defaultdict(dict)
    headers = 0
    for node in last.nodes.values():
        types = {record["name"]: record["type"] for record in node.exchanges}
        for binding in filter(_is_app_binding, node.bindings):
            kind = types.get(binding["exchange"], "")
            headers += kind == "headers"
            made[binding["exchange"]][key_for(kind, str(binding["routing_key"]))] = None
    for exchange, keys in made.items():
        found[("", exchange)] = tuple(keys)
    notes = [f'{headers} headers bindings: their publishers get key "" and no headers'] if headers else []
    return found, notes


def _extra_bindings(topology: Topology, last: Reading) -> tuple[list[CapturedBinding], int]:
    """The live queue bindings the file does not declare, and how many exchange-to-exchange
    bindings were left out."""
    declared = {
        (b.node, b.exchange, b.queue, b.key, repr(sorted(b.arguments.items()))) for b in topology.bindings
    }
    found, skipped = [], 0
    for name, node in last.nodes.items():
        for record in node.bindings:
            if record.get("destination_kind") != "queue":
                skipped += 1
                continue
            if not _is_app_binding(record) or record["exchange"] in SYSTEM_EXCHANGES:
                continue
            arguments = dict(record.get("arguments") or {})
            key = (
                name,
                record["exchange"],
                record["destination"],
                record["routing_key"],
                repr(sorted(arguments.items())),
            )
            if key not in declared:
                found.append(
                    CapturedBinding(
                        name, record["exchange"], record["destination"], record["routing_key"], arguments
                    )
                )
    return found, skipped
