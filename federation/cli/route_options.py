"""amq-route's global options: which command takes which, and the Context every command
runs with (the options and how to reach a node)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any

from federation.address import BrokerAddress
from federation.cli.common import count, default, timeout_seconds
from federation.management_client import Client, ClientFactory
from federation.requests import RouteOptions
from gateway.names import DEFAULT_TRANSPORT, DEFAULT_VHOST, TLS_TRANSPORT, transport_name
from gateway.security.password_input import add_password_options
from gateway.tls import ClientTls


@dataclass(frozen=True)
class Options:
    """The global options, as the commands use them."""

    verbose: bool
    quiet: bool
    del_empty_link: bool
    timeout: float
    #: How added links, routes and federations behave (sent to the node).
    route: RouteOptions
    #: --vhost: the vhost on the node a request goes to (None: its address URL's, else "/").
    vhost: str | None = None


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
        """(the node the request goes to, the peer its link reaches); the peer opens the vhost
        its URL names, else the node's (--vhost or its URL's)."""
        node, peer = (src, dest) if self.options.route.src_local else (dest, src)
        if transport_name(self.options.route.transport) == TLS_TRANSPORT and peer.tls is None:
            peer = peer.with_tls(ClientTls())  # -t ssl: over TLS too where the CLI checks the peer
        return node, replace(peer, vhost=peer.vhost or self.vhost(node))

    def vhost(self, node: BrokerAddress) -> str:
        """The vhost on `node` a command works in: --vhost, else its URL's, else "/"."""
        return self.options.vhost or node.vhost or DEFAULT_VHOST


#: The global options: (long name, flags, argparse keywords but the default, the default).
OPTIONS: tuple[tuple[str, tuple[str, ...], dict[str, Any], object], ...] = (
    ("verbose", ("-v", "--verbose"), {"action": "store_true", "help": "verbose output"}, False),
    (
        "quiet",
        ("-q", "--quiet"),
        {"action": "store_true", "help": "quiet output: no duplicate warnings"},
        False,
    ),
    (
        "durable",
        ("-d", "--durable"),
        {"action": "store_true", "help": "the added configuration is durable"},
        False,
    ),
    (
        "del-empty-link",
        ("-e", "--del-empty-link"),
        {
            "action": "store_true",
            "help": "delete a link once its last route is deleted (route flush: every link)",
        },
        False,
    ),
    (
        "src-local",
        ("-s", "--src-local"),
        {
            "action": "store_true",
            "help": "the source node opens the link and pushes (not for dynamic routes)",
        },
        False,
    ),
    (
        "ack",
        ("--ack",),
        {"type": count, "metavar": "N", "help": "acknowledge transfers in batches of N"},
        None,
    ),
    (
        "credit",
        ("--credit",),
        {"type": count, "metavar": "N", "help": "at most N messages in flight on a route"},
        None,
    ),
    (
        "transport",
        ("-t", "--transport"),
        {
            "metavar": "TRANSPORT",
            "help": "transport of new links: tcp, or ssl (tls) for TLS, which an amqps:// src-broker implies",
        },
        DEFAULT_TRANSPORT,
    ),
    (
        "vhost",
        ("--vhost",),
        {
            "metavar": "VHOST",
            "help": "the vhost on the node the command goes to (default: its address URL's, else /)",
        },
        None,
    ),
    (
        "timeout",
        ("--timeout",),
        {
            "type": timeout_seconds,
            "metavar": "SECS",
            "help": "how long to wait for a node (seconds, 0: no limit; default 10)",
        },
        10.0,
    ),
)

#: Which global options each kind of command takes (its --help shows only these; any other
#: after the command is a usage error; before the command, qpid-route's place, all are
#: accepted, as qpid-route did).
ADDING = ("verbose", "quiet", "durable", "src-local", "ack", "credit", "transport", "vhost", "timeout")
DELETING = ("verbose", "quiet", "del-empty-link", "src-local", "vhost", "timeout")
READING = ("timeout",)


def add_options(parser: argparse.ArgumentParser, main: bool, names: Sequence[str] = ()) -> None:
    """The global options: every one on the main parser (main=True), those `names` on a
    command's parser; the password options on both (addresses may name a user on any)."""
    for name, flags, keywords, value in OPTIONS:
        if main or name in names:
            parser.add_argument(*flags, default=default(value, main), **keywords)
    add_password_options(parser, suppress=not main)


def options_of(args: argparse.Namespace) -> Options:
    return Options(
        verbose=args.verbose,
        quiet=args.quiet,
        del_empty_link=args.del_empty_link,
        timeout=args.timeout,
        vhost=args.vhost,
        route=RouteOptions(
            durable=args.durable,
            src_local=args.src_local,
            ack=args.ack,
            credit=args.credit,
            transport=args.transport,
        ),
    )
