"""gateway.store against real SQLite files: records, group commit, message bookkeeping, errors."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from pamqp import commands
from trio.testing import wait_all_tasks_blocked

from gateway.broker.records import BindingRecord, ExchangeRecord, QueueRecord
from gateway.store import DB_FILE, SCHEMA_VERSION, Store, StoreError, StoreLocked, WriteFailed
from gateway.wire.content import Content

from .test_store_tables import NASTY, assert_identical

PERSISTENT = commands.Basic.Properties(
    delivery_mode=2, headers={"nested": {"list": [1, "two"]}}, message_id="m"
)


def content(n: int) -> Content:
    return Content.from_properties(PERSISTENT, b"body-%d" % n)


def add(store: Store, message_id: int, *queues: str) -> None:
    for queue in queues or ("q",):
        store.add_message("/", queue, message_id, "amq.direct", f"key.{message_id}", content(message_id), 1.0)


def rows(store: Store, sql: str) -> list[tuple[Any, ...]]:
    """What is on disk, through a connection of our own."""
    with sqlite3.connect(store.path) as probe:
        return probe.execute(sql).fetchall()


def queued_ids(store: Store, vhost: str = "/", queue: str = "q") -> list[int]:
    return [r.message_id for r in store.load().messages.get((vhost, queue), [])]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "data") as opened:
        yield opened


def reopen(store: Store) -> Store:
    store.close()
    return Store.open(store.data_dir)


async def test_fresh_store_is_empty_and_versioned(store: Store) -> None:
    snapshot = store.load()
    assert (snapshot.vhosts, snapshot.exchanges, snapshot.queues, snapshot.bindings) == (
        [],
        [],
        [],
        [],
    )
    assert snapshot.messages == {} and snapshot.next_message_id == 1
    assert rows(store, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert rows(store, "PRAGMA journal_mode") == [("wal",)]
    assert not store.pending


async def test_topology_round_trips_with_nasty_field_tables(store: Store) -> None:
    store.put_vhost("/")
    store.put_vhost("ünï")
    store.put_exchange("/", "ex", "topic", True, False, NASTY)
    store.put_exchange("ünï", "int", "headers", False, True, {})
    store.put_queue("/", "q", False, NASTY)
    store.put_queue("ünï", "q2", True, {"x-max-length": 10})
    store.put_binding("/", "ex", "queue", "q", "a.#", NASTY)
    store.put_binding("/", "ex", "exchange", "int", "", {"x-match": "any"})
    await store.commit()
    store = reopen(store)
    try:
        snapshot = store.load()
        assert sorted(snapshot.vhosts) == ["/", "ünï"]
        exchanges = {(e.vhost, e.name): e for e in snapshot.exchanges}
        assert exchanges[("ünï", "int")] == ExchangeRecord("ünï", "int", "headers", False, True, {})
        assert (exchanges[("/", "ex")].type, exchanges[("/", "ex")].auto_delete) == ("topic", True)
        assert_identical(exchanges[("/", "ex")].arguments, NASTY)
        queues = {q.name: q for q in snapshot.queues}
        assert queues["q2"] == QueueRecord("ünï", "q2", True, {"x-max-length": 10})
        assert_identical(queues["q"].arguments, NASTY)
        bindings = {b.destination_kind: b for b in snapshot.bindings}
        assert bindings["exchange"] == BindingRecord("/", "ex", "exchange", "int", "", {"x-match": "any"})
        assert bindings["queue"].routing_key == "a.#"
        assert bindings["queue"].arguments == NASTY
    finally:
        store.close()


async def test_redeclare_replaces_and_deletes_remove(store: Store) -> None:
    store.put_exchange("/", "ex", "direct", False, False, {"v": 1})
    store.put_exchange("/", "ex", "direct", False, False, {"v": 2})
    store.put_queue("/", "q", False, {})
    store.put_queue("/", "gone", False, {})
    await store.commit()
    store.delete_queue("/", "gone")
    await store.commit()
    snapshot = store.load()
    assert [e.arguments for e in snapshot.exchanges] == [{"v": 2}]
    assert [q.name for q in snapshot.queues] == ["q"]
    store.delete_exchange("/", "ex")
    await store.commit()
    assert store.load().exchanges == []


async def test_binding_identity_ignores_argument_key_order(store: Store) -> None:
    store.put_binding("/", "amq.headers", "queue", "q", "", {"x-match": "all", "a": 1, "b": 2})
    store.put_binding("/", "amq.headers", "queue", "q", "", {"b": 2, "a": 1, "x-match": "all"})
    store.put_binding("/", "amq.headers", "queue", "q", "", {"x-match": "any"})
    await store.commit()
    assert len(store.load().bindings) == 2
    store.delete_binding("/", "amq.headers", "queue", "q", "", {"a": 1, "b": 2, "x-match": "all"})
    await store.commit()
    assert [b.arguments for b in store.load().bindings] == [{"x-match": "any"}]


async def test_deleting_an_exchange_drops_its_bindings_both_ways(store: Store) -> None:
    store.put_binding("/", "ex", "queue", "q", "k", {})
    store.put_binding("/", "up", "exchange", "ex", "k", {})
    store.put_binding("/", "up", "queue", "q", "k", {})
    await store.commit()
    store.delete_exchange("/", "ex")
    await store.commit()
    assert [(b.source, b.destination) for b in store.load().bindings] == [("up", "q")]


async def test_deleting_a_queue_drops_its_messages_and_bindings(store: Store) -> None:
    store.put_queue("/", "q", False, {})
    store.put_queue("/", "other", False, {})
    store.put_binding("/", "amq.direct", "queue", "q", "k", {})
    store.put_binding("/", "amq.direct", "queue", "other", "k", {})
    add(store, 1, "q")
    add(store, 2, "q", "other")
    await store.commit()
    add(store, 3, "q")  # still buffered when the queue goes
    store.mark_delivered("/", "q", 1)
    store.delete_queue("/", "q")
    store.put_queue("/", "q", False, {})  # redeclared in the same batch, empty
    add(store, 4, "q")
    await store.commit()
    snapshot = store.load()
    assert {key: [r.message_id for r in records] for key, records in snapshot.messages.items()} == {
        ("/", "other"): [2],
        ("/", "q"): [4],
    }
    assert [b.destination for b in snapshot.bindings] == ["other"]
    assert sorted(r[0] for r in rows(store, "SELECT id FROM messages")) == [2, 4]


async def test_messages_round_trip_in_enqueue_order(store: Store) -> None:
    store.put_queue("/", "q", False, {})
    for n in (5, 3, 9):
        add(store, n)
    ticket = await store.commit()
    assert ticket == 1 and store.ticket() == 2
    store = reopen(store)
    try:
        add(store, 1)  # enqueued after the others although its id is lower
        await store.commit()
        snapshot = store.load()
        records = snapshot.messages[("/", "q")]
        assert [r.message_id for r in records] == [5, 3, 9, 1]
        first = records[0]
        assert (first.exchange, first.routing_key, first.redelivered) == (
            "amq.direct",
            "key.5",
            False,
        )
        assert first.content.header == content(5).header and first.content.body == b"body-5"
        assert first.content.persistent and first.content.headers == {"nested": {"list": [1, "two"]}}
        assert snapshot.next_message_id == 10
    finally:
        store.close()


async def test_redelivered_after_mark_delivered(store: Store) -> None:
    for n in (1, 2, 3):
        add(store, n)
    await store.commit()
    store.mark_delivered("/", "q", 1)
    await store.commit()
    assert [(r.message_id, r.redelivered) for r in store.load().messages[("/", "q")]] == [
        (1, True),
        (2, False),
        (3, False),
    ]
    add(store, 4)
    store.mark_delivered("/", "q", 2)
    store.mark_delivered("/", "q", 4)  # delivered before its first commit
    store.remove_message("/", "q", 4)  # and acked: the mark written is 2's
    await store.commit()
    store = reopen(store)
    try:
        records = store.load().messages[("/", "q")]
        assert [(r.message_id, r.redelivered) for r in records] == [(1, True), (2, True), (3, False)]
    finally:
        store.close()


async def test_a_queue_handing_out_a_later_message_first_flags_the_earlier_ones_too(store: Store) -> None:
    """One mark per queue: entries under it come back redelivered, delivered or not (a
    priority queue or a no-local consumer may skip one); never one that was delivered unflagged."""
    for n in (1, 2, 3):
        add(store, n)
    store.mark_delivered("/", "q", 2)
    await store.commit()
    records = store.load().messages[("/", "q")]
    assert [(r.message_id, r.redelivered) for r in records] == [(1, True), (2, True), (3, False)]


async def test_delivered_and_acked_in_one_batch_writes_no_mark(store: Store) -> None:
    add(store, 1)
    await store.commit()
    add(store, 2)
    store.mark_delivered("/", "q", 2)
    store.remove_message("/", "q", 2)
    await store.commit()
    assert rows(store, "SELECT count(*) FROM delivered_marks") == [(0,)]
    assert [r.redelivered for r in store.load().messages[("/", "q")]] == [False]


async def test_add_and_remove_in_one_batch_never_reach_the_disk(store: Store) -> None:
    store.put_queue("/", "q", False, {})
    await store.commit()
    wal = store.path.with_name(DB_FILE + "-wal")
    with sqlite3.connect(store.path) as probe:
        version = probe.execute("PRAGMA data_version").fetchone()
        size = wal.stat().st_size
        for n in range(100):
            add(store, n, "q", "q2")
            store.mark_delivered("/", "q", n)
            store.remove_message("/", "q", n)
            store.remove_message("/", "q2", n)
        assert store.pending
        ticket = await store.commit()
        assert ticket == 2 and not store.pending
        assert probe.execute("PRAGMA data_version").fetchone() == version
        assert wal.stat().st_size == size
    assert rows(store, "SELECT count(*) FROM messages") == [(0,)]


async def test_shared_content_is_stored_once_and_deleted_with_its_last_queue(store: Store) -> None:
    add(store, 7, "q1", "q2", "q3")
    await store.commit()
    assert rows(store, "SELECT count(*) FROM messages") == [(1,)]
    assert rows(store, "SELECT count(*) FROM queue_messages") == [(3,)]
    store.remove_message("/", "q1", 7)
    await store.commit()
    store.delete_queue("/", "q2")
    await store.commit()
    assert rows(store, "SELECT id FROM messages") == [(7,)]
    assert queued_ids(store, "/", "q3") == [7]
    store.remove_message("/", "q3", 7)
    await store.commit()
    assert rows(store, "SELECT count(*) FROM messages") == [(0,)]
    assert rows(store, "SELECT count(*) FROM queue_messages") == [(0,)]


async def test_large_batches_span_several_multi_row_statements(store: Store) -> None:
    """Rows go to SQLite a chunk per statement, the last chunk padded by repeating its last
    row: counts around and across chunk sizes must come out exact."""
    add(store, 1, "q", "q2")  # shared content, removed from one of its queues below
    for n in range(2, 301):
        add(store, n)
    for n in range(1, 150):
        store.mark_delivered("/", "q", n)  # before the entries' first commit
    await store.commit()
    for n in range(2, 131):
        store.remove_message("/", "q", n)
    store.remove_message("/", "q2", 1)
    for n in range(131, 280):
        store.mark_delivered("/", "q", n)  # an update of committed rows
    await store.commit(settle_all=True)  # all 130 removals, not one SETTLE_CHUNK of them
    records = store.load().messages
    assert [(r.message_id, r.redelivered) for r in records[("/", "q")]] == [(1, True)] + [
        (n, n < 280) for n in range(131, 301)
    ]
    assert ("/", "q2") not in records
    assert rows(store, "SELECT count(*) FROM messages") == [(171,)]


async def test_remove_then_readd_in_one_batch_keeps_the_message(store: Store) -> None:
    add(store, 1)
    await store.commit()
    store.remove_message("/", "q", 1)
    add(store, 1)
    await store.commit()
    assert queued_ids(store) == [1]
    assert rows(store, "SELECT count(*) FROM messages") == [(1,)]


async def test_writes_during_a_commit_land_in_the_next_ticket(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    write = store._write

    def held_write(*args: Any) -> None:
        assert gate.wait(10), "test gate never opened"
        write(*args)

    monkeypatch.setattr(store, "_write", held_write)
    add(store, 1)
    assert store.ticket() == 1
    tickets: list[int] = []

    async def commit() -> None:
        tickets.append(await store.commit())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(commit)
        await wait_all_tasks_blocked()  # the commit is now inside its worker thread
        assert not store.pending
        add(store, 2)
        assert store.ticket() == 2 and store.pending
        assert rows(store, "SELECT count(*) FROM messages") == [(0,)]
        gate.set()
    assert tickets == [1]
    assert queued_ids(store) == [1]
    assert await store.commit() == 2
    assert queued_ids(store) == [1, 2]


async def test_commits_never_overlap(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    write = store._write
    running: list[int] = []
    overlaps: list[int] = []

    def tracked_write(*args: Any) -> None:
        running.append(1)
        overlaps.append(len(running))
        write(*args)
        running.pop()

    monkeypatch.setattr(store, "_write", tracked_write)
    tickets: list[int] = []

    async def commit(n: int) -> None:
        add(store, n)
        tickets.append(await store.commit())

    async with trio.open_nursery() as nursery:
        for n in range(20):
            nursery.start_soon(commit, n)
    assert max(overlaps) == 1
    assert sorted(tickets) == tickets[:] and max(tickets) == store.ticket() - 1
    assert sorted(queued_ids(store)) == list(range(20))


async def test_a_failed_write_gives_up_its_messages_and_retries_the_rest(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put_queue("/", "q", False, {})
    add(store, 1)
    add(store, 2)
    assert await store.commit() == 1

    def full_disk(*args: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store, "_write", full_disk)
    store.put_queue("/", "q2", False, {})
    store.remove_message("/", "q", 1)  # an ack of a stored message
    store.mark_delivered("/", "q", 2)
    add(store, 3)  # a new message: its publisher will be nacked
    store.mark_delivered("/", "q", 3)
    with pytest.raises(WriteFailed, match="ticket 2 is not durable: database or disk is full") as info:
        await store.commit()
    assert info.value.ticket == 2 and store.pending
    monkeypatch.undo()
    add(store, 4, "q2")  # depends on the failed batch's declaration of q2
    assert await store.commit() == 3
    snapshot = store.load()
    assert [q.name for q in snapshot.queues] == ["q", "q2"]
    assert [(r.message_id, r.redelivered) for r in snapshot.messages[("/", "q")]] == [(2, True)]
    assert [r.message_id for r in snapshot.messages[("/", "q2")]] == [4]
    assert rows(store, "SELECT id FROM messages ORDER BY id") == [(2,), (4,)]


async def test_writes_retried_after_a_failure_keep_their_order(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_write(*args: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store, "_write", broken_write)
    store.put_queue("/", "q", False, {})
    add(store, 1)
    with pytest.raises(WriteFailed):
        await store.commit()
    store.delete_queue("/", "q")  # after the failed declaration: must run after it
    store.remove_message("/", "q", 1)  # the given-up message: nothing to delete
    with pytest.raises(WriteFailed) as info:
        await store.commit()
    assert info.value.ticket == 2
    monkeypatch.undo()
    assert await store.commit() == 3
    assert store.load().queues == [] and rows(store, "SELECT * FROM messages") == []
    assert not store.pending


async def test_commit_with_nothing_buffered_returns_a_ticket(store: Store) -> None:
    assert await store.commit() == 1
    assert await store.commit() == 2


def test_second_open_in_the_same_process_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with Store.open(data_dir):
        with pytest.raises(StoreLocked) as info:
            Store.open(data_dir)
        message = str(info.value)
        assert str(data_dir) in message
        assert (data_dir / "LOCK").read_text().strip() in message
    with Store.open(data_dir):
        pass


def test_bad_destination_kind_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="destination_kind"):
        store.put_binding("/", "ex", "topic", "q", "", {})


def test_newer_schema_version_is_a_clear_error(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        path = store.path
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer than this amq-gateway supports") as info:
        Store.open(tmp_path)
    assert str(path) in str(info.value)
    Store.open(tmp_path / "other").close()  # the lock of the failed open was released
    with pytest.raises(StoreError, match="newer"):
        Store.open(tmp_path)


async def test_routed_at_round_trips(store: Store) -> None:
    store.add_message("/", "q", 1, "", "q", content(1), 1_700_000_000.25)
    await store.commit()
    [record] = store.load().messages[("/", "q")]
    assert record.routed_at == 1_700_000_000.25


def downgrade(path: Path, version: int) -> None:
    """Make a store look like one written by schema `version`."""
    with sqlite3.connect(path) as raw:
        # Schema 4 and older: no accounts.
        raw.execute("DROP TABLE accounts")
        if version <= 3:  # a delivered flag per entry, no marks
            raw.execute("DROP TABLE delivered_marks")
            raw.execute("ALTER TABLE queue_messages ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0")
        if version <= 2:  # no index by queue
            raw.execute("DROP INDEX queue_messages_by_queue")
        if version <= 1:  # no routed_at
            raw.execute("ALTER TABLE messages DROP COLUMN routed_at")
        raw.execute(f"PRAGMA user_version = {version}")


async def test_schema_1_store_is_upgraded_in_place(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        add(store, 1)
        await store.commit()
        path = store.path
    downgrade(path, 1)
    with Store.open(tmp_path) as store:
        assert rows(store, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
        [old] = store.load().messages[("/", "q")]
        assert (old.message_id, old.content.body, old.routed_at) == (1, b"body-1", None)
        store.add_message("/", "q", 2, "", "q", content(2), 5.0)
        await store.commit()
        assert [r.routed_at for r in store.load().messages[("/", "q")]] == [None, 5.0]


async def test_schema_2_store_gets_the_queue_index(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        add(store, 1)
        await store.commit()
        path = store.path
    downgrade(path, 2)
    with Store.open(tmp_path) as store:
        assert rows(store, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
        index = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'queue_messages'"
        assert ("queue_messages_by_queue",) in rows(store, index)
        assert queued_ids(store) == [1]


async def test_schema_3_delivered_flags_become_each_queues_mark(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        for n in (1, 2, 3):
            add(store, n, "q", "other")
        await store.commit()
        path = store.path
    downgrade(path, 3)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE queue_messages SET delivered = 1 WHERE queue = 'q' AND message_id = 2")
    with Store.open(tmp_path) as store:
        assert rows(store, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
        columns = [row[1] for row in rows(store, "PRAGMA table_info(queue_messages)")]
        assert "delivered" not in columns
        messages = store.load().messages
        assert [(r.message_id, r.redelivered) for r in messages[("/", "q")]] == [
            (1, True),
            (2, True),
            (3, False),
        ]
        assert [r.redelivered for r in messages[("/", "other")]] == [False] * 3


async def test_schema_4_store_gets_accounts_which_round_trip(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        add(store, 1)
        await store.commit()
        path = store.path
    downgrade(path, 4)
    with Store.open(tmp_path) as store:
        assert rows(store, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
        assert store.load_accounts() == {}
        store.put_account("alice", '{"deleted": true}')
        store.put_vhost("prod")
        await store.commit()
        store.delete_vhost("prod")
        await store.commit()
        assert queued_ids(store) == [1]
    with Store.open(tmp_path) as store:
        assert store.load_accounts() == {"alice": '{"deleted": true}'}
        assert store.load().vhosts == []


def test_garbage_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / DB_FILE
    path.write_bytes(b"this is not a database, just some bytes" * 200)
    with pytest.raises(StoreError) as info:
        Store.open(tmp_path)
    assert str(path) in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / DB_FILE) as raw:
        raw.execute("CREATE TABLE mine (x)")
    with pytest.raises(StoreError, match="not an amq-gateway store"):
        Store.open(tmp_path)


async def test_corrupted_pages_are_a_clear_error(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        for n in range(300):
            store.add_message("/", "q", n, "", "q", Content(content(n).header, bytes(2000)), 1.0)
        await store.commit()
        path = store.path
    # Closing checkpointed everything into the main file; scribble over its middle pages.
    data = bytearray(path.read_bytes())
    data[8192 : len(data) - 8192] = b"\xa5" * (len(data) - 16384)
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError) as info, Store.open(tmp_path) as damaged:
        damaged.load()
    assert str(path) in str(info.value)


async def test_consumed_messages_leave_reusable_space_that_the_store_reports(store: Store) -> None:
    """The disk alarm counts it as free: the file never shrinks, SQLite fills these pages first."""
    store.put_queue("/", "q", False, {})
    for n in range(1, 11):
        store.add_message("/", "q", n, "", "q", Content(b"\x00\x00", b"x" * 32768), 0.0)
    await store.commit()
    before = store.reusable_bytes
    for n in range(1, 11):
        store.remove_message("/", "q", n)
    await store.commit()
    assert store.reusable_bytes - before >= 10 * 32768
