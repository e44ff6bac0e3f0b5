"""Users: the users file (TOML, hashed passwords), the built-in guest, and `passwd`.

```toml
[users.alice]
password = "scrypt$n=16384,r=8,p=1$<salt>$<hash>"   # made by `amq-gateway passwd`
vhosts = ["/"]                # optional; omitted = every vhost
tags = ["administrator"]      # optional
loopback_only = false         # optional; true by default for "guest" and "peering", as in RabbitMQ
limits = { max-connections = 5, max-channels = 100 }   # optional: RabbitMQ's user limits

[credentials.peering]         # what this node presents when IT logs in to a parent (federation)
password = "plain text"       # plain text: the node has to send it
```

Without a users file the node has RabbitMQ's default, guest/guest, and OpenAMQ's
peering/peering for federation, both from loopback only. Writing it is gateway.security.passwd's.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TypeVar

from gateway.security.passwords import PasswordHash, VerifiedCache
from gateway.tomlfile import ConfigError, Invalid, TomlFile, describe, integer, read_toml, table_values

_T = TypeVar("_T")

GUEST = "guest"
#: The login federation peerings use by default (OpenAMQ's), built in like guest.
PEERING = "peering"
#: Users that may connect from loopback only unless the file says otherwise.
_LOOPBACK_BY_DEFAULT = frozenset({GUEST, PEERING})
_KEYS = ("password", "vhosts", "tags", "loopback_only", "limits")
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
    """An authenticated identity and what it may reach. vhosts None means every vhost."""

    name: str
    vhosts: frozenset[str] | None = None
    tags: tuple[str, ...] = ()
    loopback_only: bool = False
    #: How many connections the user may have open at once over the node (None: no limit).
    max_connections: int | None = None
    #: How many channels the user may have open at once over all its connections.
    max_channels: int | None = None

    def may_access(self, vhost: str) -> bool:
        return self.vhosts is None or vhost in self.vhosts

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
    """The users a node accepts. Immutable once loaded; reload by loading again."""

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
        guest = User(GUEST, None, ("administrator",), loopback_only=True)
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

    def get(self, name: str) -> User | None:
        record = self._records.get(name)
        return record.user if record else None

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
            max_connections=limits.get("max-connections"),
            max_channels=limits.get("max-channels"),
        )
        records.append(_Record(user, password))
    return records


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
