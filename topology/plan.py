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
| link | the peer node (on the opener) | durable, transport |
| route | far end node, kind, exchange, key or queue (on the holder) | push, durable, ack, credit, tag, excludes |
| federation | exchange, vhost "/" (on the child) | parent node, type |

Vhosts, users and permissions, where the file declares some for a node: topology.plan_access.

A node is known by the name it reports, whatever address it was reached at (topology.far_ends):
a link made to `127.0.0.1:5702` is the file's link to the node at `localhost:5702` when both
report one name, and a route or a federation on it is planned at the address the node holds,
not the file's. Only where a name is not known are far ends matched by address; the plan says
which (`*` lines).

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
from gateway.names import RESERVED_PREFIX, TLS_TRANSPORT
from topology.changes import KINDS, Action, Change, Drift, Plan
from topology.far_ends import FarEnd, FarEnds
from topology.live import LiveNode, LiveState, read_live
from topology.model import GUEST, VHOST, Binding, Exchange, Node, Queue, Topology
from topology.plan_access import diff_access
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
    ends = FarEnds(topology, live.views())
    for name, node in topology.nodes.items():
        state = live.nodes.get(name, "not read")
        if isinstance(state, str):
            plan.unreachable[name] = state
            continue
        if state.name is not None and state.name != name:
            plan.reported[name] = state.name
        _NodeDiff(topology, node, state, plan, ends).run()
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


def federation_parent(parent: Node, transport: str) -> Parent:
    """The parent as `amq-route federate add` names it: with a login only when the file names
    credentials for it (else the child uses its own attach login, as amq-route without a login
    in the address); over ssl, at its TLS port with no login (EXTERNAL)."""
    if transport == TLS_TRANSPORT:
        return Parent(parent.link_address(transport), False)
    return Parent(parent.address, parent.credentials != GUEST)


def delete_federation(record: formatting.Record) -> Request:
    """`amq-route federate del <child> <parent> <exchange>`'s request, for a live federation."""
    parent = formatting.federation_parent(record)
    return federation_delete(parent, str(record["exchange"]), str(record.get("vhost", VHOST)))


def binding_name(exchange: str, queue: str, key: str, arguments: dict[str, Any]) -> str:
    name = f"{exchange or '(default)'} -> {queue} key {show(key)}"
    return f"{name} arguments {show(arguments)}" if arguments else name


#: How a node tells its routes apart: (far end's node, kind, exchange, key, queue).
RouteIdentity = tuple[str, str, str, str | None, str | None]


def route_identity(far: str, record: formatting.Record) -> RouteIdentity:
    """The identity of a route record whose far end is the file's node `far` (qpid-route's
    rule: the exchange, plus an exchange route's key or a queue route's queue)."""
    kind = str(record.get("kind"))
    return (
        far,
        kind,
        str(record.get("exchange")),
        record.get("key") if kind == "exchange" else None,
        record.get("queue") if kind == "queue" else None,
    )


class _NodeDiff:
    """The diff of one node that could be read; adds to the plan."""

    def __init__(self, topology: Topology, node: Node, live: LiveNode, plan: Plan, ends: FarEnds) -> None:
        self.topology = topology
        self.node = node
        self.live = live
        self.plan = plan
        self.prune = plan.prune
        self.ends = ends
        #: Objects deleted or replaced here: what hangs on them goes with them (links by address).
        self.gone: dict[str, set[Any]] = {kind: set() for kind in KINDS}
        #: The node's links to nodes of the file, by address, each with that node's name (links
        #: to other nodes are not the topology's); and the first link to each node, by its name.
        self.node_links: list[tuple[str, FarEnd, formatting.Record]] = []
        for record in live.links:
            far = self.far(ends.link(record))
            if far.node is not None:
                self.node_links.append((far.node.name, far, record))
        self.node_links.sort(key=lambda item: (item[1].address.host, item[1].address.port))
        self.linked: dict[str, tuple[FarEnd, formatting.Record]] = {}
        for name, far, record in self.node_links:
            self.linked.setdefault(name, (far, record))

    def run(self) -> None:
        if self.live.access is not None:
            diff_access(self.topology.access, self.node, self.live.access, self.prune, self)
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

    def far(self, far: FarEnd) -> FarEnd:
        """`far`, its note (matched by address: a name was not known) added to the node's once."""
        if far.note:
            notes = self.plan.notes.setdefault(self.node.name, [])
            if far.note not in notes:
                notes.append(far.note)
        return far

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
        wanted: set[str] = set()
        for link in self.topology.effective_links():
            if link.opener != self.node.name:
                continue
            peer = self.topology.nodes.get(link.peer)
            if peer is None:
                self.drift("error", "link", f"to {link.peer}", "no node of that name in the file", [])
                continue
            wanted.add(peer.name)
            address = peer.link_address(link.transport)
            add = link_add(address, RouteOptions(durable=link.durable, transport=link.transport))
            found = self.linked.get(peer.name)
            if found is None:
                detail = link_detail(link.durable, link.transport)
                self.change("create", "link", f"to {peer.name} {address}", detail, add)
            elif changed := differences(found[1], {"durable": link.durable, "transport": link.transport}):
                far = found[0]
                self.replace(
                    "link", f"to {far.label()}", str(far.address), changed, link_delete(far.address), add
                )
        for name, far, record in self.node_links:
            if name in wanted and self.linked[name][1] is record:
                continue
            # Not in the file, or a second link to a node it links to (under another address).
            detail = link_detail(bool(record.get("durable")), str(record.get("transport")))
            self.extra("link", f"to {far.label()}", str(far.address), detail, link_delete(far.address))

    def reached_at(self, node: Node) -> FarEnd:
        """`node` where this node reaches it: at its link's address, whatever address the file
        names, else (no link, or one apply replaces) where apply creates the link."""
        found = self.linked.get(node.name)
        if found is None or str(found[0].address) in self.gone["link"]:
            address = node.link_address(self.topology.link_transport(self.node.name, node.name))
            return FarEnd(BrokerAddress(address.host, address.port), node)
        return found[0]

    def routes(self) -> None:
        live: dict[RouteIdentity, tuple[FarEnd, formatting.Record]] = {}
        kept = {str(far.address) for far, _ in self.linked.values()}
        for record in self.live.routes:
            far = self.far(self.ends.route(self.live.view, record))
            if far.node is None:  # not the topology's
                continue
            identity = route_identity(far.node.name, record)
            # A node linked twice (under two addresses) may hold a route twice: the one on
            # the link the plan keeps is the one compared.
            if identity not in live or str(far.address) in kept:
                live[identity] = (far, record)
        wanted: set[RouteIdentity] = set()
        for route in self.topology.routes:
            if route.holder != self.node.name:
                continue
            far_node = self.topology.nodes.get(route.far_end)
            if far_node is None:
                self.drift(
                    "error",
                    "route",
                    f"{route.kind} {route.exchange}",
                    f"no node '{route.far_end}' in the file",
                    [],
                )
                continue
            # What the holder will list once the route is added: the compared attributes, and
            # the tag to send (its own, else the holder's from the file).
            expected = route_record(self.topology, route)
            identity = route_identity(far_node.name, expected)
            wanted.add(identity)
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
            reached = self.reached_at(far_node)
            add = route_add(spec, reached.address, behaviour)
            name = route_name(
                route.kind, route.exchange, identity[3], identity[4], route.push, reached.label()
            )
            wanted_attributes = {attribute: expected[attribute] for attribute in ROUTE_ATTRIBUTES}
            found = live.get(identity)
            local = route.queue if route.kind == "queue" and route.push else route.exchange
            local_kind = "queue" if route.kind == "queue" and route.push else "exchange"
            if found is None or str(found[0].address) in self.gone["link"]:
                self.change("create", "route", name, route_detail(wanted_attributes), add)
            elif changed := differences(found[1], wanted_attributes):
                self.replace("route", name, identity, changed, route_delete(spec, found[0].address), add)
            elif local in self.gone[local_kind]:
                # Its exchange (or queue) is deleted and created again: so is the route, which
                # was attached to the old one.
                detail = [f"its {local_kind} {local} is deleted and created again"]
                self.change("change", "route", name, detail, route_delete(spec, found[0].address), add)
        for identity, (far, record) in sorted(live.items(), key=lambda item: tuple(map(str, item[0]))):
            if identity in wanted:
                continue
            push = bool(record.get("src_local"))
            spec = RouteSpec(identity[1], identity[2], key=identity[3], queue=identity[4])
            name = route_name(identity[1], identity[2], identity[3], identity[4], push, far.label())
            detail = route_detail({attribute: record.get(attribute) for attribute in ROUTE_ATTRIBUTES})
            self.extra("route", name, identity, detail, route_delete(spec, far.address))

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
            reached = federation_parent(parent, federation.transport)
            name = f"{federation.exchange} => {parent.name} {endpoint(reached.address)}"
            add = federation_add(reached, federation.exchange, VHOST, federation.type, True)
            expected = federation_record(self.topology, federation)
            attributes = {attribute: expected[attribute] for attribute in ("parent", "type")}
            record = live.get(federation.exchange)
            if record is None:
                self.change("create", "federation", name, [attributes["type"], "durable"], add)
                continue
            held = {"parent": record.get("parent"), "type": record.get("type")}
            far = self.far(self.ends.federation(record))
            if far.node == parent:  # the file's parent, by the name it reports, at any address
                name = f"{federation.exchange} => {far.label()}"
                held["parent"] = attributes["parent"]
            if changed := differences(held, attributes):
                if record.get("source") == "config":
                    message = "federated by the node's configuration: change it there"
                    self.drift("error", "federation", name, message, changed)
                else:
                    self.replace(
                        "federation", name, federation.exchange, changed, delete_federation(record), add
                    )
        for exchange, record in sorted(live.items()):
            if exchange in wanted or record.get("source") == "config":
                continue
            far = self.far(self.ends.federation(record))
            if far.node is None:  # not the topology's
                continue
            name = f"{exchange} => {far.label()}"
            self.extra("federation", name, exchange, [str(record.get("type"))], delete_federation(record))
