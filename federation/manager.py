"""The node's federation: its links (one per peer, keyed by host and port), the routes riding on
them, the management operations amq-route calls, and durable ones restored at start.

Theory of operation: `Federation.run` owns a nursery in which every link's task runs; the
management operations are plain synchronous functions (gateway.management's contract), so
they change the tables at once and start or close links in that nursery without waiting.
Durable links and routes are written to federation.persistence as they are added and deleted,
and `run` restores them before it reports started, so a restarted node reconnects at once.

A node never links to itself: `links.add` refuses a peer that is one of the node's listen
addresses (the same port on a loopback or any-address host), and a link whose peer turns out,
once connected, to carry this node's name (server property cluster_name) goes Failed with
"link to itself refused" and does not retry.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import trio

from federation import client
from federation.address import BrokerAddress, link_tls
from federation.dynamic_route import VHOST, DynamicRoute, FederatedExchanges
from federation.errors import AuthenticationRefused
from federation.federations import Federations
from federation.formatting import route_label, route_selector
from federation.health import combined
from federation.link import Link, LinkCounters, node_name, peer_name
from federation.persistence import FederationStore
from federation.ports import Connect, PeerConnection
from federation.routes import DEFAULT_ACK, DEFAULT_CREDIT, LocalNode, Route, RouteConfig, route_identity
from federation.timing import HEARTBEAT
from gateway.broker.vhost import VHost
from gateway.federation_config import FederationSettings
from gateway.management import ManagementError, Operation
from gateway.names import DEFAULT_TRANSPORT, DEFAULT_VHOST, TRANSPORTS, transport_name
from gateway.tls import ClientTls

LOGGER = logging.getLogger("federation.manager")

#: Seconds between a link's heartbeats unless links.add says otherwise: a dead or half-open
#: peer is noticed after two of them.
DEFAULT_HEARTBEAT = HEARTBEAT


class SelfLinkRefused(AuthenticationRefused):
    """The peer is this node, or a node another link reaches already. An AuthenticationRefused
    because a link treats it the same way: a permanent refusal, state Failed, no retry."""


@dataclass(frozen=True)
class LinkConfig:
    """A link as links.add creates it and persistence stores it."""

    host: str
    port: int
    username: str = "guest"
    password: str = field(default="guest", repr=False)
    durable: bool = False
    transport: str = DEFAULT_TRANSPORT
    heartbeat: int = DEFAULT_HEARTBEAT
    #: The peer's vhost the link opens (None: "/").
    vhost: str | None = None
    #: An ssl link's CA and client certificate and key (paths on this node), each defaulting
    #: to the node's own (its tls_ca, tls_cert, tls_key).
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @property
    def address(self) -> BrokerAddress:
        return BrokerAddress(self.host, self.port, self.username, self.password, self.vhost)

    def client_tls(self, default: ClientTls | None) -> ClientTls | None:
        """How an ssl link opens TLS: its own paths, else the node's (None for tcp links)."""
        return link_tls(self.transport, self.tls_ca, self.tls_cert, self.tls_key, default)


@dataclass
class _Peer:
    """One link and the routes it carries."""

    config: LinkConfig
    link: Link
    routes: list[Route]


class Federation:
    """Links and routes of one node; `operations()` are merged into the node's management."""

    def __init__(
        self,
        node: LocalNode,
        *,
        data_dir: Path | None,
        connect: Connect = client.connect,
        settings: FederationSettings | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        """`tls`: the node's own CA, certificate and key, what its ssl links use by default."""
        self.node = node
        self._tls = tls
        self._data_dir = data_dir
        self._client_connect = connect
        self._peers: dict[tuple[str, int], _Peer] = {}
        self._own: list[tuple[str, int]] = []
        self._nursery: trio.Nursery | None = None
        self._store: FederationStore | None = None
        self._closing = False
        self._exchanges = FederatedExchanges(node.name)
        self.federations = Federations(node, settings or FederationSettings(), self._connect, tls)

    def operations(self) -> dict[str, Operation]:
        return {
            "links.list": self.list_links,
            "links.add": self.add_link,
            "links.delete": self.delete_link,
            "routes.list": self.list_routes,
            "routes.add": self.add_route,
            "routes.delete": self.delete_route,
            "routes.flush": self.flush_routes,
            **self.federations.operations(),
        }

    # -- life cycle -------------------------------------------------------------------------

    async def run(
        self,
        own_addresses: list[tuple[str, int]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the links until cancelled; durable ones are restored before started()."""
        self._own = list(own_addresses)
        self._store = FederationStore.open(self._data_dir)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._restore()
                self.federations.start(nursery, self._store)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self._exchanges.store = None
            self._store.close()

    async def close(self) -> None:
        """Close every link (cleanly, bounded by the link's own timeout); stored ones stay
        stored, to be restored at the next start. No link starts after this."""
        self._closing = True
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.federations.close)
            for peer in self._peers.values():
                nursery.start_soon(peer.link.close)

    def _restore(self) -> None:
        assert self._store is not None
        links, routes = self._store.load()
        for record in links:
            self._start_link(LinkConfig(**record))
        for host, port, record in routes:
            peer = self._peers.get((host, port))
            if peer is None:
                LOGGER.warning("stored route %s has no stored link to %s:%s; ignored", record, host, port)
                continue
            route = self._new_route(RouteConfig.from_json(record), peer.config.address)
            try:
                route.prepare()
            except ManagementError as error:
                LOGGER.warning("stored route %s: %s; it starts once that is fixed", record, error.message)
            self._attach(peer, route)
        if links:
            LOGGER.info("restored %d durable link(s) and %d route(s)", len(links), len(routes))
        self._exchanges.restore(self.node.broker.vhosts, self._store)  # after the routes' tags

    # -- links ------------------------------------------------------------------------------

    def list_links(self) -> list[dict[str, Any]]:
        return [peer.link.snapshot() for peer in self._peers.values()]

    def add_link(
        self,
        host: str,
        port: int,
        username: str = "guest",
        password: str = "guest",
        durable: bool = False,
        transport: str = DEFAULT_TRANSPORT,
        heartbeat: int | None = None,
        vhost: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ) -> dict[str, Any]:
        """Add a link to host:port (opening the peer's `vhost`, "/" by default); its record,
        with `change`: "added", or for an existing link "updated" when these credentials or
        this vhost differ from its own (it reconnects with them, its routes with it) and
        "unchanged" otherwise (durability and the rest stay as they are).

        An ssl (or tls) link opens TLS with `tls_ca`, `tls_cert` and `tls_key`, each defaulting
        to the node's own; with an empty user name it logs in with EXTERNAL, as its
        certificate's user."""
        peer = self._peers.get((host, port))
        if peer is None:
            beat = _number("heartbeat", heartbeat, DEFAULT_HEARTBEAT)
            config = LinkConfig(
                host,
                port,
                username,
                password,
                bool(durable),
                transport_name(transport),
                beat,
                vhost,
                tls_ca,
                tls_cert,
                tls_key,
            )
            peer = self._add_link(config)
            return {**peer.link.snapshot(), "change": "added"}
        if (username, password, vhost) == (peer.config.username, peer.config.password, peer.config.vhost):
            return {**peer.link.snapshot(), "change": "unchanged"}
        self._relogin(peer, replace(peer.config, username=username, password=password, vhost=vhost))
        return {**peer.link.snapshot(), "change": "updated"}

    def delete_link(self, host: str, port: int) -> None:
        self._remove_peer(self._peer(host, port))

    def _add_link(self, config: LinkConfig) -> _Peer:
        if config.transport not in TRANSPORTS:
            raise ManagementError(
                "usage",
                f"transport '{config.transport}' is not supported: links use {' or '.join(TRANSPORTS)}",
            )
        tls = config.client_tls(self._tls)
        if tls is not None and not config.username and tls.cert is None:
            raise ManagementError(
                "usage",
                f"the ssl link to {config.address} has no credentials, so it logs in with EXTERNAL,"
                " which needs a client certificate: give the node a tls_cert, or the link one",
            )
        if tls is None and not config.username:
            raise ManagementError("usage", f"the link to {config.address} needs a user name")
        if not isinstance(config.port, int) or not 1 <= config.port <= 65535:
            raise ManagementError("usage", f"port {config.port!r} is not a port number")
        if self._is_own_address(config.host, config.port):
            raise ManagementError(
                "usage", f"{config.address} is this node's own address: a node cannot link to itself"
            )
        peer = self._start_link(config)
        if config.durable:
            self._stored().put_link(config.host, config.port, asdict(config))
        return peer

    def _start_link(self, config: LinkConfig) -> _Peer:
        peer = self._peers[(config.host, config.port)] = _Peer(config, self._run_link(config), [])
        return peer

    def _run_link(self, config: LinkConfig, counters: LinkCounters | None = None) -> Link:
        """A new link for `config`, running in the federation's nursery: the one place a link
        is made (added, or replaced to log in anew, going on with the old one's `counters`), so
        the ACL's `create link` is asked here."""
        self.node.management.authorize("create", "link", str(config.address))
        tls = config.client_tls(self._tls)
        link = Link(
            config.address if tls is None else replace(config.address, tls=tls),
            durable=config.durable,
            transport=config.transport,
            heartbeat=config.heartbeat,
            connect=self._link_connect,
            counters=counters,
        )
        self._running().start_soon(link.run, name=f"link to {config.address}")
        return link

    def _relogin(self, peer: _Peer, config: LinkConfig) -> None:
        """Replace the peer's link by one logging in with `config`'s credentials: the routes
        move to it (a link runs once, so a new one); the old one closes."""
        old = peer.link
        peer.config, peer.link = config, self._run_link(config, old.counters)
        for route in peer.routes:
            old.detach(route)
            peer.link.attach(route)
        self._running().start_soon(old.close, name=f"closing old link to {config.address}")
        if config.durable:
            self._stored().put_link(config.host, config.port, asdict(config))
        LOGGER.info("link to %s: logging in as %s from now on", config.address, config.username)

    def _remove_peer(self, peer: _Peer) -> None:
        nursery = self._running()
        for route in peer.routes:
            route.retire()
        del self._peers[(peer.config.host, peer.config.port)]
        if peer.config.durable:
            self._stored().delete_link(peer.config.host, peer.config.port)
        nursery.start_soon(peer.link.close, name=f"closing link to {peer.config.address}")

    @asynccontextmanager
    async def _connect(self, address: BrokerAddress, **options: Any) -> AsyncIterator[PeerConnection]:
        """The client's connect for links and peerings, refusing a peer that turns out to be
        this node."""
        properties = {"connection_name": f"federation link from {self.node.name}"}
        async with self._client_connect(address, client_properties=properties, **options) as connection:
            if peer_name(connection) == self.node.name:
                raise SelfLinkRefused("link to itself refused")
            yield connection

    @asynccontextmanager
    async def _link_connect(self, address: BrokerAddress, **options: Any) -> AsyncIterator[PeerConnection]:
        """`_connect` for links, refusing also a node another link reaches under another
        address (nodes are known by their names: localhost:5672 and 127.0.0.1:5672 are one
        node, with one link; a federation's peering is a link of its own, not counted)."""
        async with self._connect(address, **options) as connection:
            name = node_name(connection)
            other = self._linked_as(name, address)
            if other is not None:
                raise SelfLinkRefused(f"node '{name}' is linked already as {other}: one link per node")
            yield connection

    def _linked_as(self, name: str | None, address: BrokerAddress) -> BrokerAddress | None:
        """The address of another link that reached the node called `name`, if any."""
        if name is None:
            return None
        for peer in self._peers.values():
            other = peer.config.address
            if peer.link.snapshot()["node"] == name and str(other) != str(address):
                return other
        return None

    def _is_own_address(self, host: str, port: int) -> bool:
        """Whether host:port is one of the node's listen addresses: the same port, and the same
        host, a loopback host or an any-address (which a connection reaches us through)."""
        return any(
            port == own_port and (host == own_host or _is_local(host)) for own_host, own_port in self._own
        )

    # -- routes -----------------------------------------------------------------------------

    def list_routes(self) -> list[dict[str, Any]]:
        """Each route's record, its state folded with its link's (federation.health)."""
        records = []
        for peer in self._peers.values():
            link = peer.link.snapshot()
            records += [{**route.record(), **combined(route.health, link)} for route in peer.routes]
        return records

    def add_route(
        self,
        host: str,
        port: int,
        kind: str,
        exchange: str,
        key: str | None = None,
        queue: str | None = None,
        tag: str | None = None,
        excludes: list[str] | None = None,
        durable: bool = False,
        src_local: bool = False,
        ack: int | None = None,
        credit: int | None = None,
        username: str = "guest",
        password: str = "guest",
        vhost: str = DEFAULT_VHOST,
    ) -> dict[str, Any]:
        """Add a route in this node's `vhost`, and its link if there is none (with these
        credentials, as durable as the route); its record."""
        config = RouteConfig(
            kind=kind,
            exchange=exchange,
            key=key if kind == "exchange" else None,
            queue=queue if kind == "queue" else None,
            tag=tag,
            excludes=tuple(excludes or ()),
            durable=bool(durable),
            src_local=bool(src_local),
            ack=_number("ack", ack, DEFAULT_ACK) or DEFAULT_ACK,
            credit=_number("credit", credit, DEFAULT_CREDIT) or DEFAULT_CREDIT,
            vhost=vhost,
        )
        self._check_route(config)
        peer = self._peers.get((host, port))
        if peer is not None:
            self._check_fits(peer, config)
        route = self._new_route(config, BrokerAddress(host, port, username, password))
        route.prepare()
        if peer is None:
            try:
                peer = self._add_link(LinkConfig(host, port, username, password, config.durable))
            except ManagementError:
                route.retire()  # undo what prepare() made
                raise
        self._attach(peer, route)
        if config.durable:
            self._stored().put_route(host, port, list(config.identity()), config.to_json())
        return route.record()

    def delete_route(
        self,
        host: str,
        port: int,
        kind: str,
        exchange: str,
        key: str | None = None,
        queue: str | None = None,
        vhost: str = DEFAULT_VHOST,
    ) -> None:
        peer = self._peer(host, port)
        selector = route_selector(kind, key, queue)
        for route in peer.routes:
            if route.config.identity() == route_identity(kind, exchange, selector, vhost):
                self._remove_route(peer, route)
                return
        raise ManagementError(
            "NOT_FOUND",
            f"no {kind} route {route_label(exchange, selector)} on the link to {peer.config.address}",
        )

    def flush_routes(self, links: bool = False) -> dict[str, list[dict[str, Any]]]:
        """Delete every route, and with `links` every link; the records of what was deleted."""
        flushed: dict[str, list[dict[str, Any]]] = {"routes": self.list_routes(), "links": []}
        for peer in list(self._peers.values()):
            for route in list(peer.routes):
                self._remove_route(peer, route)
            if links:
                flushed["links"].append(peer.link.snapshot())
                self._remove_peer(peer)
        return flushed

    def receive_adverts(self, vhost: VHost, body: bytes, speaker: str | None) -> None:
        """A downstream node's adverts, published to the control exchange (the server hands
        them over) by a login that may advertise as `speaker` (None: as any node);
        federation.dynamic.AdvertRefused if it may not send these. See
        federation.dynamic_route."""
        self._exchanges.receive(vhost, body, speaker)

    def _new_route(self, config: RouteConfig, peer: BrokerAddress) -> Route:
        if config.kind == "dynamic":
            return DynamicRoute(config, peer, self.node, self._exchanges)
        return Route(config, peer, self.node)

    def _check_route(self, config: RouteConfig) -> None:
        """Refuse a route this node cannot run, naming what is wrong."""
        if config.kind == "dynamic" and self.federations.attached(VHOST, config.exchange):
            raise ManagementError(
                "usage",
                f"exchange '{config.exchange}' is federated to a parent: an exchange is federated at most once",
            )
        if config.kind == "dynamic" and config.vhost != DEFAULT_VHOST:
            raise ManagementError("usage", f"dynamic routes work in vhost '{DEFAULT_VHOST}' only")
        if config.kind == "dynamic" and config.src_local:
            raise ManagementError(
                "usage", "-s/--src-local is not permitted on dynamic routes (the destination must pull)"
            )
        if config.kind not in ("exchange", "queue", "dynamic"):
            raise ManagementError("usage", f"unknown route kind '{config.kind}' (exchange, queue or dynamic)")
        if config.kind == "exchange" and config.key is None:
            raise ManagementError("usage", "an exchange route needs a routing key")
        if config.kind == "queue" and not config.queue:
            raise ManagementError("usage", "a queue route needs the source queue")
        if config.src_local and config.kind == "queue":
            self._require_local(config.queue or "", "queue", "source queue", config.vhost)
        else:
            role = "source" if config.src_local else "destination"
            self._require_local(config.exchange, "exchange", f"{role} exchange", config.vhost)

    def _require_local(self, name: str, kind: str, role: str, vhost: str) -> None:
        management = self.node.management
        listed = management.list_exchanges(vhost) if kind == "exchange" else management.list_queues(vhost)
        if not any(record["name"] == name for record in listed):
            node = f"node '{self.node.name}'"
            where = f"on {node}" if vhost == DEFAULT_VHOST else f"in vhost '{vhost}' of {node}"
            raise ManagementError(
                "NOT_FOUND", f"no {kind} '{name}' {where}: the route's {role} must exist there"
            )

    def _check_fits(self, peer: _Peer, config: RouteConfig) -> None:
        """A route must be new on its link, and durable only on a durable link."""
        if any(route.config.identity() == config.identity() for route in peer.routes):
            raise ManagementError("duplicate", f"Duplicate Route - ignoring: {config.describe()}")
        if config.durable and not peer.config.durable:
            raise ManagementError(
                "usage",
                f"a durable route needs a durable link, and the link to {peer.config.address} is not "
                "durable: delete the link and add it again with -d/--durable",
            )

    def _attach(self, peer: _Peer, route: Route) -> None:
        peer.routes.append(route)
        route.link_counters = peer.link.counters
        peer.link.attach(route)

    def _remove_route(self, peer: _Peer, route: Route) -> None:
        route.retire()
        peer.routes.remove(route)
        peer.link.detach(route)
        if route.config.durable:
            self._stored().delete_route(peer.config.host, peer.config.port, list(route.config.identity()))

    # -- helpers ----------------------------------------------------------------------------

    def _peer(self, host: str, port: int) -> _Peer:
        peer = self._peers.get((host, port))
        if peer is None:
            raise ManagementError("NOT_FOUND", f"no link to {BrokerAddress(host, port)}")
        return peer

    def _running(self) -> trio.Nursery:
        if self._nursery is None or self._closing:
            raise ManagementError("unavailable", "federation is not running on this node")
        return self._nursery

    def _stored(self) -> FederationStore:
        assert self._store is not None, "the store is open while federation runs"
        return self._store


def _number(name: str, value: Any, default: int) -> int:
    """A count argument (ack, credit, heartbeat): `default` when not given, else a whole
    number of at least 0, or a usage error naming it."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManagementError("usage", f"{name} must be a whole number of at least 0, not {value!r}")
    return value


def _is_local(host: str) -> bool:
    """localhost, a loopback address or an any-address."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified
