"""amq-config's commands for who may do what: users, vhosts, permissions, topic permissions.

rabbitmqctl's words where it has them (`permissions set -p VHOST USER CONF WRITE READ` is
`set_permissions`), as subcommands in qpid-config's style. Every command is one management
request (federation.account_requests), administrator only on the node. A new password is read
from a file (`--new-password-file`), standard input (`--new-password-stdin`) or typed twice at
a prompt: never an argument, which `ps` and shell histories would show. (`--password-file`,
`--password-stdin` and AMQ_PASSWORD are the login's, as for every command.)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from federation import formatting
from federation.account_requests import (
    PermissionSpec,
    TopicPermissionSpec,
    permission_clear,
    permission_set,
    topic_permission_clear,
    topic_permission_set,
    user_add,
    user_delete,
    user_password,
    user_tags,
    vhost_add,
    vhost_delete,
)
from federation.management_client import ManagementFailed
from federation.requests import Request
from gateway.names import DEFAULT_VHOST, TAGS
from gateway.security.passwd import new_password

if TYPE_CHECKING:
    from federation.cli.config_cli import Context

#: Makes a command's parser: (subparsers, name, handler, help, **add_options flags).
CommandMaker = Callable[..., argparse.ArgumentParser]

USAGE = """\
       amq-config [OPTIONS] users
       amq-config [OPTIONS] user add <name> [--tag T ...] [--new-password-stdin | --new-password-file F]
       amq-config [OPTIONS] user passwd <name> [--new-password-stdin | --new-password-file F]
       amq-config [OPTIONS] user tags <name> [T ...]
       amq-config [OPTIONS] user del <name>
       amq-config [OPTIONS] vhosts
       amq-config [OPTIONS] vhost add|del <name>
       amq-config [OPTIONS] permissions [-p VHOST]
       amq-config [OPTIONS] permissions set [-p VHOST] <user> <configure> <write> <read>
       amq-config [OPTIONS] permissions clear [-p VHOST] <user>
       amq-config [OPTIONS] topic-permissions [-p VHOST]
       amq-config [OPTIONS] topic-permissions set [-p VHOST] <user> <exchange> <write> <read>
       amq-config [OPTIONS] topic-permissions clear [-p VHOST] <user> [exchange]"""


def user_table(users: Sequence[formatting.Record]) -> list[str]:
    """`users`: name, tags, and where the user comes from (the users file or the node)."""
    rows = [(user["name"], ", ".join(user["tags"]), user["source"]) for user in users]
    return formatting.table((("User", 16), ("Tags", 24), ("Source", 0)), sorted(rows))


def vhost_table(vhosts: Sequence[formatting.Record]) -> list[str]:
    return formatting.table((("Vhost", 0),), sorted((vhost["name"],) for vhost in vhosts))


def permission_table(permissions: Sequence[formatting.Record]) -> list[str]:
    """`permissions`: rabbitmqctl list_permissions' columns, with the vhost first. Patterns
    are shown as repr-free quoted text, so an empty pattern (nothing allowed) is visible."""
    rows = [
        (p["vhost"], p["user"], _quoted(p["configure"]), _quoted(p["write"]), _quoted(p["read"]))
        for p in permissions
    ]
    columns = (("Vhost", 8), ("User", 16), ("Configure", 16), ("Write", 16), ("Read", 0))
    return formatting.table(columns, sorted(rows))


def topic_permission_table(permissions: Sequence[formatting.Record]) -> list[str]:
    rows = [
        (p["vhost"], p["user"], p["exchange"], _quoted(p["write"]), _quoted(p["read"])) for p in permissions
    ]
    columns = (("Vhost", 8), ("User", 16), ("Exchange", 16), ("Write", 16), ("Read", 0))
    return formatting.table(columns, sorted(rows))


def _quoted(pattern: str) -> str:
    return f"'{pattern}'"


def _vhost(context: Context) -> str:
    """The vhost a permission command means: -p/--vhost (or the address URL's), else "/"."""
    return context.vhost or DEFAULT_VHOST


async def _send(context: Context, request: Request) -> int:
    async with context.connect(context.broker, context.timeout) as client:
        await client.call(*request)
    return 0


async def _listing(
    method: str,
    show: Callable[[Sequence[formatting.Record]], list[str]],
    context: Context,
    args: argparse.Namespace,
) -> int:
    arguments = {"vhost": context.vhost} if context.vhost and method.endswith("permissions.list") else {}
    async with context.connect(context.broker, context.timeout) as client:
        records = await client.call(method, arguments)
    print("\n".join(show(records)))
    return 0


def _password(name: str, args: argparse.Namespace) -> str:
    """The user's new password, or a usage failure (exit 1) naming why there is none. Standard
    input can give one password: the login's (--password-stdin) or the new one's."""
    if args.new_password_stdin and getattr(args, "password_stdin", False):
        raise ManagementFailed(
            "usage", "--password-stdin and --new-password-stdin both read standard input; give one in a file"
        )
    try:
        return new_password(name, args.new_password_file, args.new_password_stdin)
    except ValueError as err:
        raise ManagementFailed("usage", str(err)) from None


async def add_user(context: Context, args: argparse.Namespace) -> int:
    return await _send(context, user_add(args.name, _password(args.name, args), args.tags or ()))


async def change_password(context: Context, args: argparse.Namespace) -> int:
    return await _send(context, user_password(args.name, _password(args.name, args)))


async def set_tags(context: Context, args: argparse.Namespace) -> int:
    return await _send(context, user_tags(args.name, args.tags))


async def by_name(build: Callable[[str], Request], context: Context, args: argparse.Namespace) -> int:
    return await _send(context, build(args.name))


async def set_permissions(context: Context, args: argparse.Namespace) -> int:
    spec = PermissionSpec(args.user, _vhost(context), args.configure, args.write, args.read)
    return await _send(context, permission_set(spec))


async def clear_permissions(context: Context, args: argparse.Namespace) -> int:
    return await _send(context, permission_clear(args.user, _vhost(context)))


async def set_topic_permissions(context: Context, args: argparse.Namespace) -> int:
    spec = TopicPermissionSpec(args.user, _vhost(context), args.exchange, args.write, args.read)
    return await _send(context, topic_permission_set(spec))


async def clear_topic_permissions(context: Context, args: argparse.Namespace) -> int:
    return await _send(context, topic_permission_clear(args.user, _vhost(context), args.exchange))


def _password_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--new-password-stdin",
        action="store_true",
        help="read the user's new password from the first line of standard input",
    )
    parser.add_argument(
        "--new-password-file",
        type=Path,
        metavar="FILE",
        help="read it from the first line of FILE (default: prompt twice)",
    )


def add_commands(commands: argparse._SubParsersAction, command: CommandMaker) -> None:
    """Add the access commands to amq-config's parser; `command` makes each leaf parser."""
    command(commands, "users", partial(_listing, "users.list", user_table), "list users", vhost=False)
    user = commands.add_parser("user", help="add, change or delete a user", description="manage a user")
    users = user.add_subparsers(
        dest="action", metavar="{add,passwd,tags,del}", required=True, prog="amq-config user"
    )
    leaf = command(
        users, "add", add_user, "add a user (the password from a prompt or --password-stdin)", vhost=False
    )
    leaf.add_argument("name")
    leaf.add_argument("--tag", action="append", dest="tags", choices=TAGS, help="a tag (repeatable)")
    _password_option(leaf)
    leaf = command(users, "passwd", change_password, "change a user's password", vhost=False)
    leaf.add_argument("name")
    _password_option(leaf)
    leaf = command(users, "tags", set_tags, "replace a user's tags (none: remove them)", vhost=False)
    leaf.add_argument("name")
    leaf.add_argument("tags", nargs="*", choices=TAGS, metavar="tag")
    command(
        users, "del", partial(by_name, user_delete), "delete a user and close its connections", vhost=False
    ).add_argument("name")

    command(commands, "vhosts", partial(_listing, "vhosts.list", vhost_table), "list vhosts", vhost=False)
    vhost = commands.add_parser("vhost", help="add or delete a vhost", description="add or delete a vhost")
    vhosts = vhost.add_subparsers(dest="action", metavar="{add,del}", required=True, prog="amq-config vhost")
    command(vhosts, "add", partial(by_name, vhost_add), "add a vhost", vhost=False).add_argument("name")
    command(
        vhosts, "del", partial(by_name, vhost_delete), "delete a vhost with everything in it", vhost=False
    ).add_argument("name")

    listing = partial(_listing, "permissions.list", permission_table)
    permissions = command(commands, "permissions", listing, "list or change users' permissions in vhosts")
    changes = permissions.add_subparsers(dest="action", metavar="{set,clear}", prog="amq-config permissions")
    leaf = command(
        changes, "set", set_permissions, "set a user's configure, write and read patterns in -p VHOST"
    )
    for name in ("user", "configure", "write", "read"):
        leaf.add_argument(name)
    command(changes, "clear", clear_permissions, "remove a user's permissions in -p VHOST").add_argument(
        "user"
    )

    listing = partial(_listing, "topic_permissions.list", topic_permission_table)
    topics = command(commands, "topic-permissions", listing, "list or change users' topic permissions")
    changes = topics.add_subparsers(dest="action", metavar="{set,clear}", prog="amq-config topic-permissions")
    leaf = command(
        changes, "set", set_topic_permissions, "set a user's routing-key patterns on a topic exchange"
    )
    for name in ("user", "exchange", "write", "read"):
        leaf.add_argument(name)
    leaf = command(changes, "clear", clear_topic_permissions, "remove a user's topic permissions in -p VHOST")
    leaf.add_argument("user")
    leaf.add_argument("exchange", nargs="?", help="only this exchange's (default: all of them)")
