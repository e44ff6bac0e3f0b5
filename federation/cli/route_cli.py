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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial

from federation import formatting
from federation.address import BrokerAddress
from federation.cli.common import (
    EXIT_FAILED,
    PASSWORDS_HELP,
    Parser,
    broker_address,
    parse,
    run,
    with_passwords,
)
from federation.cli.peers import (
    check_far_end,
    ensure_link,
    find_link,
    is_link_to,
    node_name,
    refuse_itself,
    same_node,
)
from federation.cli.route_options import ADDING, DELETING, READING, Context, add_options, options_of
from federation.management_client import Client, ClientFactory, ManagementClient, ManagementFailed
from federation.requests import (
    Parent,
    RouteSpec,
    endpoint,
    federation_add,
    federation_delete,
    link_add,
    link_delete,
    route_add,
    route_delete,
)
from federation.routemap import MapWalk, NodeView, link_endpoint, read_view
from gateway.federation_config import ALIASES, TYPES
from gateway.names import TRANSPORTS, transport_name

LOCALHOST = "localhost"

#: What `federate add --type` accepts: the node's federation types and their aliases (data).
FEDERATION_TYPES = (*TYPES, *ALIASES)

USAGE = """\
amq-route [OPTIONS] link add  <dest-broker> <src-broker>
       amq-route [OPTIONS] link del  <dest-broker> <src-broker>
       amq-route [OPTIONS] link list [<broker>] [--stats]

       amq-route [OPTIONS] dynamic add <dest-broker> <src-broker> <exchange> [tag] [exclude-list]
       amq-route [OPTIONS] dynamic del <dest-broker> <src-broker> <exchange>

       amq-route [OPTIONS] route add   <dest-broker> <src-broker> <exchange> <routing-key> [tag] [exclude-list]
       amq-route [OPTIONS] route del   <dest-broker> <src-broker> <exchange> <routing-key>
       amq-route [OPTIONS] queue add   <dest-broker> <src-broker> <dest-exchange> <src-queue>
       amq-route [OPTIONS] queue del   <dest-broker> <src-broker> <dest-exchange> <src-queue>
       amq-route [OPTIONS] route list  [<broker>]
       amq-route [OPTIONS] route map   [<broker>]
       amq-route [OPTIONS] route flush [<broker>]

       amq-route [OPTIONS] federate add  <child-broker> <parent-broker> <exchange> [--type TYPE]
       amq-route [OPTIONS] federate del  <child-broker> <parent-broker> <exchange>
       amq-route [OPTIONS] federate list [<broker>]

       amq-route [OPTIONS] topology check FILE
       amq-route [OPTIONS] topology map   FILE [--format text|json|dot|png] [-o PATH] [--from NODE] [--live]
       amq-route [OPTIONS] topology plan  FILE [--prune] [--detailed-exitcode]
       amq-route [OPTIONS] topology apply FILE [--prune]"""

DESCRIPTION = (
    """\
Manage federation links and routes between amq-gateway nodes, and exchanges federated to a
parent node.

Broker address: [user[/password]@]host[:port] (port 5672, user guest/guest, by default), or
amqp://user[:password]@host:port/vhost; a <broker> left out is localhost. Options may come
before the command, or after it where the command takes them (see its --help).

"""
    + PASSWORDS_HELP
)


def parent_address(text: str) -> Parent:
    """argparse type for <parent-broker>: a broker address, remembering if it had credentials."""
    return Parent(broker_address(text), "@" in text)


# -- commands -------------------------------------------------------------------------------


async def add_link(context: Context, args: argparse.Namespace) -> int:
    """Add the link; an existing one (to the same node, by its name) is sent the credentials
    given, and says whether it took them (a link with other credentials reconnects with
    these, which is worth saying)."""
    node, peer = context.ends(args.dest, args.src)
    refuse_itself(node, peer, "linking")
    async with context.client(node) as client:
        links = await client.call("links.list")
        if not any(is_link_to(link, peer) for link in links):
            peer = same_node(context, links, peer, await node_name(context, peer))
        if not any(is_link_to(link, peer) for link in links):
            context.say(f"Adding link {endpoint(node)} -> {endpoint(peer)}")
        record = await client.call(*link_add(peer, context.options.route))
    if record and record.get("change") == "updated":
        print(f"Updated link {endpoint(node)} -> {endpoint(peer)}: it logs in as '{peer.username}' now")
    return 0


async def del_link(context: Context, args: argparse.Namespace) -> int:
    node, peer = context.ends(args.dest, args.src)
    async with context.client(node) as client:
        if await find_link(client, peer) is None:
            raise ManagementFailed("NOT_FOUND", f"{endpoint(node)} has no link to {endpoint(peer)}")
        context.say(f"Deleting link {endpoint(node)} -> {endpoint(peer)}")
        await client.call(*link_delete(peer))
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


async def link_list(context: Context, args: argparse.Namespace) -> int:
    """`link list`, with --stats each link's counters instead of its configuration."""
    table = formatting.link_stats if args.stats else formatting.link_table
    return await print_table("links.list", table, context, args)


async def add_route(context: Context, args: argparse.Namespace, spec: RouteSpec) -> int:
    """dynamic/route/queue add: unless the route exists, check its far end, then add the link
    if missing and the route."""
    node, peer = context.ends(args.dest, args.src)
    refuse_itself(node, peer, "linking")
    async with context.client(node) as client:
        peer_node = await check_far_end(context, spec, peer)
        peer = same_node(context, await client.call("links.list"), peer, peer_node)
        routes = await client.call("routes.list")
        if any(spec.matches(route, endpoint(peer)) for route in routes):
            if context.options.quiet:
                return 0
            print(f"Duplicate Route - ignoring: {spec.describe()}", file=sys.stderr)
            return EXIT_FAILED
        await ensure_link(context, client, node, peer)
        arrow = "=>" if context.options.route.src_local else "<="
        context.say(f"Adding {spec.kind} route {endpoint(node)} {arrow} {endpoint(peer)} {spec.describe()}")
        await client.call(*route_add(spec, peer, context.options.route))
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
        await client.call(*route_delete(spec, peer))
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
    await client.call(*link_delete(peer))


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


async def read_node(context: Context, address: BrokerAddress) -> NodeView:
    """The links, routes and federations of one node."""
    async with context.client(address) as client:
        return await read_view(client)


async def federate_add(context: Context, args: argparse.Namespace) -> int:
    """Federate the child's exchange to its parent; the node refuses what it cannot do (an
    exchange already federated, a missing or system exchange) with its own message."""
    child: BrokerAddress = args.child
    refuse_itself(child, args.parent.address, "federating")
    async with context.client(child) as client:
        request = federation_add(
            args.parent, args.exchange, context.vhost(child), args.type, context.options.route.durable
        )
        record = await client.call(*request)
    context.say(f"Added federation {formatting.federation_line(endpoint(child), record)}")
    return 0


async def federate_del(context: Context, args: argparse.Namespace) -> int:
    """Stop federating the child's exchange; NOT_FOUND from the node if it is not federated to
    that parent."""
    child: BrokerAddress = args.child
    async with context.client(child) as client:
        await client.call(*federation_delete(args.parent.address, args.exchange, context.vhost(child)))
    deleted = {
        "parent": endpoint(args.parent.address),
        "exchange": args.exchange,
        "vhost": context.vhost(child),
    }
    context.say(f"Deleted federation {formatting.federation_line(endpoint(child), deleted)}")
    return 0


federate_list = partial(print_table, "federations.list", formatting.federation_table)


# -- command line ---------------------------------------------------------------------------

Command = Callable[[Context, argparse.Namespace], Awaitable[int]]


@dataclass(frozen=True)
class Mount:
    """A group of commands that lives elsewhere (the planner's `topology`) hung under amq-route,
    with its global options: `add_commands` gets amq-route's `command(name, handler, help)`.
    Whoever composes the console script mounts it, so this package never imports the planner."""

    name: str
    help: str
    add_commands: Callable[[Callable[[str, Command, str], argparse.ArgumentParser]], None]


def build_parser(mounts: Sequence[Mount] = ()) -> argparse.ArgumentParser:
    parser = Parser(
        prog="amq-route",
        usage=USAGE,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(parser, main=True)
    # Explicit progs for the commands' usage lines: argparse would derive them from USAGE.
    groups = parser.add_subparsers(
        dest="group",
        metavar="{"
        + ",".join(["link", "dynamic", "route", "queue", "federate", *(m.name for m in mounts)])
        + "}",
        required=True,
        prog="amq-route",
    )

    def group(name: str, help_text: str) -> argparse._SubParsersAction:
        sub = groups.add_parser(name, help=help_text, description=help_text)
        return sub.add_subparsers(dest="command", metavar="command", required=True, prog=f"amq-route {name}")

    def command(
        actions: argparse._SubParsersAction,
        name: str,
        handler: Command,
        help_text: str,
        options: Sequence[str] = READING,
    ) -> argparse.ArgumentParser:
        leaf = actions.add_parser(name, help=help_text, description=help_text)
        add_options(leaf, main=False, names=options)
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

    def tag_and_excludes(leaf: argparse.ArgumentParser) -> None:
        leaf.add_argument("tag", nargs="?", help="federation tag of the route (default: the node's)")
        leaf.add_argument(
            "excludes", nargs="?", metavar="exclude-list", help="comma-separated tags not to forward to"
        )

    link = group("link", "links: the connections one node keeps to another")
    link_adding = ("verbose", "durable", "src-local", "transport", "timeout")
    ends(
        command(
            link,
            "add",
            add_link,
            "add a link from dest-broker to src-broker (-s: the other way)",
            link_adding,
        )
    )
    ends(
        command(
            link, "del", del_link, "delete a link and the routes on it", ("verbose", "src-local", "timeout")
        )
    )
    leaf = command(link, "list", link_list, "list a node's links (--stats: their counters)")
    one_broker(leaf)
    leaf.add_argument(
        "--stats",
        action="store_true",
        help="messages and bytes each way since the node started, seconds not Operational, seconds in the state",
    )

    dynamic = group("dynamic", "dynamic routes: bindings on dest-broker's exchange pull matching messages")
    leaf = command(
        dynamic,
        "add",
        partial(exchange_route, "dynamic", add=True),
        "add a dynamic route on an exchange",
        tuple(name for name in ADDING if name != "src-local"),
    )
    ends(leaf)
    leaf.add_argument("exchange")
    tag_and_excludes(leaf)
    leaf.set_defaults(dynamic=True)
    leaf = command(
        dynamic,
        "del",
        partial(exchange_route, "dynamic", add=False),
        "delete a dynamic route",
        tuple(name for name in DELETING if name != "src-local"),
    )
    ends(leaf)
    leaf.add_argument("exchange")
    leaf.set_defaults(dynamic=True)

    route = group("route", "static exchange routes, and listing, mapping and flushing routes")
    leaf = command(
        route, "add", partial(exchange_route, "exchange", add=True), "add a route of one binding key", ADDING
    )
    ends(leaf)
    leaf.add_argument("exchange")
    leaf.add_argument("key", metavar="routing-key")
    tag_and_excludes(leaf)
    leaf = command(
        route, "del", partial(exchange_route, "exchange", add=False), "delete an exchange route", DELETING
    )
    ends(leaf)
    leaf.add_argument("exchange")
    leaf.add_argument("key", metavar="routing-key")
    one_broker(command(route, "list", route_list, "list the routes a node holds"))
    one_broker(command(route, "map", route_map, "find every linked node and draw the routes between them"))
    one_broker(
        command(
            route,
            "flush",
            route_flush,
            "delete every route a node holds (-e: its links too)",
            ("verbose", "del-empty-link", "timeout"),
        )
    )

    queue = group("queue", "queue routes: dest-broker consumes a queue of src-broker into an exchange")
    for name, add in (("add", True), ("del", False)):
        leaf = command(
            queue, name, partial(queue_route, add=add), f"{name} a queue route", ADDING if add else DELETING
        )
        ends(leaf)
        leaf.add_argument("exchange", metavar="dest-exchange")
        leaf.add_argument("queue", metavar="src-queue")

    federate = group("federate", "federated exchanges: a child node's exchange attached to its parent's")
    leaf = command(
        federate,
        "add",
        federate_add,
        "federate an exchange of child-broker to the same-named one of parent-broker",
        ("verbose", "durable", "vhost", "timeout"),
    )
    federation(leaf)
    leaf.add_argument(
        "--type",
        choices=FEDERATION_TYPES,
        metavar="TYPE",
        help=f"{', '.join(FEDERATION_TYPES)} (default: service for a direct exchange, fanout otherwise)",
    )
    federation(
        command(
            federate,
            "del",
            federate_del,
            "stop federating an exchange of child-broker",
            ("verbose", "vhost", "timeout"),
        )
    )
    one_broker(command(federate, "list", federate_list, "list a node's federated exchanges"))

    for mount in mounts:
        mount.add_commands(partial(command, group(mount.name, mount.help)))
    return parser


async def exchange_route(kind: str, context: Context, args: argparse.Namespace, *, add: bool) -> int:
    """dynamic add|del and route add|del."""
    excludes = tuple(name for name in (getattr(args, "excludes", None) or "").split(",") if name)
    key = args.key if kind == "exchange" else None
    vhost = context.vhost(context.ends(args.dest, args.src)[0])
    spec = RouteSpec(
        kind, args.exchange, key=key, tag=getattr(args, "tag", None), excludes=excludes, vhost=vhost
    )
    return await (add_route if add else del_route)(context, args, spec)


async def queue_route(context: Context, args: argparse.Namespace, *, add: bool) -> int:
    """queue add|del."""
    vhost = context.vhost(context.ends(args.dest, args.src)[0])
    spec = RouteSpec("queue", args.exchange, queue=args.queue, vhost=vhost)
    return await (add_route if add else del_route)(context, args, spec)


def check(args: argparse.Namespace) -> None:
    """Refuse combinations argparse cannot express, as usage errors of the command."""
    if transport_name(args.transport) not in TRANSPORTS:
        args.parser.error(
            f"transport '{args.transport}' is not supported: links use {' or '.join(TRANSPORTS)}"
        )
    if args.dynamic and args.src_local:
        args.parser.error("-s/--src-local is not permitted on dynamic routes (the destination must pull)")


def main(
    argv: Sequence[str] | None = None,
    connect: ClientFactory = ManagementClient.connect,
    mounts: Sequence[Mount] = (),
) -> int:
    """amq-route; `connect` is replaced by fake nodes in unit tests, and gateway.cli mounts the
    planner's commands for the console script."""
    args = with_passwords(parse(build_parser(mounts), argv))
    check(args)
    context = Context(options_of(args), connect)
    return run(partial(args.handler, context, args), hint="name the node as HOST:PORT")
