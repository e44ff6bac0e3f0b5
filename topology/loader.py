"""Read a topology file (docs/topology.md) into the model (topology.model).

An operator fixes a file faster from a complete list than one error per run, so loading
checks the whole file first and raises one `TopologyError` naming every problem, each as
`file:line: key.path: message`; only a file without problems is turned into a `Topology`.
The loader refuses only what the model cannot represent (unknown keys, wrong types, missing
keys, bad node names or ports, unknown credentials); references to undeclared nodes, exchanges
or queues, and duplicates, are the planner's findings (topology.checks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from gateway.names import DEFAULT_TRANSPORT, TLS_TRANSPORT
from gateway.tls import tls_problem
from gateway.tomlfile import ConfigError, Invalid, KeyPath, TomlFile, describe, parse_toml, read_toml
from topology import schema
from topology.model import (
    GUEST,
    VHOST,
    Access,
    Binding,
    Credentials,
    Exchange,
    Federation,
    Link,
    Node,
    Permission,
    Publisher,
    Queue,
    Route,
    TopicPermission,
    Topology,
    User,
    Vhost,
)
from topology.schema import Section

_T = TypeVar("_T")


class TopologyError(Exception):
    """A topology file cannot be used: `str()` is every problem, one line each, by line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def load_topology(path: Path) -> Topology:
    """The topology in the file at `path`; TopologyError lists every problem with it."""
    try:
        doc = read_toml(path)
    except ConfigError as err:
        raise TopologyError([str(err)]) from None
    return _load(doc, str(path))


def load_topology_text(text: str, path: str) -> Topology:
    """The topology in `text`, read as if from `path` (errors name it; `users` paths and the
    default name derive from it), so tests need no files."""
    try:
        doc = parse_toml(text, Path(path))
    except ConfigError as err:
        raise TopologyError([str(err)]) from None
    return _load(doc, path)


def _load(doc: TomlFile, path: str) -> Topology:
    reader = _Reader(doc)
    content = reader.read()
    if reader.problems:
        raise TopologyError(reader.sorted_problems())
    return _build(doc, path, content)


# --------------------------------------------------------------------------------------------
# Checking: every problem is collected, none stops the walk


@dataclass(frozen=True)
class _Inherited:
    """A `[defaults.<kind>]` table: its valid values, and every key it sets (even badly), so
    an entry missing a key whose default was bad is not blamed a second time."""

    values: dict[str, Any]
    present: frozenset[str]


_NOTHING = _Inherited({}, frozenset())


@dataclass(frozen=True)
class _Content:
    """The checked file, entries still as key -> value (with defaults merged in)."""

    name: str | None
    credentials: dict[str, Credentials]
    nodes: dict[str, tuple[KeyPath, dict[str, Any]]]
    entries: dict[str, list[tuple[KeyPath, dict[str, Any]]]]


class _Reader(schema.SectionReader):
    def __init__(self, doc: TomlFile) -> None:
        super().__init__(doc)
        #: Every [credentials.<name>] declared, usable or not (one error per mistake).
        self.credential_names: list[str] = []

    def read(self) -> _Content:
        data = self.doc.data
        self.top_level(schema.TOP_LEVEL)
        topology = self.fields(("topology",), data.get("topology", {}), schema.TOPOLOGY)
        credentials = self.credentials(data.get("credentials", {}))
        defaults = self.defaults(data.get("defaults", {}))
        nodes = self.nodes(data.get("nodes", {}), defaults.get("node", _NOTHING))
        entries = {
            name: self.array(name, section, defaults.get(kind or "", _NOTHING))
            for name, (section, kind) in schema.ARRAYS.items()
        }
        self.tls_ends(nodes, entries)
        return _Content((topology or {}).get("name"), credentials, nodes, entries)

    def fields(
        self, path: KeyPath, table: object, section: Section, inherited: _Inherited = _NOTHING
    ) -> dict[str, Any] | None:
        """The table's values over the inherited ones; None if it is not a table at all."""
        return self.section_values(path, table, section, inherited.values, inherited.present)

    def tables(self, key: str, value: object) -> dict[str, Any]:
        """A table of named tables (`[nodes.<name>]`, ...), or {} after saying it is not."""
        if isinstance(value, dict):
            return value
        self.problem((key,), f"expected [{key}.<name>] tables, got {describe(value)}")
        return {}

    def credentials(self, value: object) -> dict[str, Credentials]:
        found = {}
        for name, table in self.tables("credentials", value).items():
            self.credential_names.append(name)
            values = self.fields(("credentials", name), table, schema.CREDENTIALS)
            if values is not None and {"username", "password"} <= values.keys():
                found[name] = Credentials(name, values["username"], values["password"])
        return found

    def credentials_name(self, path: KeyPath, values: dict[str, Any]) -> None:
        name = values.get("credentials")
        declared = self.credential_names
        if name is not None and name not in declared and name != GUEST.name:
            choices = ", ".join([*declared, *([GUEST.name] if GUEST.name not in declared else [])])
            self.problem((*path, "credentials"), f"unknown credentials '{name}' (known: {choices})")
            del values["credentials"]

    def defaults(self, value: object) -> dict[str, _Inherited]:
        found = {}
        for kind, table in self.tables("defaults", value).items():
            path: KeyPath = ("defaults", kind)
            section = schema.DEFAULTABLE.get(kind)
            if section is None:
                self.problem(path, f"unknown key (known: {', '.join(schema.DEFAULTABLE)})")
                continue
            keys = {key: section.keys[key] for key in section.defaults}
            values = self.fields(path, table, Section(keys))
            if values is not None:
                if kind == "node":
                    self.credentials_name(path, values)
                found[kind] = _Inherited(values, frozenset(table))
        return found

    def nodes(self, value: object, inherited: _Inherited) -> dict[str, tuple[KeyPath, dict[str, Any]]]:
        found = {}
        for name, table in self.tables("nodes", value).items():
            path: KeyPath = ("nodes", name)
            try:
                schema.node_name(name)
            except Invalid as err:
                self.problem(path, str(err))
            values = self.fields(path, table, schema.NODE, inherited)
            if values is not None:
                if isinstance(table, dict) and "credentials" in table:
                    self.credentials_name(path, values)
                problem = tls_problem(values)
                if problem is not None:
                    self.problem((*path, problem[0]), problem[1])
                found[name] = (path, values)
        return found

    def tls_ends(
        self,
        nodes: dict[str, tuple[KeyPath, dict[str, Any]]],
        entries: dict[str, list[tuple[KeyPath, dict[str, Any]]]],
    ) -> None:
        """An ssl link, route or federation needs a certificate on both nodes: the opener logs
        in with its own (EXTERNAL), the other one listens for TLS."""
        ends = {"links": ("from", "to"), "routes": ("from", "to"), "federations": ("child", "parent")}
        for section, keys in ends.items():
            for path, values in entries[section]:
                if values.get("transport") != TLS_TRANSPORT:
                    continue
                for end in keys:
                    name = values.get(end)
                    if name in nodes and "tls_cert" not in nodes[name][1]:
                        self.problem(
                            (*path, "transport"),
                            f"ssl needs a certificate on node '{name}' (its tls_cert and tls_key)",
                        )

    def array(
        self, name: str, section: Section, inherited: _Inherited
    ) -> list[tuple[KeyPath, dict[str, Any]]]:
        value = self.doc.data.get(name, [])
        if not isinstance(value, list):
            self.problem((name,), f"expected [[{name}]] entries (an array of tables), got {describe(value)}")
            return []
        found = []
        for index, table in enumerate(value):
            path: KeyPath = (name, index)
            if section is schema.USER:
                table = self.password_source(path, table)
            values = self.fields(path, table, section, inherited)
            if values is not None:
                if section is schema.ROUTE:
                    self.route_kind(path, table, values)
                found.append((path, values))
        return found

    def password_source(self, path: KeyPath, table: object) -> object:
        """A [[users]] entry says where its password is, in one way, never the password: the
        entry without a `password` key, which gets this error rather than an unknown key's."""
        if not isinstance(table, dict):
            return table
        if "password" in table:
            self.problem(
                (*path, "password"),
                "passwords are never written in a topology file: name an environment variable"
                " (password_env) or a file (password_file) holding it",
            )
            table = {key: value for key, value in table.items() if key != "password"}
        if sum(key in table for key in schema.PASSWORD_SOURCES) != 1:
            self.problem(path, "exactly one of password_env and password_file (where the user's password is)")
        return table

    def route_kind(self, path: KeyPath, table: dict[str, Any], values: dict[str, Any]) -> None:
        """The keys that depend on a route's kind."""
        kind = values.get("kind")
        if kind is None:
            return
        for key, kinds in schema.ROUTE_KIND_KEYS.items():
            if key in table and kind not in kinds:
                self.problem(
                    (*path, key), f"only {' and '.join(kinds)} routes take '{key}', this is a {kind} route"
                )
        required = schema.ROUTE_KIND_REQUIRED.get(kind)
        if required is not None and required[0] not in table:
            self.problem(path, f"missing key '{required[0]}' ({required[1]}, required for {kind} routes)")
        if kind == "dynamic" and table.get("mode") == "push":
            self.problem(
                (*path, "mode"), "dynamic routes are always pulled by the destination (push is refused)"
            )


# --------------------------------------------------------------------------------------------
# Building the model from a file without problems


def _build(doc: TomlFile, path: str, content: _Content) -> Topology:
    folder = Path(path).parent
    nodes = {
        name: Node(
            name,
            values["host"],
            values["port"],
            region=values.get("region", ""),
            tag=values.get("tag", ""),
            users=_file(folder, values.get("users")),
            credentials=content.credentials.get(values.get("credentials", ""), GUEST),
            tls_port=values.get("tls_port"),
            tls_cert=_file(folder, values.get("tls_cert")),
            tls_key=_file(folder, values.get("tls_key")),
            tls_ca=_file(folder, values.get("tls_ca")),
            where=doc.where(where),
        )
        for name, (where, values) in content.nodes.items()
    }
    every = tuple(nodes)

    def on(values: dict[str, Any]) -> tuple[str, ...]:
        names: tuple[str, ...] | None = values.get("nodes")
        return every if names is None else names

    entries = content.entries
    exchanges = tuple(
        Exchange(
            node,
            values["name"],
            values["type"],
            durable=values.get("durable", True),
            auto_delete=values.get("auto_delete", False),
            internal=values.get("internal", False),
            where=doc.where(where),
        )
        for where, values in entries["exchanges"]
        for node in on(values)
    )
    queues = tuple(
        Queue(
            node,
            values["name"],
            durable=values.get("durable", True),
            auto_delete=values.get("auto_delete", False),
            where=doc.where(where),
        )
        for where, values in entries["queues"]
        for node in on(values)
    )
    bindings = tuple(
        Binding(
            node,
            values["exchange"],
            values["queue"],
            key=values.get("key", ""),
            arguments=values.get("arguments", {}),
            where=doc.where(where),
        )
        for where, values in entries["bindings"]
        for node in _binding_nodes(values, queues, every)
    )
    links = tuple(
        Link(
            values["to"],
            values["from"],
            durable=values.get("durable", True),
            transport=values.get("transport", DEFAULT_TRANSPORT),
            where=doc.where(where),
        )
        for where, values in entries["links"]
    )
    routes = tuple(_route(values, doc.where(where)) for where, values in entries["routes"])
    partial = Topology(
        content.name or Path(path).stem, path, nodes, exchanges, queues, bindings, links, routes
    )
    written = (
        Federation(
            values["child"],
            values["parent"],
            values["exchange"],
            values.get("type", ""),
            doc.where(where),
            values.get("transport", DEFAULT_TRANSPORT),
        )
        for where, values in entries["federations"]
    )
    federations = tuple(replace(each, type=partial.federation_type(each)) for each in written)
    publishers = tuple(
        Publisher(values["node"], values["exchange"], key=values.get("key", ""), where=doc.where(where))
        for where, values in entries["publishers"]
    )
    return Topology(
        partial.name,
        path,
        nodes,
        exchanges,
        queues,
        bindings,
        links,
        routes,
        federations,
        publishers,
        _access(doc, folder, entries, on),
    )


def _access(
    doc: TomlFile,
    folder: Path,
    entries: dict[str, list[tuple[KeyPath, dict[str, Any]]]],
    on: Callable[[dict[str, Any]], tuple[str, ...]],
) -> Access:
    """The file's [[vhosts]], [[users]], [[permissions]] and [[topic_permissions]], one entry
    per node they name (every node without `nodes`)."""

    def each(array: str, build: Callable[[str, dict[str, Any], str], _T]) -> tuple[_T, ...]:
        return tuple(
            build(node, values, doc.where(where)) for where, values in entries[array] for node in on(values)
        )

    def password_file(values: dict[str, Any]) -> str | None:
        path = values.get("password_file")
        return None if path is None else str(folder / Path(path).expanduser())

    return Access(
        each("vhosts", lambda node, v, where: Vhost(node, v["name"], where)),
        each(
            "users",
            lambda node, v, where: User(
                node, v["name"], tuple(v.get("tags", ())), v.get("password_env"), password_file(v), where
            ),
        ),
        each(
            "permissions",
            lambda node, v, where: Permission(
                node, v["user"], v.get("vhost", VHOST), v["configure"], v["write"], v["read"], where
            ),
        ),
        each(
            "topic_permissions",
            lambda node, v, where: TopicPermission(
                node, v["user"], v.get("vhost", VHOST), v["exchange"], v["write"], v["read"], where
            ),
        ),
    )


def _binding_nodes(
    values: dict[str, Any], queues: tuple[Queue, ...], every: tuple[str, ...]
) -> tuple[str, ...]:
    """Where a binding is made: its `nodes`, else every node declaring its queue, else every
    node (so the checks see, and report, a binding whose queue is declared nowhere)."""
    names: tuple[str, ...] | None = values.get("nodes")
    if names is not None:
        return names
    declaring = tuple(dict.fromkeys(queue.node for queue in queues if queue.name == values["queue"]))
    return declaring or every


def _file(folder: Path, path: str | None) -> str | None:
    """A path of the file (users, certificates) as the node is given it: from the file's folder."""
    return None if path is None else str(folder / Path(path).expanduser())


def _route(values: dict[str, Any], where: str) -> Route:
    # [defaults.route] mode applies only where push is possible: dynamic routes are pulled.
    mode = "pull" if values["kind"] == "dynamic" else values.get("mode", "pull")
    return Route(
        values["kind"],
        values["from"],
        values["to"],
        values["exchange"],
        key=values.get("key"),
        queue=values.get("queue"),
        push=mode == "push",
        durable=values.get("durable", True),
        ack=values.get("ack"),
        credit=values.get("credit"),
        tag=values.get("tag"),
        excludes=values.get("excludes", ()),
        transport=values.get("transport", DEFAULT_TRANSPORT),
        where=where,
    )
