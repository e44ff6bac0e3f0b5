"""amq-route: links and federation routes between nodes, with qpid-route's grammar and output,
and OpenAMQ's exchange federation (`federate`).

Which node a request goes to is qpid-route's rule: a link, and every route riding on it, lives
on the node that opens the link. That is the destination (it pulls from the source), or with
-s/--src-local the source (it pushes to the destination). A federated exchange lives on its
child, which opens the peering to its parent: `federate add|del` ask the child. `list`, `map`
and `flush` ask the one node named, localhost by default.

Each command is an async function of (Context, parsed arguments) returning the exit status;
nodes are reached only through the Context's client factory, so unit tests run every command
against fake nodes. The requests each command sends are listed in docs/cli.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from federation.address import BrokerAddress
from federation.cli import formatting
from federation.cli.common import EXIT_FAILED, broker_address, count, default, parse, run, timeout_seconds
from federation.cli.management_client import Client, ClientFactory, ManagementClient, ManagementFailed
from gateway.federation_config import ALIASES, TYPES

LOCALHOST = "localhost"
#: The only transport links support; qpid's rdma and ssl are refused with a usage error.
TRANSPORTS = ("tcp",)
#: What `federate add --type` accepts: the node's federation types and their aliases (data).
FEDERATION_TYPES = (*TYPES, *ALIASES)
#: The vhost of the exchange `federate` names unless --vhost is given.
DEFAULT_VHOST = "/"

USAGE = """\
amq-route [OPTIONS] link add  <dest-broker> <src-broker>
       amq-route [OPTIONS] link del  <dest-broker> <src-broker>
       amq-route [OPTIONS] link list [<broker>]

       amq-route [OPTIONS] dynamic add <dest-broker> <src-broker> <exchange> [tag] [exclude-list]
       amq-route [OPTIONS] dynamic del <dest-broker> <src-broker> <exchange>

       amq-route [OPTIONS] route add   <dest-broker> <src-broker> <exchange> <routing-key> [tag] [exclude-list]
       amq-route [OPTIONS] route del   <dest-broker> <src-broker> <exchange> <routing-key>
       amq-route [OPTIONS] queue add   <dest-broker> <src-broker> <dest-exchange> <src-queue>
       amq-route [OPTIONS] queue del   <dest-broker> <src-broker> <dest-exchange> <src-queue>
       amq-route [OPTIONS] route list  [<broker>]
       amq-route [OPTIONS] route map   [<broker>]
       amq-route [OPTIONS] route flush [<broker>]

       amq-route [OPTIONS] federate add  <child-broker> <parent-broker> <exchange> [--type TYPE] [--vhost VHOST]
       amq-route [OPTIONS] federate del  <child-broker> <parent-broker> <exchange> [--vhost VHOST]
       amq-route [OPTIONS] federate list [<broker>]

       amq-route [OPTIONS] topology check FILE
       amq-route [OPTIONS] topology map   FILE [--format text|json|dot|png] [-o PATH] [--from NODE] [--live]
       amq-route [OPTIONS] topology plan  FILE [--prune] [--detailed-exitcode]
       amq-route [OPTIONS] topology apply FILE [--prune]"""

DESCRIPTION = """\
Manage federation links and routes between amq-gateway nodes, and exchanges federated to a
parent node.

Broker address: [user/password@]host[:port] (port 5672, user guest/guest, by default); a
<broker> left out is localhost. Options may come before or after the command."""


@dataclass(frozen=True)
class Options:
    """The global options, as the commands use them."""

    verbose: bool
    quiet: bool
    durable: bool
    del_empty_link: bool
    src_local: bool
    ack: int | None
    credit: int | None
    transport: str
    timeout: float


@dataclass(frozen=True)
class RouteSpec:
    """One route as the command line names it; `kind` is dynamic, exchange or queue."""

    kind: str
    exchange: str
    key: str | None = None
    queue: str | None = None
    tag: str | None = None
    excludes: tuple[str, ...] = ()

    def identity(self) -> dict[str, Any]:
        """What tells this route apart from the others on the same link (qpid-route's rule:
        the exchange, plus the key of an exchange route or the queue of a queue route)."""
        identity: dict[str, Any] = {"kind": self.kind, "exchange": self.exchange}
        if self.kind == "exchange":
            identity["key"] = self.key
        elif self.kind == "queue":
            identity["queue"] = self.queue
        return identity

    def matches(self, record: formatting.Record, peer: str) -> bool:
        """Whether a route record of the node is this route on the link to `peer`."""
        if formatting.route_peer(record) != peer:
            return False
        return all(record.get(name) == value for name, value in self.identity().items())

    def describe(self) -> str:
        """The route for -v lines and warnings: `exchange(key)` or `exchange(queue)`."""
        return formatting.route_description(self.identity())


@dataclass(frozen=True)
class Parent:
    """A federate command's parent node, and whether its address gave a login: without one the
    child logs in to the parent with its own configured attach login, not guest."""

    address: BrokerAddress
    login_given: bool


def parent_address(text: str) -> Parent:
    """argparse type for <parent-broker>: a broker address, remembering if it had credentials."""
    return Parent(broker_address(text), "@" in text)


@dataclass(frozen=True)
class Context:
    """What every command needs: the options and how to reach a node."""

    options: Options
    connect: ClientFactory

    def client(self, address: BrokerAddress) -> AbstractAsyncContextManager[Client]:
        """A management client on `address`, within the --timeout."""
        return self.connect(address, self.options.timeout)

    def say(self, text: str) -> None:
        """One -v line: what the command is doing."""
        if self.options.verbose:
            print(text, flush=True)

    def ends(self, dest: BrokerAddress, src: BrokerAddress) -> tuple[BrokerAddress, BrokerAddress]:
        """(the node the request goes to, the peer its link reaches)."""
        return (src, dest) if self.options.src_local else (dest, src)


def endpoint(address: BrokerAddress) -> str:
    """`host:port` (IPv6 in brackets), as route records and every listing name a node."""
    return str(BrokerAddress(address.host, address.port))


def link_arguments(peer: BrokerAddress, options: Options) -> dict[str, Any]:
    """links.add's arguments: the peer, with the credentials the link logs in with."""
    return {
        "host": peer.host,
        "port": peer.port,
        "username": peer.username,
        "password": peer.password,
        "durable": options.durable,
        "transport": options.transport,
    }


def route_arguments(spec: RouteSpec, peer: BrokerAddress, options: Options) -> dict[str, Any]:
    """routes.add's arguments: which link (by peer), which route, and how it behaves."""
    arguments: dict[str, Any] = {"host": peer.host, "port": peer.port, **spec.identity()}
    if spec.kind != "queue":
        arguments.update(tag=spec.tag, excludes=list(spec.excludes))
    arguments.update(
        durable=options.durable, src_local=options.src_local, ack=options.ack, credit=options.credit
    )
    return arguments


def federation_identity(args: argparse.Namespace) -> dict[str, Any]:
    """What names a federation to federations.add and federations.delete: the parent, the
    exchange and its vhost."""
    parent: BrokerAddress = args.parent.address
    return {"host": parent.host, "port": parent.port, "exchange": args.exchange, "vhost": args.vhost}


def federation_arguments(args: argparse.Namespace, options: Options) -> dict[str, Any]:
    """federations.add's arguments; a null type and login let the child pick its defaults."""
    parent: Parent = args.parent
    login = parent.address if parent.login_given else None
    return {
        **federation_identity(args),
        "type": args.type,
        "username": login.username if login else None,
        "password": login.password if login else None,
        "durable": options.durable,
    }


async def find_link(client: Client, peer: BrokerAddress) -> formatting.Record | None:
    """The node's link to `peer`, if it has one."""
    for link in await client.call("links.list"):
        if link["host"] == peer.host and link["port"] == peer.port:
            return link
    return None


def refuse_itself(node: BrokerAddress, peer: BrokerAddress, doing: str) -> None:
    """A node named as its own peer (the same host:port) is a usage error, before any request:
    the node cannot tell its own address from another's."""
    if endpoint(node) == endpoint(peer):
        raise ManagementFailed("usage", f"{doing} a node to itself is not permitted")


async def ensure_link(context: Context, client: Client, node: BrokerAddress, peer: BrokerAddress) -> None:
    """Create the link unless it exists (a route's command creates its link, as qpid-route's
    does); an existing link is left as it is, durability included."""
    refuse_itself(node, peer, "linking")
    if await find_link(client, peer) is None:
        context.say(f"Adding link {endpoint(node)} -> {endpoint(peer)}")
        await client.call("links.add", link_arguments(peer, context.options))


# -- commands -------------------------------------------------------------------------------


async def link_add(context: Context, args: argparse.Namespace) -> int:
    node, peer = context.ends(args.dest, args.src)
    async with context.client(node) as client:
        await ensure_link(context, client, node, peer)
    return 0


async def link_del(context: Context, args: argparse.Namespace) -> int:
    node, peer = context.ends(args.dest, args.src)
    async with context.client(node) as client:
        if await find_link(client, peer) is None:
            raise ManagementFailed("NOT_FOUND", f"{endpoint(node)} has no link to {endpoint(peer)}")
        context.say(f"Deleting link {endpoint(node)} -> {endpoint(peer)}")
        await client.call("links.delete", {"host": peer.host, "port": peer.port})
    return 0


async def print_table(
    method: str,
    table: Callable[[Sequence[formatting.Record]], list[str]],
    context: Context,
    args: argparse.Namespace,
) -> int:
    """A `list` command: the records `method` returns from the node named, as `table` lays
    them out."""
    async with context.client(args.broker) as client:
        records = await client.call(method)
    print("\n".join(table(records)))
    return 0


link_list = partial(print_table, "links.list", formatting.link_table)


async def add_route(context: Context, args: argparse.Namespace, spec: RouteSpec) -> int:
    """dynamic/route/queue add: the link first if missing, then the route unless it exists."""
    node, peer = context.ends(args.dest, args.src)
    async with context.client(node) as client:
        await ensure_link(context, client, node, peer)
        routes = await client.call("routes.list")
        if any(spec.matches(route, endpoint(peer)) for route in routes):
            if context.options.quiet:
                return 0
            print(f"Duplicate Route - ignoring: {spec.describe()}", file=sys.stderr)
            return EXIT_FAILED
        arrow = "=>" if context.options.src_local else "<="
        context.say(f"Adding {spec.kind} route {endpoint(node)} {arrow} {endpoint(peer)} {spec.describe()}")
        await client.call("routes.add", route_arguments(spec, peer, context.options))
    return 0


async def del_route(context: Context, args: argparse.Namespace, spec: RouteSpec) -> int:
    """dynamic/route/queue del; with -e the link goes too once its last route is gone. With -q
    a missing link or route is not an error (qpid-route's behaviour)."""
    node, peer = context.ends(args.dest, args.src)
    async with context.client(node) as client:
        if await find_link(client, peer) is None:
            if context.options.quiet:
                return 0
            raise ManagementFailed("NOT_FOUND", f"{endpoint(node)} has no link to {endpoint(peer)}")
        routes = await client.call("routes.list")
        if not any(spec.matches(route, endpoint(peer)) for route in routes):
            if context.options.quiet:
                return 0
            raise ManagementFailed(
                "NOT_FOUND", f"no route {spec.describe()} on the link {endpoint(node)} -> {endpoint(peer)}"
            )
        context.say(
            f"Deleting {spec.kind} route {spec.describe()} on the link {endpoint(node)} -> {endpoint(peer)}"
        )
        await client.call("routes.delete", {"host": peer.host, "port": peer.port, **spec.identity()})
        if context.options.del_empty_link:
            await delete_link_if_empty(context, client, node, peer)
    return 0


async def delete_link_if_empty(
    context: Context, client: Client, node: BrokerAddress, peer: BrokerAddress
) -> None:
    """-e: delete the link when no route rides on it any more."""
    remaining = await client.call("routes.list")
    if any(formatting.route_peer(route) == endpoint(peer) for route in remaining):
        return
    context.say(f"Deleting link {endpoint(node)} -> {endpoint(peer)}: its last route is gone")
    await client.call("links.delete", {"host": peer.host, "port": peer.port})


async def route_list(context: Context, args: argparse.Namespace) -> int:
    async with context.client(args.broker) as client:
        routes = await client.call("routes.list")
    lines = formatting.route_list(endpoint(args.broker), routes)
    if lines:
        print("\n".join(lines))
    return 0


async def route_flush(context: Context, args: argparse.Namespace) -> int:
    """Delete every route on the node in one request, and with -e every link too."""
    async with context.client(args.broker) as client:
        flushed = await client.call("routes.flush", {"links": context.options.del_empty_link})
    for route in flushed["routes"]:
        context.say(
            f"Deleted route: {formatting.route_peer(route)} {route['exchange']} {formatting.route_key_text(route)}"
        )
    for link in flushed["links"]:
        context.say(f"Deleted link: {link_endpoint(link)}")
    return 0


async def route_map(context: Context, args: argparse.Namespace) -> int:
    """Walk every node reachable from the one named over links and federations (a child to its
    parent), with the first node's credentials, then draw the routes and federations found on
    them. A node that cannot be read is reported on its line and left out; only the first node
    must answer. The walk and the text are MapWalk's, which the offline map
    (topology.routemap) shares."""
    walk = MapWalk(args.broker, await read_node(context, args.broker))
    print("\n".join(walk.heading()), flush=True)
    for address in walk.pending():
        try:
            view = await read_node(context, address)
        except ManagementFailed as failure:
            print(walk.failed(address, f"Failed: {failure}"), flush=True)
            continue
        print(walk.reached(address, view), flush=True)
    print("")
    print("\n".join(walk.sections()))
    return 0


def link_endpoint(link: formatting.Record) -> str:
    """A link record's far end as `host:port`, how the map names nodes."""
    return str(link_peer(link))


def link_peer(link: formatting.Record) -> BrokerAddress:
    """A link record's far end, without credentials."""
    return BrokerAddress(link["host"], link["port"])


@dataclass(frozen=True)
class NodeView:
    """What `route map` reads of one node."""

    links: list[formatting.Record]
    routes: list[formatting.Record]
    federations: list[formatting.Record]

    def peers(self) -> list[BrokerAddress]:
        """The nodes to visit from this one: its links' far ends, then its federations' parents."""
        return [
            *map(link_peer, self.links),
            *map(formatting.federation_parent, self.federations),
        ]


class MapWalk:
    """`route map`'s breadth-first walk and its text, apart from how nodes are read: the live
    map reads them through management, the offline map (topology.routemap) takes them from a
    topology file, and both print the same lines.

    The walk starts at a node already read, then visits each node's link peers and then its
    federations' parents, each once (by `host:port`), in the order found; every node after the
    first is reached with the first node's credentials. `pending()` yields the nodes to read
    while the walk grows; the caller answers each with `reached` or `failed`, which return the
    probe line. `lines()` is the whole map, `heading()` and `sections()` its two halves."""

    def __init__(self, start: BrokerAddress, view: NodeView) -> None:
        self.start = start
        self.views: list[tuple[str, NodeView]] = []
        self.probes: list[str] = []
        self._seen = {endpoint(start)}
        self._queue: list[BrokerAddress] = []
        self.reached(start, view)

    def pending(self) -> Iterator[BrokerAddress]:
        """The nodes still to read, first found first; nodes found meanwhile join the end."""
        while self._queue:
            yield self._queue.pop(0)

    def reached(self, address: BrokerAddress, view: NodeView) -> str:
        """`address` was read: its probe line; its peers are visited later."""
        self.views.append((endpoint(address), view))
        self.probes.append(formatting.map_probe(endpoint(address), None))
        for peer in view.peers():
            if endpoint(peer) not in self._seen:
                self._seen.add(endpoint(peer))
                self._queue.append(replace(peer, username=self.start.username, password=self.start.password))
        return self.probes[-1]

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


async def read_node(context: Context, address: BrokerAddress) -> NodeView:
    """The links, routes and federations of one node."""
    async with context.client(address) as client:
        return NodeView(
            await client.call("links.list"),
            await client.call("routes.list"),
            await client.call("federations.list"),
        )


async def federate_add(context: Context, args: argparse.Namespace) -> int:
    """Federate the child's exchange to its parent; the node refuses what it cannot do (an
    exchange already federated, a missing or system exchange) with its own message."""
    child: BrokerAddress = args.child
    refuse_itself(child, args.parent.address, "federating")
    async with context.client(child) as client:
        record = await client.call("federations.add", federation_arguments(args, context.options))
    context.say(f"Added federation {formatting.federation_line(endpoint(child), record)}")
    return 0


async def federate_del(context: Context, args: argparse.Namespace) -> int:
    """Stop federating the child's exchange; NOT_FOUND from the node if it is not federated to
    that parent."""
    child: BrokerAddress = args.child
    async with context.client(child) as client:
        await client.call("federations.delete", federation_identity(args))
    deleted = {"parent": endpoint(args.parent.address), "exchange": args.exchange, "vhost": args.vhost}
    context.say(f"Deleted federation {formatting.federation_line(endpoint(child), deleted)}")
    return 0


federate_list = partial(print_table, "federations.list", formatting.federation_table)


# -- command line ---------------------------------------------------------------------------

Command = Callable[[Context, argparse.Namespace], Awaitable[int]]


def add_options(parser: argparse.ArgumentParser, main: bool) -> None:
    """The global options, on the main parser (main=True) and on every command's parser."""
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=default(False, main), help="verbose output"
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False, main),
        help="quiet output: no duplicate warnings",
    )
    parser.add_argument(
        "-d",
        "--durable",
        action="store_true",
        default=default(False, main),
        help="the added configuration is durable",
    )
    parser.add_argument(
        "-e",
        "--del-empty-link",
        action="store_true",
        default=default(False, main),
        help="delete a link once its last route is deleted (route flush: every link)",
    )
    parser.add_argument(
        "-s",
        "--src-local",
        action="store_true",
        default=default(False, main),
        help="the source node opens the link and pushes (not for dynamic routes)",
    )
    parser.add_argument(
        "--ack",
        type=count,
        metavar="N",
        default=default(None, main),
        help="acknowledge transfers in batches of N",
    )
    parser.add_argument(
        "--credit",
        type=count,
        metavar="N",
        default=default(None, main),
        help="at most N messages in flight on a route",
    )
    parser.add_argument(
        "-t",
        "--transport",
        metavar="TRANSPORT",
        default=default("tcp", main),
        help="transport of new links (only tcp)",
    )
    parser.add_argument(
        "--timeout",
        type=timeout_seconds,
        metavar="SECS",
        default=default(10.0, main),
        help="how long to wait for a node (seconds, 0: no limit; default 10)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="amq-route",
        usage=USAGE,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(parser, main=True)
    # Explicit progs for the commands' usage lines: argparse would derive them from USAGE.
    groups = parser.add_subparsers(
        dest="group", metavar="{link,dynamic,route,queue,federate,topology}", required=True, prog="amq-route"
    )

    def group(name: str, help_text: str) -> argparse._SubParsersAction:
        sub = groups.add_parser(name, help=help_text, description=help_text)
        return sub.add_subparsers(dest="command", metavar="command", required=True, prog=f"amq-route {name}")

    def command(
        actions: argparse._SubParsersAction, name: str, handler: Command, help_text: str
    ) -> argparse.ArgumentParser:
        leaf = actions.add_parser(name, help=help_text, description=help_text)
        add_options(leaf, main=False)
        leaf.set_defaults(handler=handler, parser=leaf, dynamic=False)
        return leaf

    def ends(leaf: argparse.ArgumentParser) -> None:
        leaf.add_argument("dest", type=broker_address, metavar="dest-broker", help="where messages go")
        leaf.add_argument("src", type=broker_address, metavar="src-broker", help="where messages come from")

    def one_broker(leaf: argparse.ArgumentParser) -> None:
        leaf.add_argument(
            "broker",
            type=broker_address,
            nargs="?",
            default=broker_address(LOCALHOST),
            help="the node (localhost)",
        )

    def federation(leaf: argparse.ArgumentParser) -> None:
        leaf.add_argument(
            "child", type=broker_address, metavar="child-broker", help="the node whose exchange is federated"
        )
        leaf.add_argument(
            "parent",
            type=parent_address,
            metavar="parent-broker",
            help="the node it attaches to; a user/password given here is the child's login there "
            "(default: the child's attach login)",
        )
        leaf.add_argument("exchange", help="the exchange, named the same on both nodes")
        leaf.add_argument(
            "--vhost", default=DEFAULT_VHOST, help=f"vhost of the child's exchange (default {DEFAULT_VHOST})"
        )

    def tag_and_excludes(leaf: argparse.ArgumentParser) -> None:
        leaf.add_argument("tag", nargs="?", help="federation tag of the route (default: the node's)")
        leaf.add_argument(
            "excludes", nargs="?", metavar="exclude-list", help="comma-separated tags not to forward to"
        )

    link = group("link", "links: the connections one node keeps to another")
    ends(command(link, "add", link_add, "add a link from dest-broker to src-broker (-s: the other way)"))
    ends(command(link, "del", link_del, "delete a link and the routes on it"))
    one_broker(command(link, "list", link_list, "list a node's links"))

    dynamic = group("dynamic", "dynamic routes: bindings on dest-broker's exchange pull matching messages")
    leaf = command(
        dynamic, "add", partial(exchange_route, "dynamic", add=True), "add a dynamic route on an exchange"
    )
    ends(leaf)
    leaf.add_argument("exchange")
    tag_and_excludes(leaf)
    leaf.set_defaults(dynamic=True)
    leaf = command(dynamic, "del", partial(exchange_route, "dynamic", add=False), "delete a dynamic route")
    ends(leaf)
    leaf.add_argument("exchange")
    leaf.set_defaults(dynamic=True)

    route = group("route", "static exchange routes, and listing, mapping and flushing routes")
    leaf = command(
        route, "add", partial(exchange_route, "exchange", add=True), "add a route of one binding key"
    )
    ends(leaf)
    leaf.add_argument("exchange")
    leaf.add_argument("key", metavar="routing-key")
    tag_and_excludes(leaf)
    leaf = command(route, "del", partial(exchange_route, "exchange", add=False), "delete an exchange route")
    ends(leaf)
    leaf.add_argument("exchange")
    leaf.add_argument("key", metavar="routing-key")
    one_broker(command(route, "list", route_list, "list the routes a node holds"))
    one_broker(command(route, "map", route_map, "find every linked node and draw the routes between them"))
    one_broker(command(route, "flush", route_flush, "delete every route a node holds (-e: its links too)"))

    queue = group("queue", "queue routes: dest-broker consumes a queue of src-broker into an exchange")
    for name, add in (("add", True), ("del", False)):
        leaf = command(queue, name, partial(queue_route, add=add), f"{name} a queue route")
        ends(leaf)
        leaf.add_argument("exchange", metavar="dest-exchange")
        leaf.add_argument("queue", metavar="src-queue")

    federate = group("federate", "federated exchanges: a child node's exchange attached to its parent's")
    leaf = command(
        federate,
        "add",
        federate_add,
        "federate an exchange of child-broker to the same-named one of parent-broker",
    )
    federation(leaf)
    leaf.add_argument(
        "--type",
        choices=FEDERATION_TYPES,
        metavar="TYPE",
        help=f"{', '.join(FEDERATION_TYPES)} (default: service for a direct exchange, fanout otherwise)",
    )
    federation(command(federate, "del", federate_del, "stop federating an exchange of child-broker"))
    one_broker(command(federate, "list", federate_list, "list a node's federated exchanges"))

    # Imported here, not at the top: the planner reads this module's NodeView and arguments.
    from topology.cli import add_commands

    add_commands(
        partial(command, group("topology", "topology files: check, map, plan and apply a deployment"))
    )
    return parser


async def exchange_route(kind: str, context: Context, args: argparse.Namespace, *, add: bool) -> int:
    """dynamic add|del and route add|del."""
    excludes = tuple(name for name in (getattr(args, "excludes", None) or "").split(",") if name)
    key = args.key if kind == "exchange" else None
    spec = RouteSpec(kind, args.exchange, key=key, tag=getattr(args, "tag", None), excludes=excludes)
    return await (add_route if add else del_route)(context, args, spec)


async def queue_route(context: Context, args: argparse.Namespace, *, add: bool) -> int:
    """queue add|del."""
    spec = RouteSpec("queue", args.exchange, queue=args.queue)
    return await (add_route if add else del_route)(context, args, spec)


def check(args: argparse.Namespace) -> None:
    """Refuse combinations argparse cannot express, as usage errors of the command."""
    if args.transport not in TRANSPORTS:
        args.parser.error(f"transport '{args.transport}' is not supported: links use tcp")
    if args.dynamic and args.src_local:
        args.parser.error("-s/--src-local is not permitted on dynamic routes (the destination must pull)")


def options_of(args: argparse.Namespace) -> Options:
    return Options(
        verbose=args.verbose,
        quiet=args.quiet,
        durable=args.durable,
        del_empty_link=args.del_empty_link,
        src_local=args.src_local,
        ack=args.ack,
        credit=args.credit,
        transport=args.transport,
        timeout=args.timeout,
    )


def main(argv: Sequence[str] | None = None, connect: ClientFactory = ManagementClient.connect) -> int:
    """The amq-route console script; `connect` is replaced by fake nodes in unit tests."""
    args = parse(build_parser(), argv)
    check(args)
    context = Context(options_of(args), connect)
    return run(partial(args.handler, context, args))
