r"""Users: the users file (TOML, hashed passwords), the built-in guest, and `passwd`.

```toml
[users.alice]
password = "scrypt$n=16384,r=8,p=1$<salt>$<hash>"   # made by `amq-gateway passwd`
vhosts = ["/"]                # optional: full permissions on these vhosts
tags = ["administrator"]      # optional
loopback_only = false         # optional; true by default for "guest" and "peering", as in RabbitMQ
limits = { max-connections = 5, max-channels = 100 }   # optional: RabbitMQ's user limits

[users.alice.permissions."prod"]      # optional: RabbitMQ's three patterns in one vhost
configure = '^alice\.'
write = '^(alice\.|amq\.topic$)'
read = '^alice\.'

[users.alice.topic_permissions."prod"."amq.topic"]   # optional: routing keys on a topic exchange
write = '^{username}\.'
read = '.*'

[credentials.peering]         # what this node presents when IT logs in to a parent (federation)
password = "plain text"       # plain text: the node has to send it
```

A user with neither `vhosts` nor `permissions` may do everything in every vhost; otherwise only
in the vhosts these name (gateway.security.permissions says what the patterns mean).

Without a users file the node has RabbitMQ's default, guest/guest, and OpenAMQ's
peering/peering for federation, both from loopback only. Writing it is gateway.security.passwd's.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TypeVar

from gateway.names import ADMINISTRATOR_TAG, FEDERATION_TAG
from gateway.security.passwords import PasswordHash, VerifiedCache
from gateway.security.permissions import Grants, Permission, TopicPermission, pattern, topic_pattern
from gateway.tomlfile import ConfigError, Invalid, TomlFile, describe, integer, read_toml, table_values

_T = TypeVar("_T")

GUEST = "guest"
#: The login federation peerings use by default (OpenAMQ's), built in like guest.
PEERING = "peering"
#: Users that may connect from loopback only unless the file says otherwise.
_LOOPBACK_BY_DEFAULT = frozenset({GUEST, PEERING})
_KEYS = ("password", "vhosts", "tags", "loopback_only", "permissions", "topic_permissions", "limits")
#: RabbitMQ's user limits, by their names there (`rabbitmqctl set_user_limits`).
USER_LIMITS = ("max-connections", "max-channels")
#: A limit's check: how many at most (0 refuses every one).
LIMIT = integer(0, 2**31 - 1)
_SECTIONS = ("users", "credentials")


class UsersFileError(ConfigError):
    """The users file is unreadable or holds something we refuse to use."""


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped 127.x (what a dual-stack socket reports)."""
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


@dataclass(frozen=True)
class User:
    """An authenticated identity and what its users file entry grants: full permissions on
    `vhosts`, the patterns of `permissions`; neither (vhosts None, no permissions) means
    everything in every vhost. gateway.security.access turns these into checks."""

    name: str
    vhosts: frozenset[str] | None = None
    tags: tuple[str, ...] = ()
    loopback_only: bool = False
    permissions: Grants = Grants()
    #: How many connections the user may have open at once over the node (None: no limit).
    max_connections: int | None = None
    #: How many channels the user may have open at once over all its connections.
    max_channels: int | None = None

    def may_federate(self) -> bool:
        """Whether this login is one of the node's federation: the shared `peering` login, a
        user tagged `federation`, or an administrator (who may reconfigure routing anyway)."""
        return self.name == PEERING or FEDERATION_TAG in self.tags or ADMINISTRATOR_TAG in self.tags

    def speaks_for(self) -> str | None:
        """The one node a federation login may advertise as: a user tagged `federation` is
        the node (tag) of its own name, so one peer cannot speak for another; the shared
        logins (`peering`, administrators) may speak for any node (None)."""
        return self.name if FEDERATION_TAG in self.tags else None

    def may_connect_from(self, peer_host: str) -> bool:
        """RabbitMQ's loopback_users rule: such users can only connect via localhost."""
        return not self.loopback_only or is_loopback(peer_host)


@dataclass(frozen=True)
class _Record:
    user: User
    password: PasswordHash


@cache
def _decoy() -> PasswordHash:
    """A hash to check unknown users against, so they take as long as wrong passwords."""
    return PasswordHash.create(os.urandom(16).hex())


def check_username(name: str) -> str:
    if not 0 < len(name.encode("utf-8")) <= 255 or any(c < " " or c == "\x7f" for c in name):
        raise ValueError(f"invalid user name {name!r}: 1-255 bytes, no control characters")
    return name


class UsersDB:
    """The users a node accepts: the users file's, then those changed at runtime
    (gateway.accounts, through `put` and `remove`)."""

    def __init__(
        self,
        records: Iterable[_Record],
        path: Path | None = None,
        credentials: Mapping[str, str] | None = None,
    ) -> None:
        self.path = path
        self._records = {record.user.name: record for record in records}
        self._verified = VerifiedCache()
        #: login -> password this node presents to other nodes ([credentials.<login>]).
        self.credentials: Mapping[str, str] = dict(credentials or {})

    @classmethod
    def default(cls) -> UsersDB:
        """No users file: RabbitMQ's guest/guest, administrator, and OpenAMQ's peering/peering
        for federation peerings, both loopback only.

        Unlike RabbitMQ's guest it may open every vhost: without a users file there would be
        no way to let anyone into the vhosts the node config declares.
        """
        guest = User(GUEST, None, (ADMINISTRATOR_TAG,), loopback_only=True)
        peering = User(PEERING, None, (), loopback_only=True)
        return cls(
            [_Record(guest, PasswordHash.create(GUEST)), _Record(peering, PasswordHash.create(PEERING))]
        )

    @classmethod
    def load(cls, path: Path | str) -> UsersDB:
        """Read a users file; every problem raises UsersFileError naming file, line and key."""
        try:
            doc = read_toml(Path(path))
            return cls(_parse(doc), doc.path, _parse_credentials(doc))
        except ConfigError as err:
            raise UsersFileError(str(err)) from None

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def users(self) -> Iterator[User]:
        return (record.user for record in self._records.values())

    def get(self, name: str) -> User | None:
        record = self._records.get(name)
        return record.user if record else None

    def password(self, name: str) -> PasswordHash | None:
        record = self._records.get(name)
        return record.password if record else None

    def put(self, user: User, password: PasswordHash) -> None:
        """Add or replace a user. A new password takes effect at once: the verified-login
        cache is keyed by the stored hash, so the old password's entries no longer match."""
        self._records[user.name] = _Record(user, password)

    def remove(self, name: str) -> None:
        self._records.pop(name, None)

    def recently_verified(self, name: str, password: str) -> bool:
        """True when these credentials succeeded recently: cheap (one HMAC), no scrypt."""
        record = self._records.get(name)
        return record is not None and self._verified.token(name, password, record.password) in self._verified

    def verify(self, name: str, password: str) -> bool:
        """Check a password; CPU-bound (scrypt) unless this login succeeded recently."""
        record = self._records.get(name)
        if record is None:
            _decoy().verify(password)
            return False
        token = self._verified.token(name, password, record.password)
        if token in self._verified:
            return True
        if not record.password.verify(password):
            return False
        self._verified.add(token)
        return True


def _parse(doc: TomlFile) -> list[_Record]:
    for key in doc.data:
        if key not in _SECTIONS:
            raise doc.error(
                (key,),
                "unknown key (a users file holds only [users.<name>] and [credentials.<login>] tables)",
            )
    users = doc.data.get("users", {})
    if not isinstance(users, dict):
        raise doc.error(("users",), f"expected a table of users, got {describe(users)}")
    records = []
    for name, entry in users.items():
        where = ("users", name)
        try:
            check_username(name)
        except ValueError as err:
            raise doc.error(where, str(err)) from None
        if not isinstance(entry, dict):
            raise doc.error(where, f"expected a table, got {describe(entry)}")
        for key in entry:
            if key not in _KEYS:
                raise doc.error((*where, key), f"unknown key (known: {', '.join(_KEYS)})")
        if "password" not in entry:
            raise doc.error(where, "missing key 'password'")
        try:
            password = _password(entry["password"])
        except (Invalid, ValueError) as err:
            raise doc.error((*where, "password"), str(err)) from None
        vhosts = _optional(doc, entry, where, "vhosts", string_list)
        tags = _optional(doc, entry, where, "tags", string_list)
        loopback_only = _optional(doc, entry, where, "loopback_only", _bool)
        limits = table_values(
            doc, (*where, "limits"), entry.get("limits", {}), dict.fromkeys(USER_LIMITS, LIMIT)
        )
        user = User(
            name,
            frozenset(vhosts) if vhosts is not None else None,
            tuple(tags or ()),
            name in _LOOPBACK_BY_DEFAULT if loopback_only is None else loopback_only,
            Grants(_permissions(doc, entry, where, vhosts or ()), _topic_permissions(doc, entry, where)),
            max_connections=limits.get("max-connections"),
            max_channels=limits.get("max-channels"),
        )
        records.append(_Record(user, password))
    return records


def _permissions(
    doc: TomlFile, entry: Mapping[str, object], where: tuple[str, ...], vhosts: Iterable[str]
) -> tuple[tuple[str, Permission], ...]:
    """[users.<name>.permissions."<vhost>"] configure/write/read: RabbitMQ's three patterns."""
    where = (*where, "permissions")
    granted = []
    for vhost, table in _vhost_tables(doc, entry, where):
        if vhost in vhosts:
            raise doc.error(
                (*where, vhost),
                f"vhost {vhost!r} is also in this user's vhosts list (full permissions there); keep one",
            )
        sources = _patterns(doc, (*where, vhost), table, ("configure", "write", "read"), pattern)
        granted.append((vhost, Permission.of(*sources)))
    return tuple(granted)


def _topic_permissions(
    doc: TomlFile, entry: Mapping[str, object], where: tuple[str, ...]
) -> tuple[tuple[str, TopicPermission], ...]:
    """[users.<name>.topic_permissions."<vhost>"."<exchange>"] write/read: routing keys."""
    where = (*where, "topic_permissions")
    granted = []
    for vhost, exchanges in _vhost_tables(doc, entry, where):
        for exchange, table in exchanges.items():
            at = (*where, vhost, exchange)
            if not isinstance(table, dict):
                raise doc.error(at, f"expected a table with write and read, got {describe(table)}")
            write, read = _patterns(doc, at, table, ("write", "read"), topic_pattern)
            granted.append((vhost, TopicPermission(exchange, write, read)))
    return tuple(granted)


def _vhost_tables(
    doc: TomlFile, entry: Mapping[str, object], where: tuple[str, ...]
) -> Iterator[tuple[str, dict[str, object]]]:
    """The (vhost, table) pairs of a `permissions` or `topic_permissions` table."""
    tables = entry.get(where[-1], {})
    if not isinstance(tables, dict):
        raise doc.error(where, f"expected a table of vhosts, got {describe(tables)}")
    for vhost, table in tables.items():
        if not 0 < len(vhost.encode()) <= 255:
            raise doc.error((*where, vhost), "a vhost name is 1-255 bytes")
        if not isinstance(table, dict):
            raise doc.error((*where, vhost), f"expected a table, got {describe(table)}")
        yield vhost, table


def _patterns(
    doc: TomlFile,
    where: tuple[str, ...],
    table: Mapping[str, object],
    keys: tuple[str, ...],
    check: Callable[[str], object],
) -> list[str]:
    """The pattern texts of `keys`, each required and passing `check` (no other key allowed)."""
    for key in table:
        if key not in keys:
            raise doc.error((*where, key), f"unknown key (known: {', '.join(keys)})")
    sources = []
    for key in keys:
        if key not in table:
            raise doc.error(where, f"missing key {key!r} (an empty pattern, '', grants nothing)")
        source = table[key]
        if not isinstance(source, str):
            raise doc.error((*where, key), f"expected a regular expression string, got {describe(source)}")
        try:
            check(source)
        except ValueError as err:
            raise doc.error((*where, key), str(err)) from None
        sources.append(source)
    return sources


def _parse_credentials(doc: TomlFile) -> dict[str, str]:
    """[credentials.<login>] password = "...": what this node sends when it logs in elsewhere."""
    credentials = doc.data.get("credentials", {})
    if not isinstance(credentials, dict):
        raise doc.error(("credentials",), f"expected a table of logins, got {describe(credentials)}")
    passwords = {}
    for login, entry in credentials.items():
        where = ("credentials", login)
        try:
            check_username(login)
        except ValueError as err:
            raise doc.error(where, str(err)) from None
        values = table_values(doc, where, entry, {"password": _plain_password})
        if "password" not in values:
            raise doc.error(where, "missing key 'password'")
        passwords[login] = values["password"]
    return passwords


def _plain_password(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise Invalid("the password as a non-empty string", value)
    return value


def _password(value: object) -> PasswordHash:
    if not isinstance(value, str):
        raise Invalid("a password hash string", value)
    if not value.startswith("scrypt$"):
        # Never echo the value: it is probably somebody's real password.
        raise ValueError(
            "this looks like a plain-text password; store a hash made by "
            "'amq-gateway passwd FILE USER' instead"
        )
    try:
        return PasswordHash.parse(value)
    except ValueError as err:
        raise ValueError(f"malformed password hash: {err}") from None


def _optional(
    doc: TomlFile,
    entry: Mapping[str, object],
    where: tuple[str, ...],
    key: str,
    check: Callable[[object], _T],
) -> _T | None:
    """`check(entry[key])`, None if the key is absent; an error naming the key if it fails."""
    if key not in entry:
        return None
    try:
        return check(entry[key])
    except Invalid as err:
        raise doc.error((*where, key), str(err)) from None


def string_list(value: object) -> list[str]:
    if not isinstance(value, list) or not all(
        isinstance(item, str) and 0 < len(item) <= 255 for item in value
    ):
        raise Invalid("an array of non-empty strings", value)
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise Invalid("true or false", value)
    return value
