"""The difference between a topology file and its live nodes, as a plan of management requests.

`diff` compares, node by node, what the file declares with what `read_live` found, and turns
every difference into a `Change` carrying the exact requests amq-config and amq-route would
send for it (their own argument builders make them), or into a `Drift` that apply does not
touch. It is pure: unit tests give it a LiveState built in code. `plan_topology` reads the
nodes and diffs.

What is compared, per node, and how an object is named on it:

| kind | identity | compared |
| --- | --- | --- |
| exchange | name | type, durable, auto_delete, internal |
| queue | name | durable, auto_delete |
| binding | exchange, queue, key, arguments | (identity only) |
| link | the peer's host:port (on the opener) | durable, transport |
| route | far end, kind, exchange, key or queue (on the holder) | push, durable, ack, credit, tag, excludes |
| federation | exchange, vhost "/" (on the child) | parent, type |

Nothing here can be changed in place: AMQP redeclares refuse other flags, and links, routes and
federations have no update operation. A difference is therefore a delete and a create, which
loses what the object holds (messages, bindings, the routes on a link), so it is planned only
with `prune`; without it, it is an error-level drift line and apply leaves the object alone.
In short, **apply without --prune never deletes anything**.

With `prune`, what the file does not declare is deleted, except what is not the topology's
(`protected_*`): the default and `amq.*` exchanges (built in, system, or reserved), queues
federation makes (`federation.*`: bridge queues, outboxes, durable route queues, peering
queues on a parent), server-named and other `amq.*` queues, exclusive queues (they belong to the
connection that declared them), the default exchange's bindings and bindings of protected
queues, links, routes and federations to nodes that are not in the file, and federations the
node's own configuration makes (source `config`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from federation import formatting
from federation.address import BrokerAddress
from federation.management_client import ClientFactory, ManagementClient
from federation.requests import (
    Parent,
    Request,
    RouteOptions,
    RouteSpec,
    endpoint,
    federation_add,
    federation_delete,
    link_add,
    link_delete,
    route_add,
    route_delete,
)
from gateway.names import RESERVED_PREFIX
from topology.changes import KINDS, Action, Change, Drift, Plan
from topology.live import LiveNode, LiveState, read_live
from topology.model import GUEST, VHOST, Binding, Exchange, Node, Queue, Topology
from topology.plan_requests import (
    binding_request,
    exchange_add,
    exchange_detail,
    link_detail,
    queue_add,
    queue_delete,
    queue_detail,
    route_detail,
    route_name,
    show,
)
from topology.routemap import federation_record, route_record

#: A route's attributes compared with the live one (its identity aside), as routes.list names them.
ROUTE_ATTRIBUTES = ("src_local", "durable", "ack", "credit", "tag", "excludes")
#: Queues federation declares for itself (bridge, outbox, durable route and peering queues).
FEDERATION_QUEUE_PREFIX = "federation."


# -- the diff -------------------------------------------------------------------------------


def diff(topology: Topology, live: LiveState, prune: bool) -> Plan:
    """The plan that makes the nodes `live` describes match `topology` (pure)."""
    plan = Plan(topology, prune)
    for name, node in topology.nodes.items():
        state = live.nodes.get(name, "not read")
        if isinstance(state, str):
            plan.unreachable[name] = state
            continue
        _NodeDiff(topology, node, state, plan).run()
    return plan


async def plan_topology(
    topology: Topology, prune: bool, timeout: float, connect: ClientFactory = ManagementClient.connect
) -> Plan:
    """Read every node (concurrently) and diff; apply_plan runs the result."""
    plan = diff(topology, await read_live(topology, timeout, connect), prune)
    plan.timeout = timeout
    return plan


def protected_exchange(name: str) -> bool:
    """The default exchange and every `amq.*` one (built-in, system, or reserved to the broker)."""
    return name == "" or name.startswith(RESERVED_PREFIX)


def protected_queue(record: formatting.Record) -> bool:
    """Queues that are not the topology's: federation's own, server-named (`amq.gen-*`) and
    other `amq.*` ones, and exclusive ones (their connection's)."""
    name = str(record.get("name", ""))
    return (
        name.startswith(FEDERATION_QUEUE_PREFIX)
        or name.startswith(RESERVED_PREFIX)
        or bool(record.get("exclusive"))
    )


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """`attr: old -> new` for every attribute that differs, in `new`'s order."""
    return [
        f"{name}: {show(old.get(name))} -> {show(value)}"
        for name, value in new.items()
        if old.get(name) != value
    ]


def federation_parent(parent: Node) -> Parent:
    """The parent as `amq-route federate add` names it: with a login only when the file names
    credentials for it (else the child uses its own attach login, as amq-route without a login
    in the address)."""
    return Parent(parent.address, parent.credentials != GUEST)


def delete_federation(record: formatting.Record) -> Request:
    """`amq-route federate del <child> <parent> <exchange>`'s request, for a live federation."""
    parent = formatting.federation_parent(record)
    return federation_delete(parent, str(record["exchange"]), str(record.get("vhost", VHOST)))


def binding_name(exchange: str, queue: str, key: str, arguments: dict[str, Any]) -> str:
    name = f"{exchange or '(default)'} -> {queue} key {show(key)}"
    return f"{name} arguments {show(arguments)}" if arguments else name


def route_identity(record: formatting.Record) -> tuple[str, str, str, str | None, str | None]:
    """(far end host:port, kind, exchange, key, queue): how a node tells its routes apart."""
    kind = str(record.get("kind"))
    return (
        formatting.route_peer(record),
        kind,
        str(record.get("exchange")),
        record.get("key") if kind == "exchange" else None,
        record.get("queue") if kind == "queue" else None,
    )


class _NodeDiff:
    """The diff of one node that could be read; adds to the plan."""

    def __init__(self, topology: Topology, node: Node, live: LiveNode, plan: Plan) -> None:
        self.topology = topology
        self.node = node
        self.live = live
        self.plan = plan
        self.prune = plan.prune
        #: Objects deleted or replaced here: what hangs on them goes with them.
        self.gone: dict[str, set[Any]] = {kind: set() for kind in KINDS}
        #: The nodes of the file by where they listen: links, routes and federations to any
        #: other address are not the topology's.
        self.owned = {(n.host, n.port): n for n in topology.nodes.values()}
        self.owned_endpoints = {endpoint(BrokerAddress(n.host, n.port)): n for n in topology.nodes.values()}

    def run(self) -> None:
        self.exchanges()
        self.queues()
        self.bindings()
        self.links()
        self.routes()
        self.federations()

    # -- plan entries -----------------------------------------------------------------------

    def change(self, action: Action, kind: str, name: str, detail: list[str], *requests: Request) -> None:
        self.plan.changes.append(Change(action, self.node.name, kind, name, detail, list(requests)))

    def drift(
        self,
        severity: Literal["error", "warning"],
        kind: str,
        name: str,
        message: str,
        detail: list[str],
        needs_prune: bool = False,
    ) -> None:
        self.plan.drift.append(Drift(severity, self.node.name, kind, name, message, detail, needs_prune))

    def replace(
        self, kind: str, name: str, key: Any, detail: list[str], delete: Request, create: Request
    ) -> None:
        """A changed object: deleted and created again with --prune, else an error drift."""
        if self.prune:
            self.gone[kind].add(key)
            self.change("change", kind, name, detail, delete, create)
        else:
            self.drift(
                "error",
                kind,
                name,
                "cannot be changed in place: apply --prune deletes and creates it",
                detail,
                needs_prune=True,
            )

    def extra(self, kind: str, name: str, key: Any, detail: list[str], delete: Request) -> None:
        """An object the file does not declare: deleted with --prune, else kept (a warning)."""
        if self.prune:
            self.gone[kind].add(key)
            self.change("delete", kind, name, detail, delete)
        else:
            self.drift("warning", kind, name, "not in the file (kept: apply --prune deletes it)", detail)

    def declared(self, items: Iterable[Any]) -> list[Any]:
        return [item for item in items if getattr(item, "node", None) == self.node.name]

    # -- exchanges, queues, bindings ----------------------------------------------------------

    def exchanges(self) -> None:
        live = {str(record["name"]): record for record in self.live.exchanges}
        declared: list[Exchange] = self.declared(self.topology.exchanges)
        for exchange in declared:
            wanted = {
                "type": exchange.type,
                "durable": exchange.durable,
                "auto_delete": exchange.auto_delete,
                "internal": exchange.internal,
            }
            record = live.get(exchange.name)
            if record is None and protected_exchange(exchange.name):
                self.drift(
                    "error", "exchange", exchange.name, "a built-in exchange the node does not have", []
                )
            elif record is None:
                self.change(
                    "create", "exchange", exchange.name, exchange_detail(wanted), exchange_add(exchange)
                )
            elif changed := differences(record, wanted):
                if protected_exchange(exchange.name):
                    self.drift(
                        "error", "exchange", exchange.name, "a built-in exchange cannot be changed", changed
                    )
                else:
                    delete = ("exchanges.delete", {"name": exchange.name})
                    self.replace(
                        "exchange", exchange.name, exchange.name, changed, delete, exchange_add(exchange)
                    )
        names = {exchange.name for exchange in declared}
        for name, record in sorted(live.items()):
            if name not in names and not protected_exchange(name):
                detail = exchange_detail(record)
                self.extra("exchange", name, name, detail, ("exchanges.delete", {"name": name}))

    def queues(self) -> None:
        live = {str(record["name"]): record for record in self.live.queues}
        declared: list[Queue] = self.declared(self.topology.queues)
        for queue in declared:
            wanted = {"durable": queue.durable, "auto_delete": queue.auto_delete}
            record = live.get(queue.name)
            if record is None:
                self.change("create", "queue", queue.name, queue_detail(wanted), queue_add(queue))
            elif changed := differences(record, wanted):
                self.replace(
                    "queue", queue.name, queue.name, changed, queue_delete(queue.name), queue_add(queue)
                )
        names = {queue.name for queue in declared}
        for name, record in sorted(live.items()):
            if name not in names and not protected_queue(record):
                self.extra("queue", name, name, queue_detail(record), queue_delete(name))

    def bindings(self) -> None:
        queues = {str(record["name"]): record for record in self.live.queues}
        live: dict[tuple[str, str, str, str], formatting.Record] = {}
        for record in self.live.bindings:
            if record.get("destination_kind", "queue") == "queue":
                edge = (str(record["exchange"]), str(record["destination"]), str(record["routing_key"]))
                live[(*edge, show(record.get("arguments") or {}))] = record
        declared: list[Binding] = self.declared(self.topology.bindings)
        wanted: set[tuple[str, str, str, str]] = set()
        for binding in declared:
            key = (binding.exchange, binding.queue, binding.key, show(binding.arguments))
            wanted.add(key)
            recreated = binding.exchange in self.gone["exchange"] or binding.queue in self.gone["queue"]
            if key not in live or recreated:
                name = binding_name(binding.exchange, binding.queue, binding.key, binding.arguments)
                self.change(
                    "create",
                    "binding",
                    name,
                    [],
                    binding_request("bindings.add", *key[:3], binding.arguments),
                )
        for key, record in sorted(live.items()):
            exchange, queue, routing_key, _ = key
            queue_record = queues.get(queue, {"name": queue})
            if key in wanted or exchange == "" or protected_queue(queue_record):
                continue
            arguments = dict(record.get("arguments") or {})
            name = binding_name(exchange, queue, routing_key, arguments)
            self.extra(
                "binding",
                name,
                key,
                [],
                binding_request("bindings.delete", exchange, queue, routing_key, arguments),
            )

    # -- links, routes, federations -----------------------------------------------------------

    def links(self) -> None:
        live = {(record["host"], record["port"]): record for record in self.live.links}
        wanted: set[tuple[str, int]] = set()
        for link in self.topology.effective_links():
            if link.opener != self.node.name:
                continue
            peer = self.topology.nodes.get(link.peer)
            if peer is None:
                self.drift("error", "link", f"to {link.peer}", "no node of that name in the file", [])
                continue
            address = (peer.host, peer.port)
            wanted.add(address)
            name = f"to {peer.name} {peer.endpoint}"
            record = live.get(address)
            add = link_add(peer.address, RouteOptions(durable=link.durable, transport=link.transport))
            if record is None:
                self.change("create", "link", name, link_detail(link.durable, link.transport), add)
            elif changed := differences(record, {"durable": link.durable, "transport": link.transport}):
                delete = link_delete(peer.address)
                self.replace("link", name, address, changed, delete, add)
        for address, record in sorted(live.items(), key=lambda item: (str(item[0][0]), int(item[0][1]))):
            peer = self.owned.get(address)
            if address in wanted or peer is None:
                continue
            delete = link_delete(peer.address)
            detail = link_detail(bool(record.get("durable")), str(record.get("transport")))
            self.extra("link", f"to {peer.name} {peer.endpoint}", address, detail, delete)

    def routes(self) -> None:
        live = {route_identity(record): record for record in self.live.routes}
        wanted: set[tuple[str, str, str, str | None, str | None]] = set()
        for route in self.topology.routes:
            if route.holder != self.node.name:
                continue
            far = self.topology.nodes.get(route.far_end)
            if far is None:
                self.drift(
                    "error",
                    "route",
                    f"{route.kind} {route.exchange}",
                    f"no node '{route.far_end}' in the file",
                    [],
                )
                continue
            identity = (
                endpoint(BrokerAddress(far.host, far.port)),
                route.kind,
                route.exchange,
                route.key if route.kind == "exchange" else None,
                route.queue if route.kind == "queue" else None,
            )
            wanted.add(identity)
            # What the holder will list once the route is added: the compared attributes, and
            # the tag to send (its own, else the holder's from the file).
            expected = route_record(self.topology, route)
            spec = RouteSpec(
                route.kind,
                route.exchange,
                key=identity[3],
                queue=identity[4],
                tag=expected["tag"],
                excludes=tuple(route.excludes),
            )
            behaviour = RouteOptions(
                durable=route.durable, src_local=route.push, ack=route.ack, credit=route.credit
            )
            add = route_add(spec, far.address, behaviour)
            name = route_name(route.kind, route.exchange, identity[3], identity[4], route.push, far)
            wanted_attributes = {attribute: expected[attribute] for attribute in ROUTE_ATTRIBUTES}
            record = live.get(identity)
            local = route.queue if route.kind == "queue" and route.push else route.exchange
            local_kind = "queue" if route.kind == "queue" and route.push else "exchange"
            if record is None or (far.host, far.port) in self.gone["link"]:
                self.change("create", "route", name, route_detail(wanted_attributes), add)
            elif changed := differences(record, wanted_attributes):
                self.replace("route", name, identity, changed, route_delete(spec, far.address), add)
            elif local in self.gone[local_kind]:
                # Its exchange (or queue) is deleted and created again: so is the route, which
                # was attached to the old one.
                detail = [f"its {local_kind} {local} is deleted and created again"]
                self.change("change", "route", name, detail, route_delete(spec, far.address), add)
        for identity, record in sorted(live.items(), key=lambda item: tuple(str(part) for part in item[0])):
            peer = self.owned_endpoints.get(identity[0])
            if identity in wanted or peer is None:
                continue
            push = bool(record.get("src_local"))
            spec = RouteSpec(identity[1], identity[2], key=identity[3], queue=identity[4])
            name = route_name(identity[1], identity[2], identity[3], identity[4], push, peer)
            detail = route_detail({attribute: record.get(attribute) for attribute in ROUTE_ATTRIBUTES})
            self.extra("route", name, identity, detail, route_delete(spec, peer.address))

    def federations(self) -> None:
        live = {
            str(record["exchange"]): record
            for record in self.live.federations
            if record.get("vhost", VHOST) == VHOST
        }
        wanted: set[str] = set()
        for federation in self.topology.federations:
            if federation.child != self.node.name:
                continue
            parent = self.topology.nodes.get(federation.parent)
            if parent is None:
                self.drift(
                    "error",
                    "federation",
                    federation.exchange,
                    f"no node '{federation.parent}' in the file",
                    [],
                )
                continue
            wanted.add(federation.exchange)
            name = f"{federation.exchange} => {parent.name} {parent.endpoint}"
            add = federation_add(federation_parent(parent), federation.exchange, VHOST, federation.type, True)
            expected = federation_record(self.topology, federation)
            attributes = {attribute: expected[attribute] for attribute in ("parent", "type")}
            record = live.get(federation.exchange)
            if record is None:
                self.change("create", "federation", name, [attributes["type"], "durable"], add)
            elif changed := differences(record, attributes):
                if record.get("source") == "config":
                    message = "federated by the node's configuration: change it there"
                    self.drift("error", "federation", name, message, changed)
                else:
                    self.replace(
                        "federation", name, federation.exchange, changed, delete_federation(record), add
                    )
        for exchange, record in sorted(live.items()):
            parent_address = formatting.federation_parent(record)
            peer = self.owned.get((parent_address.host, parent_address.port))
            if exchange in wanted or peer is None or record.get("source") == "config":
                continue
            name = f"{exchange} => {peer.name} {peer.endpoint}"
            self.extra("federation", name, exchange, [str(record.get("type"))], delete_federation(record))
