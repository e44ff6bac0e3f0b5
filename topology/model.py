"""A topology file's content, checked and with defaults applied: what the planner reasons about.

The loader (topology.loader) turns a TOML file into a `Topology`; checks, maps, plans and
`amq-gateway up` read only this model, so they can be tested with topologies built in code.

Directions, as the CLIs name them:
- A **link** is opened by `opener` (the node that holds it: dest-broker in `amq-route link add
  <dest-broker> <src-broker>`, the file's `to`) to `peer` (src-broker, the file's `from`).
- A **route** moves messages from `source` into `exchange` on `destination`. A pull route
  rides on a link the destination opens to the source (qpid-route's default); a push route on
  one the source opens to the destination (`-s`).
- A **federation** attaches `exchange` of `child` to the same exchange of `parent`; the child
  opens the peering.

Every declaration keeps `where`: the file, line and key path it came from
(`topology.toml:12: routes[0]`), so findings point at the text to fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from federation.address import BrokerAddress
from gateway.federation_config import cannot_federate
from gateway.names import (
    DEFAULT_TLS_PORT,
    DEFAULT_TRANSPORT,
    DEFAULT_VHOST,
    STANDARD_EXCHANGES,
    TLS_TRANSPORT,
)
from gateway.routing.federation_types import ALIASES, default_type
from gateway.tls import ClientTls

#: Exchanges every node has without declaring them, with their types.
BUILT_IN_EXCHANGES: dict[str, str] = dict(STANDARD_EXCHANGES)
#: The vhost every declaration lives in (the planner manages vhost "/" only).
VHOST = DEFAULT_VHOST
ROUTE_KINDS = ("dynamic", "exchange", "queue")

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Credentials:
    """A login, by the name the file gives it (`[credentials.<name>]`)."""

    name: str
    username: str
    password: str


#: What a node is managed and linked to with unless the file names other credentials.
GUEST = Credentials("guest", "guest", "guest")


@dataclass(frozen=True)
class Node:
    name: str
    host: str
    port: int
    region: str = ""
    #: The node's federation tag: its dynamic routes' default tag (the node name if empty).
    tag: str = ""
    #: The node's users file, for `amq-gateway up` (None: the built-in loopback users).
    users: str | None = None
    #: The login tools and other nodes' links use on this node.
    credentials: Credentials = GUEST
    #: TLS (the node's --tls-* flags): its certificate and key make a TLS listener on
    #: tls_port (5671 when not given), and are what its ssl links log in with (EXTERNAL).
    tls_port: int | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    where: str = ""

    @property
    def endpoint(self) -> str:
        """`host:port`, how route maps name nodes."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def address(self) -> BrokerAddress:
        """The node with the file's login for it: how tools manage it and links log in to it."""
        return BrokerAddress(self.host, self.port, self.credentials.username, self.credentials.password)

    @property
    def tls_listens(self) -> bool:
        return self.tls_cert is not None

    @property
    def tls_endpoint(self) -> str | None:
        """`host:tls_port` when the node listens for TLS, where ssl links reach it."""
        if not self.tls_listens:
            return None
        return str(BrokerAddress(self.host, self.tls_port or DEFAULT_TLS_PORT))

    def link_address(self, transport: str) -> BrokerAddress:
        """Where another node's link to this one connects: `address` for tcp; for ssl, the TLS
        port with no credentials, so the opener logs in with EXTERNAL as its own certificate's
        user (no password in the file) and checks this node against its own tls_ca."""
        if transport != TLS_TRANSPORT:
            return self.address
        port = self.tls_port or DEFAULT_TLS_PORT
        return BrokerAddress(self.host, port, "", "", tls=ClientTls(), login_given=False)

    @property
    def federation_tag(self) -> str:
        return self.tag or self.name


@dataclass(frozen=True)
class Exchange:
    """An exchange declared on one node (an entry naming several nodes becomes one each)."""

    node: str
    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    where: str = ""


@dataclass(frozen=True)
class Queue:
    node: str
    name: str
    durable: bool = True
    auto_delete: bool = False
    where: str = ""


@dataclass(frozen=True)
class Binding:
    """A queue bound to an exchange on one node: a subscriber, for the reachability checks."""

    node: str
    exchange: str
    queue: str
    key: str = ""
    arguments: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)
    where: str = ""


@dataclass(frozen=True)
class Link:
    opener: str
    peer: str
    durable: bool = True
    transport: str = DEFAULT_TRANSPORT
    where: str = ""


@dataclass(frozen=True)
class Route:
    kind: str
    source: str
    destination: str
    exchange: str
    #: Exchange routes: the binding key on the source.
    key: str | None = None
    #: Queue routes: the source's queue.
    queue: str | None = None
    push: bool = False
    durable: bool = True
    #: None: the node's default.
    ack: int | None = None
    credit: int | None = None
    #: Dynamic and exchange routes: the route's tag (None: the holder's federation tag).
    tag: str | None = None
    excludes: tuple[str, ...] = ()
    #: The transport of the link the route creates when the file declares none (`-t`).
    transport: str = DEFAULT_TRANSPORT
    where: str = ""

    @property
    def holder(self) -> str:
        """The node that opens the route's link and holds the route."""
        return self.source if self.push else self.destination

    @property
    def far_end(self) -> str:
        """The node the holder's link connects to."""
        return self.destination if self.push else self.source


@dataclass(frozen=True)
class Federation:
    child: str
    parent: str
    exchange: str
    #: subscriber, publisher, locator, fanout or service as loaded (the loader resolves
    #: aliases and the default); topologies built in code may leave it to
    #: `Topology.federation_type`, which everything that reads a type goes through.
    type: str
    where: str = ""
    #: ssl: the peering runs over TLS to the parent's tls_port, logging in with EXTERNAL.
    transport: str = DEFAULT_TRANSPORT


@dataclass(frozen=True)
class Publisher:
    """Who sends what where: the reachability checks and `up`'s demo traffic start here."""

    node: str
    exchange: str
    key: str = ""
    where: str = ""


@dataclass(frozen=True)
class Vhost:
    """A vhost on one node (beside "/", which every node has)."""

    node: str
    name: str
    where: str = ""


@dataclass(frozen=True)
class User:
    """A user on one node. Its password is never in the file: `password_env` names an
    environment variable, or `password_file` a file, read when the plan needs it (to create
    the user), so checks and maps need no secret."""

    node: str
    name: str
    tags: tuple[str, ...] = ()
    password_env: str | None = None
    password_file: str | None = None
    where: str = ""


@dataclass(frozen=True)
class Permission:
    """RabbitMQ's three patterns for one user in one vhost of one node."""

    node: str
    user: str
    vhost: str
    configure: str
    write: str
    read: str
    where: str = ""


@dataclass(frozen=True)
class TopicPermission:
    """Routing-key patterns for one user on one topic exchange of a vhost of one node."""

    node: str
    user: str
    vhost: str
    exchange: str
    write: str
    read: str
    where: str = ""


@dataclass(frozen=True)
class Access:
    """Who may do what, as the file declares it: the planner manages a node's users, vhosts and
    permissions only when the file declares some for that node."""

    vhosts: tuple[Vhost, ...] = ()
    users: tuple[User, ...] = ()
    permissions: tuple[Permission, ...] = ()
    topic_permissions: tuple[TopicPermission, ...] = ()

    def manages(self, node: str) -> bool:
        return any(
            entry.node == node
            for entries in (self.vhosts, self.users, self.permissions, self.topic_permissions)
            for entry in entries
        )


@dataclass(frozen=True)
class Topology:
    name: str
    path: str
    nodes: dict[str, Node]
    exchanges: tuple[Exchange, ...] = ()
    queues: tuple[Queue, ...] = ()
    bindings: tuple[Binding, ...] = ()
    links: tuple[Link, ...] = ()
    routes: tuple[Route, ...] = ()
    federations: tuple[Federation, ...] = ()
    publishers: tuple[Publisher, ...] = ()
    access: Access = Access()

    def exchange(self, node: str, name: str) -> Exchange | None:
        """The exchange `name` on `node`: declared, or built in (where "" is the file's)."""
        declared = self._exchange_index.get((node, name))
        if declared is not None:
            return declared
        if name in BUILT_IN_EXCHANGES and node in self.nodes:
            return Exchange(node, name, BUILT_IN_EXCHANGES[name], durable=True)
        return None

    def federation_type(self, federation: Federation) -> str:
        """The type the child records for `federation`: as written (`data` is fanout), else by
        the exchange's type as the child, the parent or any node declares it: service for a
        direct exchange, fanout otherwise (gateway.routing.federation_types.default_type)."""
        if federation.type:
            return ALIASES.get(federation.type, federation.type)
        name = federation.exchange
        exchange = (
            self.exchange(federation.child, name)
            or self.exchange(federation.parent, name)
            or next((each for each in self.exchanges if each.name == name), None)
        )
        kind = exchange.type if exchange is not None else BUILT_IN_EXCHANGES.get(name)
        return default_type(kind or "")

    def queue(self, node: str, name: str) -> Queue | None:
        return self._queue_index.get((node, name))

    # Lookups by (node, name) are dicts built on first use (the first declaration wins, as a
    # scan in file order finds it): the simulator looks up millions of bindings' queues and
    # exchanges on topologies of 10,000 nodes.

    @cached_property
    def _exchange_index(self) -> dict[tuple[str, str], Exchange]:
        found: dict[tuple[str, str], Exchange] = {}
        for exchange in self.exchanges:
            found.setdefault((exchange.node, exchange.name), exchange)
        return found

    @cached_property
    def _queue_index(self) -> dict[tuple[str, str], Queue]:
        found: dict[tuple[str, str], Queue] = {}
        for queue in self.queues:
            found.setdefault((queue.node, queue.name), queue)
        return found

    def link_between(self, opener: str, peer: str) -> Link | None:
        """The declared link `opener` opens to `peer`, if any."""
        return next((ln for ln in self.links if ln.opener == opener and ln.peer == peer), None)

    def effective_links(self) -> Iterator[Link]:
        """Declared links, then the links routes create for themselves (as `amq-route route
        add` does: as durable as the route, with its transport), once per (opener, peer)."""
        seen: set[tuple[str, str]] = set()
        for link in self.links:
            seen.add((link.opener, link.peer))
            yield link
        for route in self.routes:
            pair = (route.holder, route.far_end)
            if pair not in seen:
                seen.add(pair)
                yield Link(
                    route.holder,
                    route.far_end,
                    durable=route.durable,
                    transport=route.transport,
                    where=route.where,
                )

    def link_transport(self, opener: str, peer: str) -> str:
        """The transport of `opener`'s link to `peer` (tcp when the file makes none)."""
        for link in self.effective_links():
            if (link.opener, link.peer) == (opener, peer):
                return link.transport
        return DEFAULT_TRANSPORT


def federatable(exchange: Exchange) -> str | None:
    """Why `exchange` cannot be federated (default, system or internal), or None."""
    return cannot_federate(exchange.name, exchange.internal)


@dataclass(frozen=True)
class Finding:
    """One problem or remark about a topology: a check's result."""

    severity: Severity
    code: str
    message: str
    where: str = ""

    def __str__(self) -> str:
        place = f"{self.where}: " if self.where else ""
        return f"{place}{self.severity} [{self.code}] {self.message}"
