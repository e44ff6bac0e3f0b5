"""The keys a topology file may hold, what each accepts, and which are required.

Kept apart from topology.loader so the schema reads as one table per section, next to the
docs (docs/topology.md) it must agree with; the loader walks these tables and turns every
mismatch into one error line.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.names import EXCHANGE_TYPES, TAGS, TRANSPORT_SPELLINGS, transport_name
from gateway.routing.federation_types import ALIASES, TYPES
from gateway.tomlfile import Check, Invalid, KeyPath, TomlFile, boolean, describe, integer, one_of, text
from topology.model import ROUTE_KINDS

#: Node names: they name `./var/<node>`, so no "/" and no leading dot.
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
NODE_NAME_EXPECTED = "a node name of letters, digits, '.', '_' or '-', starting with a letter or digit"
#: `nodes = "*"` (or omitted): every node of the file.
EVERY_NODE = "*"
MODES = ("pull", "push")


def node_name(value: object) -> str:
    if not isinstance(value, str) or not NODE_NAME.match(value):
        raise Invalid(NODE_NAME_EXPECTED, value)
    return value


def _string(what: str) -> Check:
    """Any string of at most 255 bytes ("" allowed: keys, and the default exchange)."""

    def check(value: object) -> str:
        if not isinstance(value, str) or len(value.encode()) > 255:
            raise Invalid(what, value)
        return value

    return check


def _host(value: object) -> str:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise Invalid("a host name or address", value)
    return value


def _nodes(value: object) -> tuple[str, ...] | None:
    """A node name, "*" or an array of node names -> the names, or None for every node."""
    expected = 'a node name, "*" (every node) or an array of node names'
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise Invalid(expected, value)
    if EVERY_NODE in names:
        if len(names) > 1:
            raise Invalid('"*" alone (it means every node)', value)
        return None
    return tuple(names)


def _table(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid("a table", value)
    return value


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise Invalid("an array of tags (non-empty strings)", value)
    return tuple(value)


_node_ref = text("a node name (a non-empty string)")
_exchange_ref = _string("an exchange name (a string of at most 255 bytes)")
_count = integer(0, 2**31 - 1)


@dataclass(frozen=True)
class Section:
    """One kind of entry: its keys' checks, the required ones (with what they are, for the
    "missing key" message) and the keys `[defaults.<name>]` may set."""

    keys: Mapping[str, Check]
    required: Mapping[str, str] = field(default_factory=dict)
    defaults: tuple[str, ...] = ()


class SectionReader:
    """Reads a TOML document's tables against Sections, collecting every problem with the line
    it is on, so that a file's mistakes are all reported at once (topology and scenario files)."""

    def __init__(self, doc: TomlFile) -> None:
        self.doc = doc
        self.problems: list[tuple[int, str]] = []

    def problem(self, path: KeyPath, message: str) -> None:
        lines = self.doc.lines
        line = next((lines[path[:end]] for end in range(len(path), 0, -1) if path[:end] in lines), 0)
        self.problems.append((line, f"{self.doc.where(path)}: {message}"))

    def sorted_problems(self) -> list[str]:
        return [message for _, message in sorted(self.problems, key=lambda problem: problem[0])]

    def top_level(self, known: Iterable[str]) -> None:
        """A problem for every top-level key not in `known`."""
        names = list(known)
        for key in self.doc.data:
            if key not in names:
                self.problem((key,), f"unknown key (known: {', '.join(names)})")

    def section_values(
        self,
        path: KeyPath,
        table: object,
        section: Section,
        base: Mapping[str, Any] | None = None,
        present: Collection[str] = (),
    ) -> dict[str, Any] | None:
        """The table's checked values over `base` (inherited ones; `present`: the keys they
        give); None if it is not a table at all."""
        if not isinstance(table, dict):
            self.problem(path, f"expected a table, got {describe(table)}")
            return None
        values = dict(base or {})
        for key, value in table.items():
            check = section.keys.get(key)
            if check is None:
                self.problem((*path, key), f"unknown key (known: {', '.join(section.keys)})")
                continue
            try:
                values[key] = check(value)
            except Invalid as err:
                self.problem((*path, key), str(err))
        for key, what in section.required.items():
            if key not in table and key not in present:
                self.problem(path, f"missing key '{key}' ({what})")
        return values


TOPOLOGY = Section({"name": text("a topology name (a non-empty string)")})

CREDENTIALS = Section(
    {"username": text("a user name (a non-empty string)"), "password": _string("a password (a string)")},
    required={"username": "the user name", "password": "the password"},
)

NODE = Section(
    {
        "host": _host,
        "port": integer(1, 65535),
        "region": text("a region name (a non-empty string)"),
        "tag": text("a federation tag (a non-empty string)"),
        "users": text("a users file path (a non-empty string)"),
        "credentials": text("a [credentials.<name>] name"),
        "tls_port": integer(1, 65535),
        "tls_cert": text("a certificate file path (a non-empty string)"),
        "tls_key": text("a private key file path (a non-empty string)"),
        "tls_ca": text("a CA certificates file path (a non-empty string)"),
    },
    required={"host": "the node's host name or address", "port": "the node's AMQP port, 1-65535"},
    defaults=("host", "region", "users", "credentials", "tls_ca"),
)

#: A link's or route's transport: tcp, or ssl (`tls` accepted, stored as ssl).
_TRANSPORT = one_of(*TRANSPORT_SPELLINGS)


def _transport(value: object) -> str:
    return transport_name(_TRANSPORT(value))


EXCHANGE = Section(
    {
        "name": text("an exchange name (a non-empty string of at most 255 bytes)"),
        "type": one_of(*EXCHANGE_TYPES),
        "durable": boolean,
        "auto_delete": boolean,
        "internal": boolean,
        "nodes": _nodes,
    },
    required={"name": "the exchange's name", "type": "one of " + ", ".join(EXCHANGE_TYPES)},
    defaults=("type", "durable", "auto_delete", "internal", "nodes"),
)

QUEUE = Section(
    {
        "name": text("a queue name (a non-empty string of at most 255 bytes)"),
        "nodes": _nodes,
        "durable": boolean,
        "auto_delete": boolean,
    },
    required={"name": "the queue's name"},
    defaults=("durable", "auto_delete", "nodes"),
)

BINDING = Section(
    {
        "exchange": _exchange_ref,
        "queue": text("a queue name (a non-empty string)"),
        "key": _string("a binding key (a string of at most 255 bytes)"),
        "arguments": _table,
        "nodes": _nodes,
    },
    required={"exchange": "the exchange to bind to", "queue": "the queue to bind"},
)

LINK = Section(
    {"from": _node_ref, "to": _node_ref, "durable": boolean, "transport": _transport},
    required={"from": "the node linked to (src-broker)", "to": "the node that opens the link (dest-broker)"},
    defaults=("durable", "transport"),
)

ROUTE = Section(
    {
        "kind": one_of(*ROUTE_KINDS),
        "from": _node_ref,
        "to": _node_ref,
        "exchange": _exchange_ref,
        "key": _string("a binding key (a string of at most 255 bytes)"),
        "queue": text("a queue name (a non-empty string)"),
        "mode": one_of(*MODES),
        "durable": boolean,
        "ack": _count,
        "credit": _count,
        "tag": text("a federation tag (a non-empty string)"),
        "excludes": _strings,
        "transport": _transport,
    },
    required={
        "kind": "one of " + ", ".join(ROUTE_KINDS),
        "from": "the source node",
        "to": "the destination node",
        "exchange": "the exchange messages are routed into",
    },
    defaults=("mode", "durable", "ack", "credit", "transport"),
)

#: Route keys that only some kinds take, with those kinds.
ROUTE_KIND_KEYS: dict[str, tuple[str, ...]] = {
    "key": ("exchange",),
    "queue": ("queue",),
    "tag": ("dynamic", "exchange"),
    "excludes": ("dynamic", "exchange"),
}
#: Keys a kind cannot do without, with what they are.
ROUTE_KIND_REQUIRED: dict[str, tuple[str, str]] = {
    "exchange": ("key", "the binding key on the source"),
    "queue": ("queue", "the source's queue"),
}

FEDERATION = Section(
    {
        "child": _node_ref,
        "parent": _node_ref,
        "exchange": _exchange_ref,
        "type": one_of(*TYPES, *ALIASES),
        "transport": _transport,
    },
    required={
        "child": "the node that opens the peering",
        "parent": "the node it attaches to",
        "exchange": "the exchange to federate",
    },
    defaults=("type", "transport"),
)

PUBLISHER = Section(
    {
        "node": _node_ref,
        "exchange": _exchange_ref,
        "key": _string("a routing key (a string of at most 255 bytes)"),
    },
    required={"node": "the node published to", "exchange": "the exchange published to"},
)

VHOST = Section(
    {"name": text("a vhost name (a non-empty string)"), "nodes": _nodes},
    required={"name": "the vhost's name"},
)


def _tags(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(tag, str) and tag in TAGS for tag in value):
        raise Invalid("an array of tags: " + ", ".join(TAGS), value)
    return tuple(value)


USER = Section(
    {
        "name": text("a user name (a non-empty string)"),
        "tags": _tags,
        "password_env": text("the name of an environment variable holding the password"),
        "password_file": text("the path of a file holding the password"),
        "nodes": _nodes,
    },
    required={"name": "the user's name"},
)
#: A [[users]] entry names where its password is, never the password itself.
PASSWORD_SOURCES = ("password_env", "password_file")

_vhost_ref = text("a vhost name (a non-empty string)")
_pattern = _string("a regular expression (a string; '' allows nothing)")

PERMISSION = Section(
    {
        "user": text("a user name (a non-empty string)"),
        "vhost": _vhost_ref,
        "configure": _pattern,
        "write": _pattern,
        "read": _pattern,
        "nodes": _nodes,
    },
    required={
        "user": "the user",
        "configure": "the configure pattern",
        "write": "the write pattern",
        "read": "the read pattern",
    },
)

TOPIC_PERMISSION = Section(
    {
        "user": text("a user name (a non-empty string)"),
        "vhost": _vhost_ref,
        "exchange": text("a topic exchange name (a non-empty string)"),
        "write": _pattern,
        "read": _pattern,
        "nodes": _nodes,
    },
    required={
        "user": "the user",
        "exchange": "the topic exchange",
        "write": "the routing keys the user may publish",
        "read": "the routing keys the user may bind",
    },
)

#: `[defaults.<name>]` tables, by the section whose entries inherit them.
DEFAULTABLE: dict[str, Section] = {
    "node": NODE,
    "exchange": EXCHANGE,
    "queue": QUEUE,
    "link": LINK,
    "route": ROUTE,
    "federation": FEDERATION,
}

#: `[[<name>]]` arrays of tables, with their sections and their defaults' names.
ARRAYS: dict[str, tuple[Section, str | None]] = {
    "exchanges": (EXCHANGE, "exchange"),
    "queues": (QUEUE, "queue"),
    "bindings": (BINDING, None),
    "links": (LINK, "link"),
    "routes": (ROUTE, "route"),
    "federations": (FEDERATION, "federation"),
    "publishers": (PUBLISHER, None),
    "vhosts": (VHOST, None),
    "users": (USER, None),
    "permissions": (PERMISSION, None),
    "topic_permissions": (TOPIC_PERMISSION, None),
}

#: Every top-level key, in the order the docs present them.
TOP_LEVEL = ("topology", "credentials", "defaults", "nodes", *ARRAYS)
