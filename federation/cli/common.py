"""What amq-route and amq-config share: address arguments, option placement, error reporting."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import NoReturn

import trio

from federation.address import BrokerAddress
from federation.management_client import CONNECT_FAILED, EXIT_FAILED, ManagementFailed
from federation.requests import Parent
from gateway.security.password_input import HELP, PasswordUnavailable, read_password

#: What both CLIs' --help says about passwords, wrapped for their raw descriptions.
PASSWORDS_HELP = textwrap.fill(
    HELP + " Name the user without a password (user@host, amqp://user@host) and it is asked for;"
    " a password in an address (user/password@host, amqp://user:password@host) still works, but"
    " is discouraged.",
    95,
)


class Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error prints its one line first (`amq-route link add:
    error: ...`) and the command's usage after it: argparse's order puts a long usage first
    and the line that matters last. Subparsers are of this class too (argparse's default)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n{self.format_usage()}")


def broker_address(text: str) -> BrokerAddress:
    """argparse type for `[user/password@]host[:port]`: a bad address is a usage error (exit 2)
    that keeps BrokerAddress's own sentence naming the problem."""
    try:
        return BrokerAddress.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def timeout_seconds(text: str) -> float:
    """argparse type for --timeout: seconds, 0 meaning no limit (as qpid-route's)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"the timeout must be 0 (no limit) or more seconds, not {text}")
    return value


def count(text: str) -> int:
    """argparse type for counts (--ack, --credit, queue limits): a non-negative integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def default(value: object, main: bool) -> object:
    """The default of a global option: its value on the main parser, SUPPRESS on a command's
    parser. Both CLIs add their global options to every command's parser too, so they may
    follow the command as optparse let them (`qpid-config add exchange direct x --durable -a h`);
    SUPPRESS makes a command's copy set a value only when given there, never hiding the main
    parser's value or default."""
    return value if main else argparse.SUPPRESS


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, reporting stray arguments with the usage of the command they follow (argparse
    itself would show the main parser's); each command's parser is its `parser` default."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        args.parser.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def with_passwords(args: argparse.Namespace) -> argparse.Namespace:
    """Give every address that names a user without a password (`user@host`) the password
    from --password-file, --password-stdin, AMQ_PASSWORD or a prompt, read once for all of
    them; a usage error (exit 2) when none gives one."""
    password: str | None = None
    for name, value in list(vars(args).items()):
        address = value.address if isinstance(value, Parent) else value
        if not isinstance(address, BrokerAddress) or not address.needs_password:
            continue
        if password is None:
            parser: argparse.ArgumentParser = args.parser
            try:
                password = read_password(args, f"Password for {address.username} at {address}: ")
            except PasswordUnavailable as exc:
                parser.error(f"{address.username}@{address}: {exc}")
        filled = replace(address, password=password)
        setattr(args, name, replace(value, address=filled) if isinstance(value, Parent) else filled)
    return args


def run(command: Callable[[], Awaitable[int]], hint: str) -> int:
    """Run a command under Trio and turn a reported failure into qpid's line and exit status:
    `Failed: <kind> - <message>` on stderr, exit 1. A node that could not be reached at all
    gets `hint` appended: how this CLI is told another address."""
    try:
        return trio.run(command)
    except ManagementFailed as failure:
        if failure.kind == CONNECT_FAILED:
            failure = ManagementFailed(failure.kind, f"{failure.message} {hint}")
        report(failure)
        return EXIT_FAILED


def report(failure: ManagementFailed) -> None:
    """One failure, as both CLIs print it."""
    print(f"Failed: {failure.kind} - {failure.message}", file=sys.stderr, flush=True)
