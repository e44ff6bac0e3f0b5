"""Durable links and routes: `federation.db`, a small SQLite file in the node's data dir.

Apart from the message store (gateway.store) on purpose: federation config changes are rare
operator actions, written synchronously, one transaction each, and read once at start, while
the message store is a group-committed hot path owned by the broker. The data dir's lock,
taken by the message store, already keeps a second node away from this file.

Records are the JSON the manager builds (a link's address, credentials, transport and
heartbeat; a route's RouteConfig), so this module knows nothing of their fields beyond the
keys: a link by (host, port), a route by its link and its identity. The password is stored as
given, because the link must log in with it again after a restart; the file is made readable
by the node's user only.

The bindings a federated exchange's peering made on its parent's queue are stored too (one row
each, kept in step by the peering): without them a restarted child could not unbind those
withdrawn while it was down, and the parent would route to it for nothing, for ever.

So are the last adverts each downstream node with a durable dynamic route sent this node (the
control message as received, one row per vhost, exchange and sender): after a crash the node
routes into that node's durable bridge queue again before it reconnects and resends them.

Without a data dir (`--memory`) the same code runs on an in-memory database: durable links and
routes work for the node's lifetime and nothing outlives it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

from gateway.store.opening import private_file
from gateway.store.tables import canonical, dump_table, load_table

DB_FILE = "federation.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS links (
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (host, port)
);
CREATE TABLE IF NOT EXISTS routes (
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    identity TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (host, port, identity)
);
CREATE TABLE IF NOT EXISTS attachments (
    vhost TEXT NOT NULL,
    exchange TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (vhost, exchange)
);
CREATE TABLE IF NOT EXISTS remote_bindings (
    vhost TEXT NOT NULL,
    exchange TEXT NOT NULL,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    parent_vhost TEXT NOT NULL,
    queue TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    arguments BLOB NOT NULL,
    PRIMARY KEY (vhost, exchange, host, port, parent_vhost, queue, routing_key, arguments)
);
CREATE TABLE IF NOT EXISTS adverts (
    vhost TEXT NOT NULL,
    exchange TEXT NOT NULL,
    sender TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (vhost, exchange, sender)
);
"""
# Tables are only ever added, with IF NOT EXISTS: opening a federation.db written by an older
# version creates the missing ones in place, so it needs no version number.

_TARGET = "vhost = ? AND exchange = ? AND host = ? AND port = ? AND parent_vhost = ? AND queue = ?"

Record = dict[str, Any]
#: A binding as the parent has it: (routing key, arguments).
Binding = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class BindingTarget:
    """Whose bindings on which parent queue: a federated exchange (local vhost and name) and
    the queue on its parent (host, port, vhost, name). Rows of another parent are never
    loaded, so a federation moved to a new parent does not unbind them on the wrong broker."""

    vhost: str
    exchange: str
    host: str
    port: int
    parent_vhost: str
    queue: str


def _encoded(arguments: dict[str, Any]) -> bytes:
    """Arguments as stored: the message store's lossless field-table encoding, not JSON (field
    tables hold bytes, Decimal, datetime) nor pamqp's (it narrows doubles and truncates
    timestamps), so they load back with the same binding identity; keys sorted so that equal
    tables make equal keys."""
    return dump_table(canonical(arguments))


class FederationStore:
    """The durable links, routes and federated exchanges (attachments) of one node."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    @classmethod
    def open(cls, data_dir: Path | None) -> FederationStore:
        """The store in `data_dir` (created if missing), or in memory when it is None."""
        if data_dir is None:
            db = sqlite3.connect(":memory:")
        else:
            path = Path(data_dir) / DB_FILE
            private_file(path)
            db = sqlite3.connect(path)
            db.execute("PRAGMA synchronous = FULL")
        with db:
            db.executescript(_SCHEMA)
        return cls(db)

    def close(self) -> None:
        self._db.close()

    def load(self) -> tuple[list[Record], list[tuple[str, int, Record]]]:
        """(links, [(host, port, route)]) in the order they were first stored."""
        links = [json.loads(row[0]) for row in self._db.execute("SELECT record FROM links ORDER BY rowid")]
        routes = [
            (host, port, json.loads(record))
            for host, port, record in self._db.execute("SELECT host, port, record FROM routes ORDER BY rowid")
        ]
        return links, routes

    def put_link(self, host: str, port: int, record: Record) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO links (host, port, record) VALUES (?, ?, ?)",
                (host, port, json.dumps(record)),
            )

    def delete_link(self, host: str, port: int) -> None:
        """The link and every route stored on it."""
        with self._db:
            self._db.execute("DELETE FROM links WHERE host = ? AND port = ?", (host, port))
            self._db.execute("DELETE FROM routes WHERE host = ? AND port = ?", (host, port))

    def put_route(self, host: str, port: int, identity: Any, record: Record) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO routes (host, port, identity, record) VALUES (?, ?, ?, ?)",
                (host, port, json.dumps(identity), json.dumps(record)),
            )

    def delete_route(self, host: str, port: int, identity: Any) -> None:
        with self._db:
            self._db.execute(
                "DELETE FROM routes WHERE host = ? AND port = ? AND identity = ?",
                (host, port, json.dumps(identity)),
            )

    def load_attachments(self) -> list[Record]:
        """Durable federated exchanges, in the order they were first stored."""
        return [
            json.loads(row[0]) for row in self._db.execute("SELECT record FROM attachments ORDER BY rowid")
        ]

    def put_attachment(self, vhost: str, exchange: str, record: Record) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO attachments (vhost, exchange, record) VALUES (?, ?, ?)",
                (vhost, exchange, json.dumps(record)),
            )

    def delete_attachment(self, vhost: str, exchange: str) -> None:
        with self._db:
            self._db.execute("DELETE FROM attachments WHERE vhost = ? AND exchange = ?", (vhost, exchange))

    def load_bindings(self, target: BindingTarget) -> list[Binding]:
        """The bindings stored for `target`, in the order they were first stored."""
        rows = self._db.execute(
            f"SELECT routing_key, arguments FROM remote_bindings WHERE {_TARGET} ORDER BY rowid",
            astuple(target),
        )
        return [(key, load_table(arguments)) for key, arguments in rows]

    def add_bindings(self, target: BindingTarget, bindings: Iterable[Binding]) -> None:
        """Store bindings (those already stored are left as they are), in one transaction."""
        rows = [(*astuple(target), key, _encoded(arguments)) for key, arguments in bindings]
        with self._db:
            self._db.executemany(
                "INSERT OR IGNORE INTO remote_bindings VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows
            )

    def remove_binding(self, target: BindingTarget, key: str, arguments: dict[str, Any]) -> None:
        with self._db:
            self._db.execute(
                f"DELETE FROM remote_bindings WHERE {_TARGET} AND routing_key = ? AND arguments = ?",
                (*astuple(target), key, _encoded(arguments)),
            )

    def delete_bindings(self, vhost: str, exchange: str) -> None:
        """Every binding stored for the federated exchange, whichever parent it was made on."""
        with self._db:
            self._db.execute(
                "DELETE FROM remote_bindings WHERE vhost = ? AND exchange = ?", (vhost, exchange)
            )

    def load_adverts(self) -> list[tuple[str, str, str, bytes]]:
        """(vhost, exchange, sender, control message body) of every stored advert set."""
        rows = self._db.execute("SELECT vhost, exchange, sender, body FROM adverts ORDER BY rowid")
        return [(vhost, exchange, sender, bytes(body)) for vhost, exchange, sender, body in rows]

    def put_adverts(self, vhost: str, exchange: str, sender: str, body: bytes) -> None:
        """A downstream node's complete adverts for the exchange, replacing what it sent before."""
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO adverts (vhost, exchange, sender, body) VALUES (?, ?, ?, ?)",
                (vhost, exchange, sender, body),
            )

    def delete_adverts(self, vhost: str, exchange: str, sender: str) -> None:
        with self._db:
            self._db.execute(
                "DELETE FROM adverts WHERE vhost = ? AND exchange = ? AND sender = ?",
                (vhost, exchange, sender),
            )
