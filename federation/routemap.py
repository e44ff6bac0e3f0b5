"""The route map's walk: from one node over its links and federations to every node reached.

`amq-route route map` reads each node through management; the offline map (topology.routemap)
takes the same views from a topology file; both walk and print through MapWalk, so the two
cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from federation import formatting
from federation.address import BrokerAddress
from federation.management_client import Client
from federation.requests import endpoint
from gateway.names import TLS_TRANSPORT
from gateway.tls import ClientTls


def link_endpoint(link: formatting.Record) -> str:
    """A link record's far end as `host:port`, how the map names nodes."""
    return str(link_peer(link))


def link_peer(link: formatting.Record) -> BrokerAddress:
    """A link record's far end, without credentials."""
    return BrokerAddress(link["host"], link["port"])


@dataclass(frozen=True)
class NodeView:
    """What `route map` reads of one node, and the name it reports (None: not known)."""

    links: list[formatting.Record]
    routes: list[formatting.Record]
    federations: list[formatting.Record]
    name: str | None = None

    def route_node(self, route: formatting.Record) -> str | None:
        """The name the far end of one of this node's routes gave when the route's link last
        reached it (None: never reached). A route record names its far end by address only."""
        peer = formatting.route_peer(route)
        return next((link.get("node") for link in self.links if link_endpoint(link) == peer), None)

    def peers(self) -> list[tuple[BrokerAddress, str | None]]:
        """The nodes to visit from this one: its links' far ends, then its federations'
        parents, each with the name it gave when last reached (None: never reached); those
        reached over ssl with `tls` set (the walk fills in how)."""
        return [
            *((_over(link, link_peer(link)), link.get("node")) for link in self.links),
            *(
                (_over(federation, formatting.federation_parent(federation)), federation.get("parent_node"))
                for federation in self.federations
            ),
        ]


def _over(record: formatting.Record, address: BrokerAddress) -> BrokerAddress:
    """`address` marked TLS when the record's link or peering is ssl: its port is a TLS port."""
    return replace(address, tls=ClientTls()) if record.get("transport") == TLS_TRANSPORT else address


class MapWalk:
    """`route map`'s breadth-first walk and its text, apart from how nodes are read: the live
    map reads them through management, the offline map (topology.routemap) takes them from a
    topology file, and both print the same lines.

    The walk starts at a node already read, then visits each node's link peers and then its
    federations' parents, each once, in the order found: a node is known by the name it
    reports (two addresses of one node, localhost:5672 and 127.0.0.1:5672, are one node, read
    once), or by `host:port` where it reports none; every node after the first is reached with
    the first node's credentials (and, over an ssl link, its TLS settings). `pending()` yields the nodes to read
    while the walk grows; the caller answers each with `reached` or `failed`, which return the
    probe line. `lines()` is the whole map, `heading()` and `sections()` its two halves."""

    def __init__(self, start: BrokerAddress, view: NodeView) -> None:
        self.start = start
        self.views: list[tuple[str, NodeView]] = []
        self.probes: list[str] = []
        self._seen = {endpoint(start)}
        #: Node name -> the address it was first reached or queued at.
        self._names: dict[str, str] = {}
        self._queue: list[BrokerAddress] = []
        self.reached(start, view)

    def pending(self) -> Iterator[BrokerAddress]:
        """The nodes still to read, first found first; nodes found meanwhile join the end."""
        while self._queue:
            yield self._queue.pop(0)

    def reached(self, address: BrokerAddress, view: NodeView) -> str:
        """`address` was read: its probe line; its peers are visited later. A node already
        reached at another address is not drawn twice: its line says which address that was."""
        here = endpoint(address)
        first = self._names.setdefault(view.name, here) if view.name else here
        if first != here and any(node == first for node, _ in self.views):
            self.probes.append(formatting.map_probe(here, f"Ok: the same node as {first}", view.name))
            return self.probes[-1]
        self.views.append((here, view))
        self.probes.append(formatting.map_probe(here, None, view.name))
        for peer, name in view.peers():
            if endpoint(peer) in self._seen or (name is not None and name in self._names):
                continue
            self._seen.add(endpoint(peer))
            if name is not None:
                self._names[name] = endpoint(peer)
            self._queue.append(self._as_start(peer))
        return self.probes[-1]

    def _as_start(self, peer: BrokerAddress) -> BrokerAddress:
        """`peer` reached as the first node was: with its credentials and, at a TLS port, its
        TLS settings (an amqps start address with the CA, and certificate, that the peers'
        certificates need), else the system's CAs."""
        tls = (self.start.tls or peer.tls) if peer.tls is not None else None
        return replace(peer, username=self.start.username, password=self.start.password, tls=tls)

    def found_as(self, address: BrokerAddress) -> str | None:
        """The name the node at `address` (one of `pending()`'s) gave to the node that found
        it, where known: which node it is."""
        here = endpoint(address)
        return next((name for name, first in self._names.items() if first == here), None)

    def failed(self, address: BrokerAddress, failure: str) -> str:
        """`address` could not be read (`failure` says why): its probe line; it is left out."""
        self.probes.append(formatting.map_probe(endpoint(address), failure))
        return self.probes[-1]

    def heading(self) -> list[str]:
        """The lines printed before the walk goes on: a blank line, the caption, the first probe."""
        return ["", "Finding Linked Brokers:", self.probes[0]]

    def sections(self) -> list[str]:
        """The routes and federations found on every node reached, in walk order."""
        lines = formatting.map_routes([(node, view.routes) for node, view in self.views])
        return lines + formatting.map_federations([(node, view.federations) for node, view in self.views])

    def lines(self) -> list[str]:
        """The whole map, as `route map` prints it once every node was read or failed."""
        return ["", "Finding Linked Brokers:", *self.probes, "", *self.sections()]


async def read_view(client: Client) -> NodeView:
    """The links, routes and federations of the node `client` talks to, and its name."""
    return NodeView(
        await client.call("links.list"),
        await client.call("routes.list"),
        await client.call("federations.list"),
        (await client.call("node.info"))["name"],
    )
