"""gateway.store's cost: every statement finds its rows through a key or an index, and one
commit writes a bounded share of a big batch of removals (issue 11, point 3)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.store import Store, database, opening

from .test_store import add, queued_ids, rows

# Start-up reads (names with _LOAD) read whole tables by design: they may scan the small
# topology tables, and read the message tables along an index, never sorting them.
STARTUP = "_LOAD"
#: Tables read whole at start: topology, runtime accounts, and q (queues in _LOAD_LAST_SEQ).
TOPOLOGY_TABLES = {"vhosts", "exchanges", "queues", "bindings", "accounts", "q"}
SQL_VERBS = ("SELECT", "INSERT", "UPDATE", "DELETE", "PRAGMA")


def store_statements() -> dict[str, str]:
    """Every statement the store modules define, by name (each chunk size of a row statement)."""
    found = {}
    for module in (database, opening):
        for name, value in vars(module).items():
            if isinstance(value, str) and value.startswith(SQL_VERBS):
                found[name] = value
            elif isinstance(value, database._RowsStatement):
                found.update({f"{name}[{size}]": sql for size, sql in value._sql.items()})
    return found


def parameters(sql: str) -> list[int]:
    numbered = [int(n) for n in re.findall(r"\?(\d+)", sql)]
    return [1] * (max(numbered) if numbered else sql.count("?"))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "data") as opened:
        yield opened


@pytest.fixture
def filled(tmp_path: Path) -> Iterator[Store]:
    """A store with queues, bindings and a few thousand messages, as a node leaves it."""
    with Store.open(tmp_path / "data") as store:
        for queue in ("a", "b", "c"):
            store.put_queue("/", queue, False, {})
            store.put_binding("/", "amq.direct", "queue", queue, queue, {})
        for n in range(1, 3001):
            add(store, n, "abc"[n % 3], *(("a",) if n % 7 == 0 else ()))
        yield store


async def test_every_statement_finds_its_rows_by_key_or_index(filled: Store) -> None:
    await filled.commit()
    db = sqlite3.connect(filled.path)
    statements = store_statements()
    assert {"_DELETE_ENTRIES[128]", "_PUT_DELIVERED_MARKS[1]", "_LOAD_MESSAGES"} <= set(statements)
    scans = {}
    for name, sql in statements.items():
        plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, parameters(sql))]
        if STARTUP in name:
            bad = [
                step
                for step in plan
                if "TEMP B-TREE" in step
                or (re.fullmatch(r"SCAN (\w+)", step) and step.split()[1] not in TOPOLOGY_TABLES)
            ]
        else:
            bad = [step for step in plan if re.match(r"SCAN \w+( |$)", step) and "CONSTANT ROW" not in step]
        if bad:
            scans[name] = plan
    db.close()
    assert scans == {}


class RecordingConnection:
    """Forwards to the store's connection, recording each SQL text it is given."""

    def __init__(self, db: sqlite3.Connection, seen: set[str]) -> None:
        self._db = db
        self._seen = seen

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self._seen.add(sql)
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


async def test_the_store_runs_no_statement_the_plan_test_does_not_see(filled: Store) -> None:
    """A statement written inline would escape the plan test above."""
    seen: set[str] = set()
    filled._db = RecordingConnection(filled._db, seen)  # type: ignore[assignment]
    store = filled
    store.put_vhost("v")
    store.put_exchange("/", "x", "direct", False, False, {})
    store.put_binding("/", "x", "exchange", "amq.direct", "k", {})
    store.mark_delivered("/", "a", 3)
    await store.commit()
    store.remove_message("/", "a", 3)
    store.delete_binding("/", "x", "exchange", "amq.direct", "k", {})
    store.delete_exchange("/", "x")
    store.delete_queue("/", "b")
    while store.pending:
        await store.commit()
    store.load()
    known = set(store_statements().values())
    assert {sql for sql in seen if sql not in ("BEGIN", "COMMIT")} - known == set()


async def test_a_big_removal_batch_is_written_in_bounded_chunks(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunk = 100
    monkeypatch.setattr(Store, "SETTLE_CHUNK", chunk)
    store.put_queue("/", "q", False, {})
    for n in range(1, 1001):
        add(store, n)
        store.mark_delivered("/", "q", n)
    await store.commit()
    for n in range(1, 1001):  # one ack of 1000 deliveries
        store.remove_message("/", "q", n)
    big = await store.commit()
    add(store, 5000)  # a publish made after it
    small = await store.commit()
    # The publish is durable after one more commit, while most of the acks are not written:
    # each commit wrote one chunk of them.
    assert rows(store, "SELECT count(*) FROM queue_messages WHERE message_id = 5000") == [(1,)]
    assert rows(store, "SELECT count(*) FROM queue_messages") == [(1000 - 2 * chunk + 1,)]
    assert store.settled < big < small
    left = [rows(store, "SELECT count(*) FROM messages")[0][0]]
    while store.pending:
        last = await store.commit()
        left.append(rows(store, "SELECT count(*) FROM messages")[0][0])
    assert left == list(range(1000 - 2 * chunk + 1, 0, -chunk))
    assert store.settled == last
    assert queued_ids(store) == [5000]


async def test_an_entry_enqueued_again_outlives_its_pending_removal(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Store, "SETTLE_CHUNK", 1)
    store.put_queue("/", "q", False, {})
    for n in (1, 2, 3):
        add(store, n)
    await store.commit()
    for n in (1, 2, 3):
        store.remove_message("/", "q", n)
    await store.commit()  # writes the removal of 1; 2 and 3 wait
    add(store, 3)  # 3 comes back (a dead-letter cycle) before its removal was written
    store.mark_delivered("/", "q", 3)
    while store.pending:
        await store.commit()
    [record] = store.load().messages[("/", "q")]
    assert (record.message_id, record.redelivered) == (3, True)


async def test_deleting_a_queue_drops_its_pending_removals(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Store, "SETTLE_CHUNK", 1)
    store.put_queue("/", "q", False, {})
    add(store, 1, "q", "other")
    add(store, 2, "q")
    await store.commit()
    store.remove_message("/", "q", 1)
    store.remove_message("/", "q", 2)
    await store.commit()
    store.delete_queue("/", "q")
    ticket = await store.commit()
    assert not store.pending and store.settled == ticket
    assert [r[0] for r in rows(store, "SELECT id FROM messages")] == [1]


async def test_a_stop_writes_the_whole_backlog_in_one_commit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Store, "SETTLE_CHUNK", 10)
    for n in range(1, 101):
        add(store, n)
    await store.commit()
    for n in range(1, 101):
        store.remove_message("/", "q", n)
    ticket = await store.commit(settle_all=True)
    assert not store.pending and store.settled == ticket
    assert rows(store, "SELECT count(*) FROM messages") == [(0,)]


async def test_deliveries_cost_one_mark_per_queue_and_commit(store: Store) -> None:
    """Taking a backlog unacked (a requeue's first half) writes one row per queue, in the next
    commit, not an update per delivery spread over many commits."""
    for n in range(1, 5001):
        add(store, n, "abc"[n % 3])
    await store.commit()
    for n in range(1, 5001):
        store.mark_delivered("/", "abc"[n % 3], n)
    ticket = await store.commit()
    assert not store.pending and store.settled == ticket
    assert sorted(rows(store, "SELECT queue, message_id FROM delivered_marks")) == [
        ("a", 4998),
        ("b", 4999),
        ("c", 5000),
    ]


async def test_removals_are_written_oldest_ticket_first(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acks of several commits wait in the backlog; each commit writes the oldest ones, and
    `settled` moves past a ticket only when all of its removals are written."""
    monkeypatch.setattr(Store, "SETTLE_CHUNK", 3)
    for n in range(1, 11):
        add(store, n)
    await store.commit()
    for n in (1, 2, 3, 4):
        store.remove_message("/", "q", n)
    first = await store.commit()  # writes 3 of the 4
    assert len(queued_ids(store)) == 7 and store.settled < first
    for n in (5, 6, 7):
        store.remove_message("/", "q", n)
    second = await store.commit()  # writes the 4th, then 2 of the second ticket's 3
    assert store.settled == first
    assert set(queued_ids(store)) - {5, 6, 7} == {8, 9, 10} and len(queued_ids(store)) == 4
    store.remove_message("/", "q", 8)
    third = await store.commit()  # the second ticket's last, then the third's
    assert store.settled == third > second
    assert queued_ids(store) == [9, 10]
    assert not store.pending


async def test_the_backlog_keeps_pace_with_steady_publishing_and_acking(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each commit enqueues 50 messages and removes the 50 of the one before: with a fixed
    chunk of 10 removals the backlog grew by 40 a commit (thousands of acked messages came back
    after a SIGKILL of a federation source); writing as many removals as it enqueues, it stays
    at one batch's worth."""
    monkeypatch.setattr(Store, "SETTLE_CHUNK", 10)
    previous: list[int] = []
    for round_ in range(20):
        batch = list(range(round_ * 50 + 1, round_ * 50 + 51))
        for n in batch:
            add(store, n)
        for n in previous:
            store.remove_message("/", "q", n)
        await store.commit()
        previous = batch
    assert len(queued_ids(store)) <= 2 * 50
