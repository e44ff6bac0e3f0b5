"""The management requests for links, routes and federations, and the identities that name them.

`amq-route` and the topology planner send the same requests; both build them here, from typed
values rather than parsed command lines, so a plan's request is by construction the one the CLI
would send (docs/federation-design.md lists every method and its arguments).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from federation import formatting
from federation.address import BrokerAddress
from gateway.names import DEFAULT_TRANSPORT, DEFAULT_VHOST, TLS_TRANSPORT, transport_name

#: One management request: (method, arguments).
Request = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class RouteOptions:
    """How a new link or route behaves (amq-route's -d, -s, --ack, --credit, -t)."""

    durable: bool = False
    src_local: bool = False
    ack: int | None = None
    credit: int | None = None
    transport: str = DEFAULT_TRANSPORT


@dataclass(frozen=True)
class RouteSpec:
    """One route as the command line names it; `kind` is dynamic, exchange or queue."""

    kind: str
    exchange: str
    key: str | None = None
    queue: str | None = None
    tag: str | None = None
    excludes: tuple[str, ...] = ()
    #: The vhost on the node holding the route (the destination's, or the source's with -s).
    vhost: str = DEFAULT_VHOST

    def identity(self) -> dict[str, Any]:
        """What tells this route apart from the others on the same link (qpid-route's rule:
        the exchange, plus the key of an exchange route or the queue of a queue route), and
        its vhost when not the default one."""
        identity: dict[str, Any] = {"kind": self.kind, "exchange": self.exchange}
        if self.kind == "exchange":
            identity["key"] = self.key
        elif self.kind == "queue":
            identity["queue"] = self.queue
        if self.vhost != DEFAULT_VHOST:
            identity["vhost"] = self.vhost
        return identity

    def matches(self, record: formatting.Record, peer: str) -> bool:
        """Whether a route record of the node is this route on the link to `peer`."""
        if formatting.route_peer(record) != peer or record.get("vhost", DEFAULT_VHOST) != self.vhost:
            return False
        return all(record.get(name) == value for name, value in self.identity().items())

    def describe(self) -> str:
        """The route for -v lines and warnings: `exchange(key)` or `exchange(queue)`."""
        return formatting.route_description(self.identity())


@dataclass(frozen=True)
class Parent:
    """A federation's parent node, and whether its address gave a login: without one the child
    logs in to the parent with its own configured attach login, not guest."""

    address: BrokerAddress
    login_given: bool


def endpoint(address: BrokerAddress) -> str:
    """`host:port` (IPv6 in brackets), as route records and every listing name a node."""
    return str(BrokerAddress(address.host, address.port))


def link_add(peer: BrokerAddress, options: RouteOptions) -> Request:
    """links.add: the peer, with the credentials the link logs in with and the peer's vhost
    it opens (when not the default one). An amqps peer makes an ssl link, with the URL's CA
    and client certificate paths (absolute: the node reads them); without credentials an ssl
    link logs in with EXTERNAL (an empty user name), as its certificate's user."""
    transport = TLS_TRANSPORT if peer.tls is not None else transport_name(options.transport)
    external = transport == TLS_TRANSPORT and (not peer.login_given or peer.mechanism == "EXTERNAL")
    arguments: dict[str, Any] = {
        "host": peer.host,
        "port": peer.port,
        "username": "" if external else peer.username,
        "password": "" if external else peer.password,
        "durable": options.durable,
        "transport": transport,
    }
    if peer.vhost not in (None, DEFAULT_VHOST):
        arguments["vhost"] = peer.vhost
    if peer.tls is not None:
        arguments.update(_tls_arguments(peer))
    return ("links.add", arguments)


def _tls_arguments(peer: BrokerAddress) -> dict[str, Any]:
    """transport ssl, and the TLS paths an amqps address gave (absolute: the node reads them)."""
    assert peer.tls is not None
    paths = {"tls_ca": peer.tls.ca, "tls_cert": peer.tls.cert, "tls_key": peer.tls.key}
    return {"transport": TLS_TRANSPORT} | {key: str(path.absolute()) for key, path in paths.items() if path}


def link_delete(peer: BrokerAddress) -> Request:
    return ("links.delete", {"host": peer.host, "port": peer.port})


def route_add(spec: RouteSpec, peer: BrokerAddress, options: RouteOptions) -> Request:
    """routes.add: which link (by peer), which route, and how it behaves."""
    arguments: dict[str, Any] = {"host": peer.host, "port": peer.port, **spec.identity()}
    if spec.kind != "queue":
        arguments.update(tag=spec.tag, excludes=list(spec.excludes))
    arguments.update(
        durable=options.durable, src_local=options.src_local, ack=options.ack, credit=options.credit
    )
    return ("routes.add", arguments)


def route_delete(spec: RouteSpec, peer: BrokerAddress) -> Request:
    return ("routes.delete", {"host": peer.host, "port": peer.port, **spec.identity()})


def federation_identity(parent: BrokerAddress, exchange: str, vhost: str) -> dict[str, Any]:
    """What names a federation to federations.add and federations.delete: the parent, the
    exchange and its vhost."""
    return {"host": parent.host, "port": parent.port, "exchange": exchange, "vhost": vhost}


def federation_add(
    parent: Parent, exchange: str, vhost: str, federation_type: str | None, durable: bool
) -> Request:
    """federations.add; a null type and login let the child pick its defaults. An amqps
    parent makes an ssl peering, as link_add makes an ssl link (an empty login: EXTERNAL)."""
    address = parent.address
    login = address if parent.login_given else None
    arguments = {
        **federation_identity(address, exchange, vhost),
        "type": federation_type,
        "username": login.username if login else None,
        "password": login.password if login else None,
        "durable": durable,
    }
    if address.vhost is not None:  # a URL's path: the parent's vhost
        arguments["parent_vhost"] = address.vhost
    if address.tls is not None:
        arguments.update(_tls_arguments(address))
        if login is None:
            arguments.update(username="", password="")
    return ("federations.add", arguments)


def federation_delete(parent: BrokerAddress, exchange: str, vhost: str) -> Request:
    return ("federations.delete", federation_identity(parent, exchange, vhost))
