"""`amq-gateway passwd`: add a user to a users file, change a password, vhosts or tags.

The file is the operator's: it is edited in place with tomlkit, so comments, the order of the
tables and the other users' entries stay as they were; only the user's `password` (and
`vhosts`, `tags` when given) change. A file that does not load as a users file
(gateway.security.users) is refused before anything is written, and the new text is written
atomically with mode 0600 (it holds hashes and the plain-text [credentials]).
"""

from __future__ import annotations

import getpass
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import tomlkit

from gateway.names import TAGS
from gateway.security.passwords import PasswordHash
from gateway.security.users import UsersDB, check_username, string_list
from gateway.tomlfile import ConfigError, Invalid

HEADER = "amq-gateway users file: see docs/configuration.md; `amq-gateway passwd` keeps comments."


def set_password(
    path: Path | str,
    username: str,
    password: str,
    vhosts: Iterable[str] | None = None,
    tags: Iterable[str] | None = None,
) -> bool:
    """Add a user or change one's password (and vhosts or tags, when given); True when added.

    A new user without vhosts may use every vhost. Everything else in the file is kept,
    comments included. The file is created if missing.
    """
    path = Path(path)
    check_username(username)
    if not password:
        raise ValueError("the password must not be empty")
    checked_vhosts = None if vhosts is None else _checked("vhosts", vhosts)
    checked_tags = None if tags is None else _checked("tags", tags)
    for tag in checked_tags or ():
        if tag not in TAGS:
            raise ValueError(f"unknown tag {tag!r} (known: {', '.join(TAGS)})")
    if path.exists():
        UsersDB.load(path)  # a file we could not read back is not rewritten
        document = tomlkit.parse(path.read_text(encoding="utf-8"))
    else:
        document = tomlkit.document()
        document.add(tomlkit.comment(HEADER))
    users = document.setdefault("users", tomlkit.table(is_super_table=True))
    added = username not in users
    if added:
        users[username] = tomlkit.table()
    entry = users[username]
    entry["password"] = PasswordHash.create(password).encode()
    if checked_vhosts is not None:
        entry["vhosts"] = sorted(checked_vhosts)
    if checked_tags:
        entry["tags"] = checked_tags
    elif checked_tags is not None and "tags" in entry:
        del entry["tags"]
    _write_atomically(path, tomlkit.dumps(document))
    return added


def _checked(what: str, values: Iterable[str]) -> list[str]:
    try:
        return list(dict.fromkeys(string_list(list(values))))
    except Invalid as err:
        raise ValueError(f"{what}: {err}") from None


def _write_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never half; mode 0600 (it holds hashes)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:  # mkstemp creates it 0600
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def typed_password(username: str) -> str:
    """A new password for `username`, typed twice at a prompt that does not echo it: never on
    a command line, where `ps` and shell histories show it. ValueError if none was typed or
    the two differ."""
    try:
        password = getpass.getpass(f"Password for {username}: ")
        again = getpass.getpass("Repeat the password: ")
    except EOFError:
        raise ValueError("no password given") from None
    if password != again:
        raise ValueError("passwords do not match; nothing changed")
    return password


def new_password(username: str, path: Path | None, from_stdin: bool) -> str:
    """A user's new password: the first line of `path`, else of standard input (`from_stdin`),
    else typed twice; ValueError if there is none."""
    if path is not None:
        try:
            with path.open(encoding="utf-8") as file:
                line = file.readline()
        except OSError as err:
            raise ValueError(f"cannot read the new password's file {path}: {err.strerror}") from None
        where = str(path)
    elif from_stdin:
        line, where = sys.stdin.readline(), "standard input"
    else:
        return typed_password(username)
    password = line.rstrip("\n")
    if not password:
        raise ValueError(f"no password on the first line of {where}")
    return password


def run_passwd(
    users_file: Path,
    username: str,
    password: str | None,
    vhosts: list[str] | None,
    tags: list[str] | None = None,
) -> int:
    """`amq-gateway passwd FILE USER`: prompt twice unless given a password; exit code."""
    try:
        added = set_password(
            users_file, username, typed_password(username) if password is None else password, vhosts, tags
        )
    except (ConfigError, ValueError) as err:
        print(f"amq-gateway passwd: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"amq-gateway passwd: {users_file}: {err.strerror}", file=sys.stderr)
        return 1
    print(f"{'Added user' if added else 'Changed password for user'} {username!r}")
    return 0
