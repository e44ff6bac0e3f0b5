"""Passwords for the command-line tools, from anywhere but the command line.

A password in argv is visible to every user of the machine (`ps`, /proc/PID/cmdline) and
lands in shell histories. Every CLI takes one from, in this order: `--password-file FILE`
(its first line), `--password-stdin` (one line of standard input), the AMQ_PASSWORD
environment variable, or a prompt when standard input is a terminal. Broker addresses with a
password in them (`user/password@host`, `amqp://user:password@host`) still work where they did,
and are documented as discouraged.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

#: The environment variable every CLI reads a password from.
ENVIRONMENT = "AMQ_PASSWORD"

#: What each CLI's --help says about passwords.
HELP = (
    "Passwords never need to be on the command line (where `ps` shows them to everyone): "
    "give them with --password-file FILE (its first line), --password-stdin (one line), "
    f"the {ENVIRONMENT} environment variable, or at the prompt, in that order."
)


class PasswordUnavailable(Exception):
    """No source gave a password and there is no terminal to ask at."""


def add_password_options(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """--password-stdin and --password-file on `parser`; `suppress` leaves them unset unless
    given (for a command's copy of a main parser's options)."""
    parser.add_argument(
        "--password-stdin",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="read the password from the first line of standard input",
    )
    parser.add_argument(
        "--password-file",
        type=Path,
        metavar="FILE",
        default=argparse.SUPPRESS if suppress else None,
        help=f"read the password from the first line of FILE (else {ENVIRONMENT}, else a prompt)",
    )


def given_password(args: argparse.Namespace) -> str | None:
    """The password from --password-file, --password-stdin or AMQ_PASSWORD, or None when none
    of them gives one. PasswordUnavailable for an unreadable file or an empty input."""
    path: Path | None = getattr(args, "password_file", None)
    if path is not None:
        try:
            with path.open(encoding="utf-8") as file:
                return _line(file.readline(), str(path))
        except OSError as exc:
            raise PasswordUnavailable(f"cannot read the password file {path}: {exc.strerror}") from None
    if getattr(args, "password_stdin", False):
        return _line(sys.stdin.readline(), "standard input")
    return os.environ.get(ENVIRONMENT) or None


def read_password(args: argparse.Namespace, prompt: str) -> str:
    """`given_password`, else one typed at the terminal after `prompt`."""
    password = given_password(args)
    if password is not None:
        return password
    if not sys.stdin.isatty():
        raise PasswordUnavailable(
            f"no password: give it with --password-file FILE, --password-stdin or {ENVIRONMENT}"
        )
    try:
        return _line(getpass.getpass(prompt), "the prompt")
    except EOFError:
        raise PasswordUnavailable("no password given at the prompt") from None


def _line(text: str, source: str) -> str:
    password = text.rstrip("\r\n")
    if not password:
        raise PasswordUnavailable(f"no password in {source}")
    return password
