"""federation.db: the bindings a peering made on its parent's queue, which a restarted child
needs to unbind those withdrawn while it was down, and opening a file an older version wrote."""

from __future__ import annotations

import datetime
import decimal
import sqlite3
from pathlib import Path
from typing import Any

from federation.persistence import DB_FILE, BindingTarget, FederationStore

TARGET = BindingTarget("/", "amq.data", "parent", 5672, "/", "federation.child.amq.data")

#: Everything a field table can hold that JSON cannot, or would not give back as it was.
AWKWARD: dict[str, Any] = {
    "x-match": "all",
    "bytes": b"\xff\x00not utf-8",
    "bytearray": bytearray(b"\x01"),
    "decimal": decimal.Decimal("-12.3400"),
    "when": datetime.datetime(2024, 2, 29, 12, 30, 15, 123456, tzinfo=datetime.UTC),
    "double": 0.1,
    "big": 2**70,
    "flag": False,
    "none": None,
    "nested": {"z": [1, "two", {"deep": b"\x00"}], "a": 1.5},
}


def test_bindings_round_trip_with_their_exact_argument_types(tmp_path: Path) -> None:
    store = FederationStore.open(tmp_path)
    store.add_bindings(TARGET, [("a", {}), ("b", AWKWARD)])
    store.close()
    loaded = FederationStore.open(tmp_path).load_bindings(TARGET)
    assert loaded == [("a", {}), ("b", AWKWARD)]
    types = {name: type(value) for name, value in loaded[1][1].items()}
    assert types == {name: type(value) for name, value in AWKWARD.items()}


def test_a_binding_is_removed_whatever_the_order_of_its_arguments() -> None:
    store = FederationStore.open(None)
    store.add_bindings(TARGET, [("k", {"b": 1, "a": {"y": 2, "x": 1}}), ("k", {"c": 3})])
    store.add_bindings(TARGET, [("k", {"a": {"x": 1, "y": 2}, "b": 1})])  # already stored: ignored
    store.remove_binding(TARGET, "k", {"a": {"x": 1, "y": 2}, "b": 1})
    assert store.load_bindings(TARGET) == [("k", {"c": 3})]


def test_bindings_are_kept_per_parent_queue_and_deleted_per_federation() -> None:
    store = FederationStore.open(None)
    other_parent = BindingTarget("/", "amq.data", "elsewhere", 5672, "/", TARGET.queue)
    other_exchange = BindingTarget("/", "amq.service", "parent", 5672, "/", "federation.child.amq.service")
    store.add_bindings(TARGET, [("mine", {})])
    store.add_bindings(other_parent, [("theirs", {})])
    store.add_bindings(other_exchange, [("svc", {})])
    assert store.load_bindings(TARGET) == [("mine", {})]
    store.delete_bindings("/", "amq.data")
    assert (store.load_bindings(TARGET), store.load_bindings(other_parent)) == ([], [])
    assert store.load_bindings(other_exchange) == [("svc", {})]


def test_a_federation_db_written_before_bindings_were_stored_opens_and_keeps_its_records(
    tmp_path: Path,
) -> None:
    old = sqlite3.connect(tmp_path / DB_FILE)
    with old:
        old.executescript(
            """
            CREATE TABLE links (host TEXT NOT NULL, port INTEGER NOT NULL, record TEXT NOT NULL,
                                PRIMARY KEY (host, port));
            CREATE TABLE routes (host TEXT NOT NULL, port INTEGER NOT NULL, identity TEXT NOT NULL,
                                 record TEXT NOT NULL, PRIMARY KEY (host, port, identity));
            CREATE TABLE attachments (vhost TEXT NOT NULL, exchange TEXT NOT NULL, record TEXT NOT NULL,
                                      PRIMARY KEY (vhost, exchange));
            INSERT INTO links VALUES ('parent', 5672, '{"host": "parent"}');
            INSERT INTO attachments VALUES ('/', 'amq.data', '{"exchange": "amq.data"}');
            """
        )
    old.close()
    store = FederationStore.open(tmp_path)
    assert store.load() == ([{"host": "parent"}], [])
    assert store.load_attachments() == [{"exchange": "amq.data"}]
    store.add_bindings(TARGET, [("a", {})])
    assert store.load_bindings(TARGET) == [("a", {})]


def test_adverts_are_kept_per_sender_and_replaced(tmp_path: Path) -> None:
    store = FederationStore.open(tmp_path)
    store.put_adverts("/", "fed.topic", "b", b"first")
    store.put_adverts("/", "fed.topic", "c", b"other")
    store.put_adverts("/", "fed.topic", "b", b"second")
    store.delete_adverts("/", "fed.topic", "c")
    store.close()
    assert FederationStore.open(tmp_path).load_adverts() == [("/", "fed.topic", "b", b"second")]
