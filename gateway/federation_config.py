"""Federation settings of a node: where its exchanges attach to a parent (OpenAMQ's `attach`,
`attach_all` and `[[federate]]`), read from the node file's `[federation]` table and
`[[federate]]` entries and from the --attach flags, as the federation machinery consumes them.

The password of each login comes from the users file's `[credentials.<login>]` tables (the
node's security section); the built-in `peering` login defaults to password `peering`, as in
OpenAMQ, so nodes without users files federate over loopback out of the box.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gateway.names import DEFAULT_PORT, DEFAULT_VHOST, SYSTEM_EXCHANGES
from gateway.routing.federation_types import ALIASES, TYPES
from gateway.tomlfile import (
    Check,
    ConfigError,
    Invalid,
    TomlFile,
    describe,
    integer,
    one_of,
    table_values,
    text,
)

#: The ESB exchanges `attach` federates, with their types (OpenAMQ's automatic federation).
ESB_EXCHANGES = (("amq.service", "service"), ("amq.data", "fanout"), ("amq.dataex", "fanout"))
OUTBOX_POLICIES = ("block", "drop-oldest")
DEFAULT_LOGIN = "peering"
DEFAULT_PASSWORD = "peering"


def split_host_port(address: str) -> tuple[str, int]:
    """ "host[:port]" (IPv6 in brackets) -> (host, port); ValueError if malformed."""
    match = re.fullmatch(r"(\[[^\]]+\]|[^:\[\]\s]+)(?::(\d+))?", address)
    if match is None or (match.group(2) is not None and not 1 <= int(match.group(2)) <= 65535):
        raise ValueError(f"expected host[:port], got '{address}'")
    return match.group(1).strip("[]"), int(match.group(2) or DEFAULT_PORT)


def is_pattern(name: str) -> bool:
    """True when an exchange name in a rule is a glob (`*`, `?`) rather than one exchange."""
    return "*" in name or "?" in name


def cannot_federate(name: str, internal: bool = False) -> str | None:
    """Why the exchange called `name` cannot be federated (default and system ones, and
    internal ones when `internal`), or None. The node and the planner both ask here."""
    if name not in SYSTEM_EXCHANGES:
        return f"internal exchange '{name}' cannot be federated" if internal else None
    what = "the default exchange" if name == "" else f"system exchange '{name}'"
    return f"{what} cannot be federated"


@dataclass(frozen=True)
class FederationRule:
    """One resolved rule: federate exchanges matching `pattern` on this node to a parent."""

    pattern: str
    host: str
    port: int
    vhost: str
    login: str
    password: str = field(repr=False)
    type: str | None
    origin: str

    @cached_property
    def _regex(self) -> re.Pattern[str]:
        parts = ("." if char == "?" else ".*" if char == "*" else re.escape(char) for char in self.pattern)
        return re.compile("".join(parts), re.DOTALL)

    def matches(self, exchange: str) -> bool:
        """Whole-name, case-sensitive match; `*` is any run of characters, `?` exactly one."""
        return self._regex.fullmatch(exchange) is not None


@dataclass(frozen=True)
class FederateEntry:
    """A [[federate]] entry as written; None falls back to the [federation] settings.
    `where` names it in errors (file, line, index and exchange)."""

    exchange: str
    attach: str | None = None
    vhost: str | None = None
    login: str | None = None
    type: str | None = None
    where: str = ""

    def __post_init__(self) -> None:
        if not self.where:
            object.__setattr__(self, "where", f"[[federate]] exchange '{self.exchange}'")


@dataclass(frozen=True)
class FederationSettings:
    """The [federation] table, the [[federate]] entries and the logins' passwords."""

    attach: str | None = None
    attach_vhost: str = DEFAULT_VHOST
    attach_login: str = DEFAULT_LOGIN
    attach_all: str | None = None
    outbox_limit: int = 100_000
    outbox_policy: str = "block"
    federate: tuple[FederateEntry, ...] = ()
    #: login -> password, from the users file's [credentials.<login>] tables.
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def with_flags(self, **flags: object) -> FederationSettings:
        """Apply --attach, --attach-vhost, --attach-login and --attach-all (None = not given);
        errors name the flag."""
        changes = {}
        for key, value in flags.items():
            if value is None:
                continue
            try:
                changes[key] = FEDERATION_CHECKS[key](value)
            except Invalid as err:
                raise ConfigError(f"--{key.replace('_', '-')}: {err}") from None
        return dataclasses.replace(self, **changes)

    def with_credentials(self, credentials: Mapping[str, str]) -> FederationSettings:
        return dataclasses.replace(self, credentials=dict(credentials))

    def password_for(self, login: str) -> str:
        """The password this node presents as `login`; ConfigError if it has none."""
        password = self.credentials.get(login)
        if password is not None:
            return password
        if login == DEFAULT_LOGIN:
            return DEFAULT_PASSWORD
        raise ConfigError(
            f"no password for login '{login}': add it to the users file as "
            f'[credentials.{login}] password = "..."'
        )

    def rules(self) -> tuple[FederationRule, ...]:
        """[[federate]] entries in order, then attach_all, then the ESB trio of attach.
        ConfigError for an entry with no parent or a login without a password."""
        rules = [
            self._rule(entry.exchange, entry.attach, entry.vhost, entry.login, entry.type, entry.where)
            for entry in self.federate
        ]
        if self.attach_all is not None and self.attach is None:
            raise ConfigError(
                f"federation.attach_all '{self.attach_all}' needs a parent: set federation.attach (--attach)"
            )
        if self.attach is not None:
            if self.attach_all is not None:
                rules.append(
                    self._rule(self.attach_all, None, None, None, None, f"attach_all '{self.attach_all}'")
                )
            for name, kind in ESB_EXCHANGES:
                rules.append(self._rule(name, None, None, None, kind, f"attach ({name})"))
        return tuple(rules)

    def _rule(
        self,
        pattern: str,
        attach: str | None,
        vhost: str | None,
        login: str | None,
        kind: str | None,
        origin: str,
    ) -> FederationRule:
        parent = attach or self.attach
        if parent is None:
            raise ConfigError(
                f"{origin}: no parent to attach to: give the entry an attach, "
                "or set federation.attach (--attach)"
            )
        host, port = split_host_port(parent)
        login = login or self.attach_login
        try:
            password = self.password_for(login)
        except ConfigError as err:
            raise ConfigError(f"{origin}: {err}") from None
        kind = ALIASES.get(kind, kind) if kind is not None else None
        return FederationRule(pattern, host, port, vhost or self.attach_vhost, login, password, kind, origin)


# --------------------------------------------------------------------------------------------
# Reading the node file


def _parent(value: object) -> str:
    if not isinstance(value, str):
        raise Invalid("host[:port]", value)
    try:
        split_host_port(value)
    except ValueError:
        raise Invalid("host[:port]", value) from None
    return value


_pattern = text("an exchange name, or a pattern with * (any characters) and ? (one character)")


def _exchange(value: object) -> str:
    """Like _pattern, but "" gets through to be refused as the default exchange."""
    return value if value == "" else _pattern(value)


_vhost = text("a vhost name (a non-empty string of at most 255 bytes)")
_login = text("a user name (a non-empty string of at most 255 bytes)")

FEDERATION_CHECKS: dict[str, Check] = {
    "attach": _parent,
    "attach_vhost": _vhost,
    "attach_login": _login,
    "attach_all": _pattern,
    "outbox_limit": integer(1, 2**31 - 1),
    "outbox_policy": one_of(*OUTBOX_POLICIES),
}

FEDERATE_CHECKS: dict[str, Check] = {
    "exchange": _exchange,
    "attach": _parent,
    "vhost": _vhost,
    "login": _login,
    "type": one_of(*TYPES, *ALIASES),
}


def load_federation_settings(doc: TomlFile) -> FederationSettings:
    """The [federation] table and [[federate]] entries of a node file (both optional)."""
    values: dict[str, Any] = table_values(
        doc, ("federation",), doc.data.get("federation", {}), FEDERATION_CHECKS
    )
    entries = doc.data.get("federate", [])
    if not isinstance(entries, list):
        raise doc.error(
            ("federate",), f"expected [[federate]] entries (an array of tables), got {describe(entries)}"
        )
    federate = tuple(_federate_entry(doc, index, entry) for index, entry in enumerate(entries))
    _check_federated_once(doc, federate)
    return FederationSettings(**values, federate=federate)


def _federate_entry(doc: TomlFile, index: int, entry: object) -> FederateEntry:
    where = ("federate", index)
    values = table_values(doc, where, entry, FEDERATE_CHECKS)
    if "exchange" not in values:
        raise doc.error(where, "missing key 'exchange' (the exchange name or pattern to federate)")
    exchange = values["exchange"]
    reason = cannot_federate(exchange)
    if reason is not None:
        raise doc.error((*where, "exchange"), reason)
    return FederateEntry(**values, where=f"{doc.where(where)} (exchange '{exchange}')")


def _check_federated_once(doc: TomlFile, entries: tuple[FederateEntry, ...]) -> None:
    """Two entries naming the same exchange would federate it twice: refuse the second."""
    first: dict[str, int] = {}
    for index, entry in enumerate(entries):
        earlier = first.setdefault(entry.exchange, index)
        if earlier != index:
            raise doc.error(
                ("federate", index, "exchange"),
                f"'{entry.exchange}' is already federated by federate[{earlier}]: "
                "an exchange is federated at most once",
            )
