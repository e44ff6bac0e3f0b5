"""The durable store: one SQLite database in WAL mode in the data dir, written by group commit.

Durability: `journal_mode=WAL` with `synchronous=FULL`. SQLite then fsyncs the WAL before a
transaction's COMMIT returns, so a ticket returned by `commit()` survives a SIGKILL of the node
and also an OS crash or power loss (on a disk that honours fsync). `synchronous=NORMAL` would
already survive SIGKILL (the WAL sits in the kernel's page cache) but may roll back the last
commits on power loss, and a publisher confirm promises more than that. The price is one fsync
per batch, shared by every write that arrived while the previous batch was being committed.

Checkpoints: SQLite's automatic checkpoint (every ~1000 WAL pages) runs at the end of a commit, on
the committer's worker thread, never on the event loop. No other connection ever reads the
database (the data dir is locked), so every checkpoint completes and the WAL restarts from its
beginning; `journal_size_limit` then trims a WAL that a burst of large messages grew.
"""

from __future__ import annotations

import os
import sqlite3
from itertools import chain
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import trio

from gateway.broker.records import BindingRecord, ExchangeRecord, MessageRecord, QueueRecord, Snapshot
from gateway.wire.content import Content

from .errors import StoreError
from .opening import DB_FILE, connect, lock_data_dir
from .tables import canonical, dump_table, load_table

# (message_id, vhost, queue): the primary key of queue_messages, message first so that the
# "is this message still referenced?" probe is a key-prefix lookup without a second index.
_Key = tuple[int, str, str]
_MessageRow = tuple[int, str, str, bytes, bytes, float]


class _RowsStatement:
    """One statement applied to many rows, a chunk of rows per execution.

    `executemany` steps once per row, and every step releases and re-takes the GIL; on the
    worker thread each re-take waits for the busy event loop to let go, so a commit of a
    thousand rows spent most of its time waiting. Here a chunk of up to CHUNK rows is one step ("VALUES (?, ?), (?, ?)
    ..."). The last chunk is padded to a power of two by repeating its last row (a no-op for
    every statement below), so only a handful of distinct statements are ever prepared.
    """

    #: 6 columns x 128 rows stays under the 999 variables older SQLite builds allow.
    CHUNK = 128

    def __init__(self, template: str, width: int) -> None:
        row = "(" + ", ".join("?" * width) + ")"
        self._sql: dict[int, str] = {}
        size = 1
        while size <= self.CHUNK:
            self._sql[size] = template.format(rows=", ".join([row] * size))
            size *= 2

    def run(self, db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
        for start in range(0, len(rows), self.CHUNK):
            chunk = rows[start : start + self.CHUNK]
            size = 1 << (len(chunk) - 1).bit_length()
            chunk += [chunk[-1]] * (size - len(chunk))
            db.execute(self._sql[size], list(chain.from_iterable(chunk)))


_INSERT_MESSAGES = _RowsStatement("INSERT OR IGNORE INTO messages VALUES {rows}", 6)
_INSERT_ENTRIES = _RowsStatement("INSERT OR REPLACE INTO queue_messages VALUES {rows}", 5)
_DELETE_ENTRIES = _RowsStatement(
    "DELETE FROM queue_messages WHERE (message_id, vhost, queue) IN (VALUES {rows})", 3
)
_MARK_DELIVERED = _RowsStatement(
    "UPDATE queue_messages SET delivered = 1 WHERE (message_id, vhost, queue) IN (VALUES {rows})", 3
)
_DELETE_UNREFERENCED = _RowsStatement(
    "DELETE FROM messages WHERE id IN (VALUES {rows})"
    " AND NOT EXISTS (SELECT 1 FROM queue_messages WHERE message_id = messages.id)",
    1,
)
# Run before the queue's entries go: drops the messages that only this queue references.
_DELETE_QUEUE_ONLY_MESSAGES = (
    "DELETE FROM messages WHERE id IN"
    " (SELECT message_id FROM queue_messages WHERE vhost = ?1 AND queue = ?2)"
    " AND NOT EXISTS (SELECT 1 FROM queue_messages AS other WHERE other.message_id = messages.id"
    " AND (other.vhost != ?1 OR other.queue != ?2))"
)
_LOAD_MESSAGES = (
    "SELECT e.vhost, e.queue, e.message_id, e.delivered, m.exchange, m.routing_key, m.header,"
    " m.body, m.routed_at FROM queue_messages AS e JOIN messages AS m ON m.id = e.message_id ORDER BY e.seq"
)


class _Batch:
    """Writes buffered since the last commit began.

    Messages are kept apart from the (rare, ordered) topology statements so that a message
    added and then removed before its commit cancels out in memory and never reaches the disk.
    """

    __slots__ = ("contents", "delivered", "enqueued", "ops", "removed")

    def __init__(self) -> None:
        self.ops: list[tuple[str, tuple[Any, ...]]] = []
        self.contents: dict[int, _MessageRow] = {}
        self.enqueued: dict[_Key, int] = {}  # -> seq (enqueue order)
        self.delivered: set[_Key] = set()
        self.removed: set[_Key] = set()

    def writes(self) -> bool:
        return bool(self.ops or self.enqueued or self.delivered or self.removed)

    def forget_queue(self, vhost: str, queue: str) -> None:
        """Drop buffered message writes for a queue being deleted (its deletion covers them)."""

        def other(key: _Key) -> bool:
            return key[1] != vhost or key[2] != queue

        self.enqueued = {key: seq for key, seq in self.enqueued.items() if other(key)}
        self.delivered = {key for key in self.delivered if other(key)}
        self.removed = {key for key in self.removed if other(key)}


class Store:
    """Durable vhosts, exchanges, queues, bindings and persistent messages of one node.

    The broker model buffers writes with the synchronous methods (no SQL runs on its thread);
    one committer task calls `await commit()` in a loop. Use `Store.open`, not the constructor.
    """

    def __init__(self, data_dir: Path, lock_fd: int, db: sqlite3.Connection, seq: int) -> None:
        self.data_dir = data_dir
        self.path = data_dir / DB_FILE
        self._lock_fd = lock_fd
        self._db = db
        self._seq = seq
        self._batch = _Batch()
        self._ticket = 1
        self._committing = trio.Lock()
        self._failure: str | None = None
        self._closed = False

    @classmethod
    def open(cls, data_dir: Path) -> Store:
        """Create the data dir if needed, lock it for this process, open or create the database."""
        data_dir = Path(data_dir)
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create data dir {data_dir}: {exc}") from exc
        lock_fd = lock_data_dir(data_dir)
        try:
            db, seq = connect(data_dir / DB_FILE)
        except BaseException:
            os.close(lock_fd)
            raise
        return cls(data_dir, lock_fd, db, seq)

    def close(self) -> None:
        """Close the database and release the data dir. Writes not yet committed are dropped."""
        if self._closed:
            return
        self._closed = True
        try:
            self._db.close()
        finally:
            os.close(self._lock_fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- buffered writes (synchronous, on the broker's thread) ---------------------------------

    def put_vhost(self, name: str) -> None:
        self._batch.ops.append(("INSERT OR IGNORE INTO vhosts VALUES (?)", (name,)))

    def put_exchange(
        self,
        vhost: str,
        name: str,
        type: str,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any],
    ) -> None:
        row = (vhost, name, type, auto_delete, internal, dump_table(arguments))
        self._batch.ops.append(("INSERT OR REPLACE INTO exchanges VALUES (?, ?, ?, ?, ?, ?)", row))

    def delete_exchange(self, vhost: str, name: str) -> None:
        """Delete an exchange and the bindings it is the source or destination of."""
        self._batch.ops += [
            ("DELETE FROM exchanges WHERE vhost = ? AND name = ?", (vhost, name)),
            (
                (
                    "DELETE FROM bindings WHERE vhost = ?1 AND"
                    " (source = ?2 OR (destination_kind = 'exchange' AND destination = ?2))"
                ),
                (vhost, name),
            ),
        ]

    def put_queue(self, vhost: str, name: str, auto_delete: bool, arguments: dict[str, Any]) -> None:
        row = (vhost, name, auto_delete, dump_table(arguments))
        self._batch.ops.append(("INSERT OR REPLACE INTO queues VALUES (?, ?, ?, ?)", row))

    def delete_queue(self, vhost: str, name: str) -> None:
        """Delete a queue with its messages and the bindings to it."""
        self._batch.forget_queue(vhost, name)
        key = (vhost, name)
        self._batch.ops += [
            (_DELETE_QUEUE_ONLY_MESSAGES, key),
            ("DELETE FROM queue_messages WHERE vhost = ? AND queue = ?", key),
            ("DELETE FROM queues WHERE vhost = ? AND name = ?", key),
            (
                ("DELETE FROM bindings WHERE vhost = ? AND destination_kind = 'queue' AND destination = ?"),
                key,
            ),
        ]

    def put_binding(
        self,
        vhost: str,
        source: str,
        destination_kind: str,
        destination: str,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> None:
        row = _binding_row(vhost, source, destination_kind, destination, routing_key, arguments)
        self._batch.ops.append(("INSERT OR IGNORE INTO bindings VALUES (?, ?, ?, ?, ?, ?)", row))

    def delete_binding(
        self,
        vhost: str,
        source: str,
        destination_kind: str,
        destination: str,
        routing_key: str,
        arguments: dict[str, Any],
    ) -> None:
        row = _binding_row(vhost, source, destination_kind, destination, routing_key, arguments)
        self._batch.ops.append(
            (
                (
                    "DELETE FROM bindings WHERE vhost = ? AND source = ? AND destination_kind = ?"
                    " AND destination = ? AND routing_key = ? AND arguments = ?"
                ),
                row,
            )
        )

    def add_message(
        self,
        vhost: str,
        queue: str,
        message_id: int,
        exchange: str,
        routing_key: str,
        content: Content,
        routed_at: float,
    ) -> None:
        """Enqueue a message; the same message_id on several queues stores its content once.

        `routed_at` (clock time) is when it was routed to its queues: expiry deadlines count
        from it, across restarts."""
        batch = self._batch
        if message_id not in batch.contents:
            batch.contents[message_id] = (
                message_id,
                exchange,
                routing_key,
                content.header,
                content.body,
                routed_at,
            )
        self._seq += 1
        batch.enqueued[(message_id, vhost, queue)] = self._seq

    def remove_message(self, vhost: str, queue: str, message_id: int) -> None:
        """Dequeue a message (acked, expired, dropped); its content goes with its last queue."""
        key = (message_id, vhost, queue)
        batch = self._batch
        if batch.enqueued.pop(key, None) is None:
            batch.removed.add(key)
        batch.delivered.discard(key)

    def mark_delivered(self, vhost: str, queue: str, message_id: int) -> None:
        """Record a delivery, so that after a restart the message comes back redelivered."""
        self._batch.delivered.add((message_id, vhost, queue))

    # -- group commit ------------------------------------------------------------------------

    def ticket(self) -> int:
        """The number of the batch the writes made now belong to (what `commit` will return)."""
        return self._ticket

    @property
    def pending(self) -> bool:
        """Whether anything was buffered since the current batch began."""
        batch = self._batch
        return batch.writes() or bool(batch.contents)

    async def commit(self) -> int:
        """Make the current batch durable and return its ticket (every earlier one is durable too).

        The buffer is swapped first, so writes made while this runs go to the next ticket. A
        batch whose writes all cancelled out completes without touching the disk. A failed
        write is fatal for the store: later commits raise too, because the lost batch cannot be
        confirmed and nothing after it may be.
        """
        async with self._committing:
            if self._failure is not None:
                raise StoreError(self._failure)
            batch, self._batch = self._batch, _Batch()
            ticket = self._ticket
            self._ticket += 1
            if batch.writes():
                try:
                    await trio.to_thread.run_sync(self._write, batch)
                except Exception as exc:
                    self._failure = (
                        f"writing to the store {self.path} failed, so nothing after ticket"
                        f" {ticket - 1} is durable: {exc}"
                    )
                    raise StoreError(self._failure) from exc
            return ticket

    def _write(self, batch: _Batch) -> None:
        """Apply a batch in one transaction (worker thread).

        Topology first (a queue deletion has already dropped the buffered messages before it),
        then removals, then additions (so a removed entry may be re-added), then delivered flags.
        """
        db = self._db
        db.execute("BEGIN")
        try:
            for sql, params in batch.ops:
                db.execute(sql, params)
            removed = batch.removed
            if removed:
                _DELETE_ENTRIES.run(db, list(removed))
                _DELETE_UNREFERENCED.run(db, [(i,) for i in {key[0] for key in removed}])
            enqueued = batch.enqueued
            delivered = batch.delivered
            if enqueued:
                live = {key[0] for key in enqueued}
                _INSERT_MESSAGES.run(db, [row for i, row in batch.contents.items() if i in live])
                _INSERT_ENTRIES.run(db, [(*key, seq, key in delivered) for key, seq in enqueued.items()])
                delivered = delivered.difference(enqueued)
            if delivered:
                _MARK_DELIVERED.run(db, list(delivered))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.rollback()
            raise

    # -- start-up ----------------------------------------------------------------------------

    def load(self) -> Snapshot:
        """Read all durable state (once, at start, before serving)."""
        try:
            return self._load()
        except (sqlite3.Error, ValueError) as exc:
            raise StoreError(f"cannot read the store {self.path}: {exc}") from exc

    def _load(self) -> Snapshot:
        db = self._db
        vhosts = [name for (name,) in db.execute("SELECT name FROM vhosts")]
        exchanges = [
            ExchangeRecord(vhost, name, kind, bool(auto_delete), bool(internal), load_table(args))
            for vhost, name, kind, auto_delete, internal, args in db.execute(
                "SELECT vhost, name, type, auto_delete, internal, arguments FROM exchanges"
            )
        ]
        queues = [
            QueueRecord(vhost, name, bool(auto_delete), load_table(args))
            for vhost, name, auto_delete, args in db.execute(
                "SELECT vhost, name, auto_delete, arguments FROM queues"
            )
        ]
        bindings = [
            BindingRecord(vhost, source, kind, destination, key, load_table(args))
            for vhost, source, kind, destination, key, args in db.execute(
                "SELECT vhost, source, destination_kind, destination, routing_key, arguments FROM bindings"
            )
        ]
        shared: dict[int, Content] = {}
        messages: dict[tuple[str, str], list[MessageRecord]] = {}
        rows = db.execute(_LOAD_MESSAGES)
        for vhost, queue, message_id, delivered, exchange, key, header, body, routed_at in rows:
            content = shared.get(message_id)
            if content is None:
                content = shared[message_id] = Content(header, body)
            record = MessageRecord(message_id, exchange, key, content, bool(delivered), routed_at)
            messages.setdefault((vhost, queue), []).append(record)
        (last_id,) = db.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()
        return Snapshot(vhosts, exchanges, queues, bindings, messages, last_id + 1)


def _binding_row(
    vhost: str,
    source: str,
    destination_kind: str,
    destination: str,
    routing_key: str,
    arguments: dict[str, Any],
) -> tuple[str, str, str, str, str, bytes]:
    if destination_kind not in ("queue", "exchange"):
        raise ValueError(f"destination_kind must be 'queue' or 'exchange', not {destination_kind!r}")
    args = dump_table(canonical(arguments))
    return (vhost, source, destination_kind, destination, routing_key, args)
