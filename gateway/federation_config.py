"""Federation settings of a node: where its exchanges attach to a parent (OpenAMQ's
`attach`, `attach_all` and `[[federate]]`), as the federation machinery consumes them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

#: The ESB exchanges `attach` federates, with their types (OpenAMQ's automatic federation).
ESB_EXCHANGES = (("amq.service", "service"), ("amq.data", "fanout"), ("amq.dataex", "fanout"))
DEFAULT_PORT = 5672


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
        return re.compile("".join(parts))

    def matches(self, exchange: str) -> bool:
        """Whole-name, case-sensitive match; `*` is any run of characters, `?` exactly one."""
        return self._regex.fullmatch(exchange) is not None


@dataclass(frozen=True)
class FederateEntry:
    """A [[federate]] entry as written; None falls back to the [federation] settings."""

    exchange: str
    attach: str | None = None
    vhost: str | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    type: str | None = None
    index: int = 1

    @property
    def where(self) -> str:
        return f"[[federate]] #{self.index} (exchange '{self.exchange}')"


@dataclass(frozen=True)
class FederationSettings:
    attach: str | None = None
    attach_vhost: str = "/"
    attach_login: str = "peering"
    attach_password: str = field(default="peering", repr=False)
    attach_all: str | None = None
    outbox_limit: int = 100_000
    outbox_policy: str = "block"
    federate: tuple[FederateEntry, ...] = ()

    def rules(self) -> tuple[FederationRule, ...]:
        """[[federate]] entries in order, then attach_all, then the ESB trio of attach."""
        rules = [
            self._rule(
                entry.exchange,
                entry.attach,
                entry.vhost,
                entry.login,
                entry.password,
                entry.type,
                entry.where,
            )
            for entry in self.federate
        ]
        if self.attach is not None:
            if self.attach_all is not None:
                rules.append(
                    self._rule(
                        self.attach_all, None, None, None, None, None, f"attach_all '{self.attach_all}'"
                    )
                )
            for name, kind in ESB_EXCHANGES:
                rules.append(self._rule(name, None, None, None, None, kind, f"attach ({name})"))
        return tuple(rules)

    def _rule(
        self,
        pattern: str,
        attach: str | None,
        vhost: str | None,
        login: str | None,
        password: str | None,
        kind: str | None,
        origin: str,
    ) -> FederationRule:
        host, port = split_host_port(attach or self.attach or "")
        return FederationRule(
            pattern,
            host,
            port,
            vhost or self.attach_vhost,
            login or self.attach_login,
            password or self.attach_password,
            "fanout" if kind == "data" else kind,
            origin,
        )


def split_host_port(text: str) -> tuple[str, int]:
    """ "host[:port]" (IPv6 in brackets) -> (host, port); ValueError if malformed."""
    match = re.fullmatch(r"(\[[^\]]+\]|[^:\[\]]+)(?::(\d+))?", text)
    if match is None or (match.group(2) is not None and not 1 <= int(match.group(2)) <= 65535):
        raise ValueError(f"expected host[:port], got '{text}'")
    return match.group(1).strip("[]"), int(match.group(2) or DEFAULT_PORT)
