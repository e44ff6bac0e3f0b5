"""amq-config: a node's exchanges, queues and bindings, with qpid-config's grammar and output.

Every command is one or a few management requests to the node named by -a (localhost:5672 by
default). Like amq-route's, each command is an async function of (Context, parsed arguments)
returning the exit status, and reaches the node only through the Context's client factory.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from federation import formatting
from federation.address import BrokerAddress
from federation.cli import config_access
from federation.cli.common import (
    PASSWORDS_HELP,
    Parser,
    broker_address,
    count,
    default,
    parse,
    run,
    timeout_seconds,
    with_passwords,
)
from federation.management_client import Client, ClientFactory, ManagementClient
from gateway.names import DEFAULT_PORT
from gateway.security.password_input import add_password_options

#: --policy-type: what a full queue does, as the x-overflow argument RabbitMQ clients know.
#: qpid-config's --policy-type values (the node says which it cannot apply).
POLICY_TYPES = ("reject", "flow_to_disk", "ring", "ring_strict")

USAGE = (
    """\
amq-config [OPTIONS]
       amq-config [OPTIONS] node
       amq-config [OPTIONS] exchanges [filter-string] [-b | --stats]
       amq-config [OPTIONS] queues    [filter-string] [-b | --stats]
       amq-config [OPTIONS] add exchange <type> <name> [--durable] [--alternate-exchange X]
       amq-config [OPTIONS] del exchange <name>
       amq-config [OPTIONS] add queue <name> [--durable] [--max-queue-size N] [--max-queue-count N]
                                             [--policy-type reject|flow_to_disk|ring|ring_strict]
                                             [--capacity N] [--flow-resume-capacity N]
       amq-config [OPTIONS] del queue <name> [--force]
       amq-config [OPTIONS] bind   <exchange-name> <queue-name> [binding-key]
       amq-config [OPTIONS] unbind <exchange-name> <queue-name> [binding-key]
       amq-config [OPTIONS] reload-acl
"""
    + config_access.USAGE
)

DESCRIPTION = (
    """\
Show and change a node's exchanges, queues and bindings, and its users, vhosts and
permissions. Without a command: a summary.

Broker address (-a): [user[/password]@]host[:port] (default localhost:5672, user guest/guest),
or amqp://user[:password]@host:port/vhost. Options may come before the command, or after it
where the command takes them (see its --help).

"""
    + PASSWORDS_HELP
)


@dataclass(frozen=True)
class Context:
    """What every command needs: the node, the vhost (None: the node's default, "/"), the
    timeout and how to reach the node."""

    broker: BrokerAddress
    timeout: float
    connect: ClientFactory
    vhost: str | None = None

    @asynccontextmanager
    async def client(self) -> AsyncIterator[Client]:
        """A management client whose requests name the vhost, when one was given."""
        async with self.connect(self.broker, self.timeout) as client:
            yield client if self.vhost is None else InVhost(client, self.vhost)


@dataclass(frozen=True)
class InVhost:
    """A client whose requests (all but node.info, which has no vhost) go to one vhost."""

    client: Client
    vhost: str

    async def call(self, method: str, arguments: dict[str, Any] | None = None) -> Any:
        if method != "node.info":
            arguments = {**(arguments or {}), "vhost": self.vhost}
        return await self.client.call(method, arguments)


def matching(records: Sequence[formatting.Record], text: str | None) -> list[formatting.Record]:
    """The records whose name contains the filter string (all without one), as qpid-config."""
    return [record for record in records if not text or text in record["name"]]


def print_lines(lines: Sequence[str]) -> None:
    if lines:
        print("\n".join(lines))


# -- commands -------------------------------------------------------------------------------


async def overview(context: Context, args: argparse.Namespace) -> int:
    async with context.client() as client:
        exchanges = await client.call("exchanges.list")
        queues = await client.call("queues.list")
    print_lines(formatting.summary(exchanges, queues))
    return 0


async def show_node(context: Context, args: argparse.Namespace) -> int:
    async with context.client() as client:
        info = await client.call("node.info")
    print_lines(formatting.node_status(info))
    return 0


async def list_exchanges(context: Context, args: argparse.Namespace) -> int:
    async with context.client() as client:
        exchanges = matching(await client.call("exchanges.list"), args.filter)
        if args.bindings:
            print_lines(formatting.exchange_bindings(exchanges, await client.call("bindings.list")))
            return 0
    print_lines((formatting.exchange_stats if args.stats else formatting.exchange_table)(exchanges))
    return 0


async def list_queues(context: Context, args: argparse.Namespace) -> int:
    async with context.client() as client:
        queues = matching(await client.call("queues.list"), args.filter)
        if args.bindings:
            print_lines(formatting.queue_bindings(queues, await client.call("bindings.list")))
            return 0
    print_lines((formatting.queue_stats if args.stats else formatting.queue_table)(queues))
    return 0


async def add_exchange(context: Context, args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"name": args.name, "type": args.type, "durable": args.durable}
    if args.alternate_exchange:
        request["alternate_exchange"] = args.alternate_exchange
    return await single(context, "exchanges.add", request)


async def add_queue(context: Context, args: argparse.Namespace) -> int:
    return await single(
        context,
        "queues.add",
        {"name": args.name, "durable": args.durable, "arguments": queue_arguments(args)},
    )


def queue_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """qpid's queue limits as the qpid.* arguments the node maps onto its x-max-length family."""
    arguments: dict[str, Any] = {}
    if args.max_queue_size is not None:
        arguments["qpid.max_size"] = args.max_queue_size
    if args.max_queue_count is not None:
        arguments["qpid.max_count"] = args.max_queue_count
    if args.policy_type is not None:
        arguments["qpid.policy_type"] = args.policy_type
    if args.capacity is not None:
        arguments["x-qpid-capacity"] = args.capacity
    if args.flow_resume_capacity is not None:
        arguments["x-qpid-flow-resume-capacity"] = args.flow_resume_capacity
    return arguments


async def del_queue(context: Context, args: argparse.Namespace) -> int:
    """Like qpid-config, refuse to delete a queue that holds messages or has consumers unless
    --force: deleting a queue loses what it holds."""
    return await single(
        context, "queues.delete", {"name": args.name, "if_empty": not args.force, "if_unused": not args.force}
    )


async def reload_acl(context: Context, args: argparse.Namespace) -> int:
    """Make the node read its ACL file again; a file with errors is refused (Failed: invalid,
    each error on its line) and the rules in force stay."""
    async with context.client() as client:
        result = await client.call("acl.reload")
    print_lines([f"ACL file {result['file']} reloaded: {result['rules']} rule(s)", *result["warnings"]])
    return 0


async def single(context: Context, method: str, arguments: dict[str, Any]) -> int:
    """Commands that are one request and print nothing on success."""
    async with context.client() as client:
        await client.call(method, arguments)
    return 0


def binding_arguments(args: argparse.Namespace) -> dict[str, Any]:
    return {"exchange": args.exchange, "queue": args.queue, "routing_key": args.key}


# -- command line ---------------------------------------------------------------------------

Command = Callable[[Context, argparse.Namespace], Awaitable[int]]


def add_options(
    parser: argparse.ArgumentParser, main: bool, *, vhost: bool = True, bindings: bool = False
) -> None:
    """The global options on the main parser (main=True, all of them) and on a command's
    parser: -a and -t on every one, --vhost on those that touch a vhost's contents, -b on the
    listings (a command's --help shows only what it takes; any other is a usage error after
    the command, and accepted before it, as qpid-config did)."""
    bindings = bindings or main
    parser.add_argument(
        "-a",
        "--broker-addr",
        dest="broker",
        type=broker_address,
        metavar="ADDRESS",
        default=default(broker_address(f"localhost:{DEFAULT_PORT}"), main),
        help=f"the node to manage (default localhost:{DEFAULT_PORT})",
    )
    if vhost:
        parser.add_argument(
            "-p",
            "--vhost",
            default=default(None, main),
            help="the vhost to show or change (default: the address URL's, else /)",
        )
    parser.add_argument(
        "-t",
        "--timeout",
        type=timeout_seconds,
        metavar="SECS",
        default=default(10.0, main),
        help="how long to wait for the node (seconds, 0: no limit; default 10)",
    )
    add_password_options(parser, suppress=not main)
    if bindings:
        parser.add_argument(
            "-b",
            "--bindings",
            action="store_true",
            default=default(False, main),
            help="show bindings in the exchange or queue list",
        )
        parser.add_argument(
            "--stats",
            action="store_true",
            default=default(False, main),
            help="show the exchanges' or queues' message counters since the node started",
        )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="amq-config",
        usage=USAGE,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(parser, main=True)
    parser.set_defaults(handler=overview, parser=parser)
    # Explicit progs throughout: argparse would derive them from the custom usage.
    commands = parser.add_subparsers(dest="command", metavar="command", prog="amq-config")

    def command(
        actions: argparse._SubParsersAction, name: str, handler: Command, help_text: str, **options: bool
    ) -> argparse.ArgumentParser:
        leaf = actions.add_parser(name, help=help_text, description=help_text)
        add_options(leaf, main=False, **options)
        leaf.set_defaults(handler=handler, parser=leaf)
        return leaf

    command(commands, "node", show_node, "show the node: connections, memory and disk alarms", vhost=False)
    command(
        commands, "exchanges", list_exchanges, "list exchanges (-b: with their bindings)", bindings=True
    ).add_argument("filter", nargs="?", metavar="filter-string", help="only names containing this")
    command(
        commands, "queues", list_queues, "list queues (-b: with their bindings)", bindings=True
    ).add_argument("filter", nargs="?", metavar="filter-string", help="only names containing this")

    add = commands.add_parser(
        "add", help="add an exchange or a queue", description="add an exchange or a queue"
    )
    adds = add.add_subparsers(dest="kind", metavar="{exchange,queue}", required=True, prog="amq-config add")
    leaf = command(adds, "exchange", add_exchange, "add an exchange")
    leaf.add_argument("type", help="direct, fanout, topic or headers")
    leaf.add_argument("name")
    leaf.add_argument("--durable", action="store_true", help="the exchange survives a restart")
    leaf.add_argument("--alternate-exchange", metavar="X", help="where messages nothing matches go")
    leaf = command(adds, "queue", add_queue, "add a queue")
    leaf.add_argument("name")
    leaf.add_argument("--durable", action="store_true", help="the queue survives a restart")
    leaf.add_argument("--max-queue-size", type=count, metavar="N", help="at most N bytes of message bodies")
    leaf.add_argument("--max-queue-count", type=count, metavar="N", help="at most N messages")
    leaf.add_argument(
        "--policy-type",
        choices=POLICY_TYPES,
        help="when full: refuse new messages (reject), drop the oldest (ring, ring_strict), or keep"
        " them with their bodies on disk (flow_to_disk); default reject, flow_to_disk for a durable queue",
    )
    leaf.add_argument(
        "--capacity",
        type=count,
        metavar="N",
        help="producer flow control: hold publishers while over N bytes of ready messages",
    )
    leaf.add_argument(
        "--flow-resume-capacity",
        type=count,
        metavar="N",
        help="release them once under N bytes (default: the capacity)",
    )

    delete = commands.add_parser(
        "del", help="delete an exchange or a queue", description="delete an exchange or a queue"
    )
    deletes = delete.add_subparsers(
        dest="kind", metavar="{exchange,queue}", required=True, prog="amq-config del"
    )
    command(deletes, "exchange", partial(by_name, "exchanges.delete"), "delete an exchange").add_argument(
        "name"
    )
    leaf = command(deletes, "queue", del_queue, "delete a queue (refused if it has messages or consumers)")
    leaf.add_argument("name")
    leaf.add_argument("--force", action="store_true", help="delete it even with messages or consumers")

    for name, method in (("bind", "bindings.add"), ("unbind", "bindings.delete")):
        leaf = command(
            commands,
            name,
            partial(binding, method),
            f"{name} a queue {'to' if name == 'bind' else 'from'} an exchange",
        )
        leaf.add_argument("exchange", metavar="exchange-name")
        leaf.add_argument("queue", metavar="queue-name")
        leaf.add_argument("key", nargs="?", default="", metavar="binding-key")
    command(
        commands,
        "reload-acl",
        reload_acl,
        "make the node read its ACL file again (a file with errors is refused: the rules in force stay)",
        vhost=False,
    )
    config_access.add_commands(commands, command)
    return parser


async def by_name(method: str, context: Context, args: argparse.Namespace) -> int:
    return await single(context, method, {"name": args.name})


async def binding(method: str, context: Context, args: argparse.Namespace) -> int:
    return await single(context, method, binding_arguments(args))


def main(argv: Sequence[str] | None = None, connect: ClientFactory = ManagementClient.connect) -> int:
    """The amq-config console script; `connect` is replaced by a fake node in unit tests."""
    args = with_passwords(parse(build_parser(), argv))
    context = Context(args.broker, args.timeout, connect, args.vhost or args.broker.vhost)
    return run(partial(args.handler, context, args), hint="use -a HOST:PORT")
