"""The durable store: one SQLite database in WAL mode in the data dir, written by group commit.

Durability: `journal_mode=WAL` with `synchronous=FULL`. SQLite then fsyncs the WAL before a
transaction's COMMIT returns, so a ticket returned by `commit()` survives a SIGKILL of the node
and also an OS crash or power loss (on a disk that honours fsync). `synchronous=NORMAL` would
already survive SIGKILL (the WAL sits in the kernel's page cache) but may roll back the last
commits on power loss, and a publisher confirm promises more than that. The price is one fsync
per batch, shared by every write that arrived while the previous batch was being committed.

Cost: every statement finds its rows through a primary key or the queue index (see the
statements below), so a commit costs in proportion to its own rows. Removals wait in a backlog
of which one commit writes SETTLE_CHUNK, or as many as it enqueues if that is more: nobody
waits for them but Tx.Commit-Ok (through `settled`), so a huge ack never holds a later
publish's confirm for longer than one bounded commit, and under steady publishing and acking
the backlog keeps up (a crash brings back only the acks of the last commits). Topology and
enqueued messages are always written whole, in ticket order.

Deliveries: a queue keeps one mark rather than a flag per entry: each commit raises it to the
highest message id among the entries the queue handed out and still holds (one delivered and
acked within the same batch needs none), so taking 200,000 messages costs one row per queue and
commit instead of 200,000 updates. After a restart an entry at or under its queue's mark comes back redelivered. Message
ids grow in the order messages are routed, so in a plain queue that is exactly the entries that
were delivered; where a queue hands out a later message first (priorities, no-local, a
transaction's publishes) an earlier one also comes back flagged, which the flag allows: it says
a message may have been delivered before, never that it was not.

Checkpoints: copying committed pages from the WAL into the database, and the fsync of the
database after it, run on a connection and a worker thread of their own (`run_checkpoints`),
beside the commits: SQLite's automatic checkpoint runs at the end of the COMMIT that crosses
its threshold, and every publisher waiting for that commit's confirm waited for the copy too
(50 to 270 ms after a large backlog). The committer's automatic checkpoint stays, at a higher
threshold, with only the last pages left to copy: after it the WAL restarts from its beginning
(see opening.WAL_AUTOCHECKPOINT_PAGES), and `journal_size_limit` trims a WAL that a burst of
large messages grew. No other process opens the database (the data dir is locked).

Failed commits (a full disk, an I/O error) are not fatal. SQLite rolls the transaction back,
so nothing of the failed batch is on disk, and `commit` raises `WriteFailed` with its ticket:
the node nacks the publishes of that ticket and keeps serving. What the batch did is then
split in two. Its new messages (`add_message`) are given up: their publishers were nacked, so
nothing may claim them durable later, and they live on in memory only, as if transient (a
restart loses them). Everything else is retried: topology goes in front of the next batch, in
order, because later writes may depend on it (a message enqueued on a queue whose declaration
failed), the backlog chunk (acks) goes back to the front of the backlog and the delivery
marks into the next batch. So
a later ticket never confirms anything without the surviving writes of every failed ticket
before it, and once there is space again the store goes on from where it was.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import chain
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import trio

from gateway.broker.paging import PagedContent
from gateway.broker.records import BindingRecord, ExchangeRecord, MessageRecord, QueueRecord, Snapshot
from gateway.wire.content import Content

from .errors import StoreError, WriteFailed
from .opening import DB_FILE, connect, connect_checkpointer, lock_data_dir
from .tables import canonical, dump_table, load_table

LOGGER = logging.getLogger(__name__)

# (message_id, vhost, queue): the primary key of queue_messages, message first so that the
# "is this message still referenced?" probe is a key-prefix lookup without a second index.
_Key = tuple[int, str, str]
_MessageRow = tuple[int, str, str, bytes, bytes, float]


class _RowsStatement:
    """One statement applied to many rows, a chunk of rows per execution.

    `executemany` steps once per row, and every step releases and re-takes the GIL; on the
    worker thread each re-take waits for the busy event loop to let go, so a commit of a
    thousand rows spent most of its time waiting. Here a chunk of up to CHUNK rows is one step
    ("VALUES (?, ?), (?, ?) ..."). The last chunk is padded to a power of two by repeating its last row (a no-op for
    every statement below), so only a handful of distinct statements are ever prepared.
    """

    #: 6 columns x CHUNK rows stay under SQLite's bound on variables (32766 since 3.32, 999
    #: before): a commit of a few thousand rows is then a handful of steps.
    CHUNK = 4096 if sqlite3.sqlite_version_info >= (3, 32) else 128

    def __init__(self, template: str, width: int) -> None:
        row = "(" + ", ".join("?" * width) + ")"
        self._sql: dict[int, str] = {}
        size = 1
        while size <= self.CHUNK:
            self._sql[size] = template.format(rows=", ".join([row] * size))
            size *= 2

    def run(self, db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
        for _ in self._steps(db, rows):
            pass

    def select(self, db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> list[Any]:
        """The rows a query returns for all of `rows` (a padded row finds nothing new)."""
        return [found for cursor in self._steps(db, rows) for found in cursor.fetchall()]

    def _steps(self, db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> Iterator[sqlite3.Cursor]:
        for start in range(0, len(rows), self.CHUNK):
            chunk = rows[start : start + self.CHUNK]
            size = 1 << (len(chunk) - 1).bit_length()
            chunk += [chunk[-1]] * (size - len(chunk))
            yield db.execute(self._sql[size], list(chain.from_iterable(chunk)))


# Every statement the store runs is one of this module's constants (a test checks each one's
# query plan): each finds its rows through a primary key or an index, never by a table scan.
# "IN (SELECT column1, ... FROM (VALUES ...))" rather than "IN (VALUES ...)": SQLite looks the
# first form up by primary key but scans the table for the second.
_INSERT_MESSAGES = _RowsStatement("INSERT OR IGNORE INTO messages VALUES {rows}", 6)
_INSERT_ENTRIES = _RowsStatement("INSERT OR REPLACE INTO queue_messages VALUES {rows}", 4)
_DELETE_ENTRIES = _RowsStatement(
    "DELETE FROM queue_messages WHERE (message_id, vhost, queue) IN"
    " (SELECT column1, column2, column3 FROM (VALUES {rows}))",
    3,
)
_PUT_DELIVERED_MARKS = _RowsStatement(
    "INSERT INTO delivered_marks VALUES {rows} ON CONFLICT (vhost, queue)"
    " DO UPDATE SET message_id = max(message_id, excluded.message_id)",
    3,
)
#: Bodies paged back in (gateway.broker.paging), by primary key, on the read connection.
_READ_BODIES = _RowsStatement(
    "SELECT id, body FROM messages WHERE id IN (SELECT column1 FROM (VALUES {rows}))", 1
)
_DELETE_UNREFERENCED = _RowsStatement(
    "DELETE FROM messages WHERE id IN (SELECT column1 FROM (VALUES {rows}))"
    " AND NOT EXISTS (SELECT 1 FROM queue_messages WHERE message_id = messages.id)",
    1,
)
_PUT_VHOST = "INSERT OR IGNORE INTO vhosts VALUES (?)"
_DELETE_VHOST = "DELETE FROM vhosts WHERE name = ?"
_PUT_ACCOUNT = "INSERT OR REPLACE INTO accounts VALUES (?, ?)"
_LOAD_ACCOUNTS = "SELECT name, record FROM accounts"
_PUT_EXCHANGE = "INSERT OR REPLACE INTO exchanges VALUES (?, ?, ?, ?, ?, ?)"
_DELETE_EXCHANGE = "DELETE FROM exchanges WHERE vhost = ? AND name = ?"
_DELETE_EXCHANGE_BINDINGS = (
    "DELETE FROM bindings WHERE vhost = ?1 AND"
    " (source = ?2 OR (destination_kind = 'exchange' AND destination = ?2))"
)
_PUT_QUEUE = "INSERT OR REPLACE INTO queues VALUES (?, ?, ?, ?)"
# Run before the queue's entries go: drops the messages that only this queue references.
_DELETE_QUEUE_ONLY_MESSAGES = (
    "DELETE FROM messages WHERE id IN"
    " (SELECT message_id FROM queue_messages WHERE vhost = ?1 AND queue = ?2)"
    " AND NOT EXISTS (SELECT 1 FROM queue_messages AS other WHERE other.message_id = messages.id"
    " AND (other.vhost != ?1 OR other.queue != ?2))"
)
_DELETE_QUEUE_ENTRIES = "DELETE FROM queue_messages WHERE vhost = ? AND queue = ?"
_DELETE_QUEUE_MARK = "DELETE FROM delivered_marks WHERE vhost = ? AND queue = ?"
_DELETE_QUEUE = "DELETE FROM queues WHERE vhost = ? AND name = ?"
_DELETE_QUEUE_BINDINGS = (
    "DELETE FROM bindings WHERE vhost = ? AND destination_kind = 'queue' AND destination = ?"
)
_PUT_BINDING = "INSERT OR IGNORE INTO bindings VALUES (?, ?, ?, ?, ?, ?)"
_DELETE_BINDING = (
    "DELETE FROM bindings WHERE vhost = ? AND source = ? AND destination_kind = ?"
    " AND destination = ? AND routing_key = ? AND arguments = ?"
)
# Start-up reads every row of these tables; the messages in each queue's enqueue order, along
# the queue index (ORDER BY seq alone would sort the whole table first).
_LOAD_VHOSTS = "SELECT name FROM vhosts"
_LOAD_EXCHANGES = "SELECT vhost, name, type, auto_delete, internal, arguments FROM exchanges"
_LOAD_QUEUES = "SELECT vhost, name, auto_delete, arguments FROM queues"
_LOAD_BINDINGS = "SELECT vhost, source, destination_kind, destination, routing_key, arguments FROM bindings"
_LOAD_MESSAGES = (
    "SELECT e.vhost, e.queue, e.message_id, e.message_id <= coalesce(d.message_id, 0),"
    " m.exchange, m.routing_key, m.header, length(m.body), m.routed_at FROM queue_messages AS e"
    " JOIN messages AS m ON m.id = e.message_id"
    " LEFT JOIN delivered_marks AS d ON d.vhost = e.vhost AND d.queue = e.queue"
    " ORDER BY e.vhost, e.queue, e.seq"
)
_LOAD_LAST_MESSAGE_ID = "SELECT coalesce(max(id), 0) FROM messages"


#: Copies what the WAL holds into the database without waiting for anyone (PASSIVE).
_CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"

# The space the database holds free for reuse (the disk alarm's view of free space).
_PAGE_SIZE = "PRAGMA page_size"
_FREE_PAGES = "PRAGMA freelist_count"


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
        #: Entries delivered and not removed since: what the queues' delivery marks must cover.
        self.delivered: set[_Key] = set()
        self.removed: set[_Key] = set()

    def writes(self) -> bool:
        return bool(self.ops or self.enqueued or self.delivered or self.removed)

    def marks(self) -> list[tuple[str, str, int]]:
        """(vhost, queue, highest delivered message id) of each queue that has one."""
        highest: dict[tuple[str, str], int] = {}
        for message_id, vhost, queue in self.delivered:
            if highest.get((vhost, queue), 0) < message_id:
                highest[vhost, queue] = message_id
        return [(vhost, queue, message_id) for (vhost, queue), message_id in highest.items()]

    def forget_queue(self, vhost: str, queue: str) -> None:
        """Drop buffered message writes for a queue being deleted (its deletion covers them)."""
        self.enqueued = {key: seq for key, seq in self.enqueued.items() if _other(key, vhost, queue)}
        self.delivered = {key for key in self.delivered if _other(key, vhost, queue)}
        self.removed = {key for key in self.removed if _other(key, vhost, queue)}


class _Backlog:
    """Removals of committed tickets not written yet, oldest first.

    Nobody waits for these to publish or declare (an ack has no reply), so a commit writes
    SETTLE_CHUNK of them (or as many as it enqueues) and leaves the rest to the next: an ack of
    200,000 messages then costs each commit a bounded amount, and the publishes that arrive
    meanwhile are confirmed after one short transaction rather than behind all of it. Removals
    are kept per ticket, oldest first, so `settled` can say up to which ticket they are all
    durable (what Tx.Commit-Ok waits for).

    Each ticket keeps its batch's own set rather than the backlog being one mapping of every
    key: a mapping of 170,000 keys that grows copies itself whole, 14 ms on the event loop
    while a drain was being acked, and every confirm waited for it.
    """

    __slots__ = ("size", "tickets", "top")

    def __init__(self) -> None:
        self.tickets: deque[tuple[int, set[_Key]]] = deque()
        self.size = 0
        #: No message id in the backlog is higher (an upper bound): an entry enqueued with a
        #: higher id, such as every newly routed message, has no removal pending.
        self.top = -1

    def __bool__(self) -> bool:
        return self.size > 0

    def extend(self, batch: _Batch, ticket: int) -> None:
        """Take a batch's removals (the batch is spent: its set is kept, not copied); an entry
        it enqueues again cancels a removal pending for it (its INSERT OR REPLACE writes the
        whole row)."""
        removed = batch.removed
        for key in batch.enqueued:
            removed.discard(key)
            if key[0] <= self.top:
                for _, keys in self.tickets:
                    if key in keys:
                        keys.remove(key)
                        self.size -= 1
                        break
        if removed:
            self.tickets.append((ticket, removed))
            self.size += len(removed)
            self.top = max(self.top, max(removed)[0])

    def take(self, limit: int | None) -> dict[_Key, int]:
        """Pop up to `limit` removals (None: all), oldest first, with their tickets."""
        taken: dict[_Key, int] = {}
        tickets = self.tickets
        while tickets and (limit is None or len(taken) < limit):
            ticket, keys = tickets[0]
            room = len(keys) if limit is None else limit - len(taken)
            if len(keys) <= room:
                tickets.popleft()
                taken.update(dict.fromkeys(keys, ticket))
            else:
                taken.update((keys.pop(), ticket) for _ in range(room))
        self.size -= len(taken)
        if not self.size:
            self.top = -1
        return taken

    def put_back(self, removed: dict[_Key, int]) -> None:
        """A chunk whose write failed goes back in front, to be written again."""
        by_ticket: dict[int, set[_Key]] = {}
        for key, ticket in removed.items():
            by_ticket.setdefault(ticket, set()).add(key)
        self.tickets.extendleft(sorted(by_ticket.items(), reverse=True))
        self.size += len(removed)
        if removed:
            self.top = max(self.top, max(removed)[0])

    def settled(self, ticket: int) -> int:
        """The last ticket whose removals are all written, `ticket` being committed."""
        while self.tickets and not self.tickets[0][1]:
            self.tickets.popleft()
        return self.tickets[0][0] - 1 if self.tickets else ticket

    def forget_queue(self, vhost: str, queue: str) -> None:
        for _, keys in self.tickets:
            gone = {key for key in keys if not _other(key, vhost, queue)}
            keys -= gone
            self.size -= len(gone)


def _other(key: _Key, vhost: str, queue: str) -> bool:
    return key[1] != vhost or key[2] != queue


class Store:
    """Durable vhosts, exchanges, queues, bindings and persistent messages of one node.

    The broker model buffers writes with the synchronous methods (no SQL runs on its thread);
    one committer task calls `await commit()` in a loop. Use `Store.open`, not the constructor.
    """

    #: The removals one commit writes (see _Backlog), or as many as it enqueues if that is
    #: more. A publish arriving while a commit of removals runs waits for it: 512 removals
    #: (3-14 ms a commit) put a probe's max confirm latency beside a drain of 200,000 at
    #: 42-44 ms, 128 (1-4 ms) at 27-29 ms (benchmarks backlog). A fixed 128 let the backlog
    #: fall behind a steady stream of publishes and acks (the acks of thousands of messages
    #: came back after a SIGKILL, test_dynamic_route_crash), hence "as many as it enqueues".
    #: The price: a Tx.Commit-Ok after a large ack waits for more, smaller commits.
    SETTLE_CHUNK = 128
    #: Seconds the checkpointer lets commits add to the WAL before it copies what they wrote.
    CHECKPOINT_INTERVAL = 0.1

    def __init__(self, data_dir: Path, lock_fd: int, db: sqlite3.Connection, seq: int) -> None:
        self.data_dir = data_dir
        self.path = data_dir / DB_FILE
        self._lock_fd = lock_fd
        self._db = db
        self._seq = seq
        self._batch = _Batch()
        self._backlog = _Backlog()
        self._ticket = 1
        #: The last ticket whose removals are durable too.
        self.settled = 0
        self._page_size: int = db.execute(_PAGE_SIZE).fetchone()[0]
        #: Bytes of free pages inside the database as of the last commit: SQLite fills them
        #: before it grows the file, so the disk alarm counts them as free space (consumed
        #: messages leave them behind; the file itself never shrinks).
        self._free_page_bytes = self._free_pages()
        #: The WAL file's bytes when the last checkpoint copied every page in it and no commit
        #: came since: the next commit writes the WAL from its beginning (0 otherwise).
        self._wal_reusable = 0
        #: Commits so far: a checkpoint that a commit overtook does not count the WAL free.
        self._commits = 0
        self._committing = trio.Lock()
        self._closed = False
        #: Opened on the first read of a paged body (read_bodies).
        self._reader: sqlite3.Connection | None = None
        #: Opened by the first checkpoint (run_checkpoints).
        self._checkpointer: sqlite3.Connection | None = None
        #: Set by each commit that wrote: the checkpointer has pages to copy.
        self._wrote = trio.Event()
        #: Whether the last checkpoint failed (logged once until one succeeds again).
        self._checkpoint_failed = False
        #: The batch a commit is writing, whose bodies the reader cannot see yet.
        self._writing: _Batch | None = None
        #: Bodies of messages whose write failed (a full disk), which stay in memory as if
        #: transient: kept here for paged readers until the node restarts.
        self._unwritten: dict[int, bytes] = {}

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
            for extra in (self._reader, self._checkpointer):
                if extra is not None:
                    extra.close()
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
        self._batch.ops.append((_PUT_VHOST, (name,)))

    def delete_vhost(self, name: str) -> None:
        """Forget a vhost; its exchanges and queues are deleted one by one before."""
        self._batch.ops.append((_DELETE_VHOST, (name,)))

    def put_account(self, name: str, record: str) -> None:
        """Keep a user managed at runtime (gateway.accounts says what `record` holds)."""
        self._batch.ops.append((_PUT_ACCOUNT, (name, record)))

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
        self._batch.ops.append((_PUT_EXCHANGE, row))

    def delete_exchange(self, vhost: str, name: str) -> None:
        """Delete an exchange and the bindings it is the source or destination of."""
        self._batch.ops += [(_DELETE_EXCHANGE, (vhost, name)), (_DELETE_EXCHANGE_BINDINGS, (vhost, name))]

    def put_queue(self, vhost: str, name: str, auto_delete: bool, arguments: dict[str, Any]) -> None:
        row = (vhost, name, auto_delete, dump_table(arguments))
        self._batch.ops.append((_PUT_QUEUE, row))

    def delete_queue(self, vhost: str, name: str) -> None:
        """Delete a queue with its messages and the bindings to it."""
        self._batch.forget_queue(vhost, name)
        self._backlog.forget_queue(vhost, name)
        key = (vhost, name)
        self._batch.ops += [
            (sql, key)
            for sql in (
                _DELETE_QUEUE_ONLY_MESSAGES,
                _DELETE_QUEUE_ENTRIES,
                _DELETE_QUEUE_MARK,
                _DELETE_QUEUE,
                _DELETE_QUEUE_BINDINGS,
            )
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
        self._batch.ops.append((_PUT_BINDING, row))

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
        self._batch.ops.append((_DELETE_BINDING, row))

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
        """Whether anything waits for a commit: writes buffered since the current batch began,
        or removals and flags left over by earlier commits."""
        batch = self._batch
        return batch.writes() or bool(batch.contents) or bool(self._backlog)

    async def commit(self, *, settle_all: bool = False) -> int:
        """Make the current batch durable and return its ticket (every earlier one is durable too).

        The buffer is swapped first, so writes made while this runs go to the next ticket.
        Topology, enqueued messages and delivery marks are written in full; removals join the
        backlog, of which SETTLE_CHUNK, or as many as the batch enqueues, are written, oldest
        first, so the cost of one commit stays in proportion to its own batch however big an
        ack was, and the backlog keeps pace with steady traffic (`settled` says how far those are
        durable; `settle_all` writes the whole backlog, for a stop, when nobody publishes any
        more). A batch whose writes all cancelled out completes without touching the disk.
        A failed write raises `WriteFailed`: its new messages are given up, its topology goes
        in front of the next batch, its marks into it and its backlog chunk back into the
        backlog, to be written again (see the module docstring).
        """
        async with self._committing:
            batch, self._batch = self._batch, _Batch()
            self._writing = batch
            ticket = self._ticket
            self._ticket += 1
            backlog = self._backlog
            backlog.extend(batch, ticket)
            removed = backlog.take(None if settle_all else max(self.SETTLE_CHUNK, len(batch.enqueued)))
            if batch.ops or batch.enqueued or batch.delivered or removed:
                try:
                    # The delivery marks are made here, on the event loop: made on the worker
                    # thread, that Python loop waited for the GIL behind the busy event loop.
                    await trio.to_thread.run_sync(self._write, batch, list(removed), batch.marks())
                except Exception as exc:
                    self._wrote_wal()
                    self._writing = None
                    # Their messages live on in memory: a queue may have paged one out already.
                    self._unwritten.update((i, row[4]) for i, row in batch.contents.items())
                    self._batch.ops[:0] = batch.ops
                    self._batch.delivered |= batch.delivered
                    backlog.put_back(removed)
                    raise WriteFailed(
                        ticket,
                        f"writing to the store {self.path} failed, so ticket {ticket} is not durable: {exc}",
                    ) from exc
                self._wrote_wal()
                self._wrote.set()
            self._writing = None
            self.settled = backlog.settled(ticket)
            return ticket

    async def run_checkpoints(self) -> None:
        """Copy what the commits wrote from the WAL into the database, for the node's lifetime,
        at most once per CHECKPOINT_INTERVAL. A checkpoint that fails (a full disk) is logged
        and retried after the next commit: the WAL keeps every page until one succeeds."""
        while True:
            await self._wrote.wait()
            self._wrote = trio.Event()
            await trio.sleep(self.CHECKPOINT_INTERVAL)
            commits = self._commits
            try:
                wal_reusable = await trio.to_thread.run_sync(self._checkpoint)
            except sqlite3.Error as exc:
                if not self._checkpoint_failed:
                    LOGGER.warning("checkpoint of the store %s failed, will retry: %s", self.path, exc)
                self._checkpoint_failed = True
            else:
                if commits == self._commits:
                    self._wal_reusable = wal_reusable
                if self._checkpoint_failed:
                    LOGGER.info("checkpoints of the store %s succeed again", self.path)
                self._checkpoint_failed = False

    @property
    def reusable_bytes(self) -> int:
        """Bytes inside the store's files that SQLite writes before it takes more of the disk:
        free pages, and a WAL whose pages have all reached the database."""
        return self._free_page_bytes + self._wal_reusable

    def _wrote_wal(self) -> None:
        """A commit, even a failed one, may have written the WAL from its beginning: none of
        it is free until the next checkpoint has copied it."""
        self._commits += 1
        self._wal_reusable = 0

    def _checkpoint(self) -> int:
        """Copy the WAL's pages into the database (worker thread); the WAL's size if every
        page in it is copied now, else 0 (the next commit appends to it)."""
        if self._checkpointer is None:
            self._checkpointer = connect_checkpointer(self.path)
        busy, frames, copied = self._checkpointer.execute(_CHECKPOINT).fetchone()
        wal = self.path.with_name(self.path.name + "-wal")
        return wal.stat().st_size if not busy and frames == copied and wal.exists() else 0

    def _write(self, batch: _Batch, removed: list[_Key], marks: list[tuple[str, str, int]]) -> None:
        """Apply a batch and a chunk of the backlog in one transaction (worker thread).

        Topology first (a queue deletion has already dropped the buffered messages before it),
        then removals, then additions (an entry enqueued again has left the backlog), then
        delivery marks.
        """
        db = self._db
        db.execute("BEGIN")
        try:
            for sql, params in batch.ops:
                db.execute(sql, params)
            if removed:
                _DELETE_ENTRIES.run(db, removed)
                _DELETE_UNREFERENCED.run(db, [(i,) for i in {key[0] for key in removed}])
            enqueued = batch.enqueued
            if enqueued:
                live = {key[0] for key in enqueued}
                _INSERT_MESSAGES.run(db, [row for i, row in batch.contents.items() if i in live])
                _INSERT_ENTRIES.run(db, [(*key, seq) for key, seq in enqueued.items()])
            if marks:
                _PUT_DELIVERED_MARKS.run(db, marks)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.rollback()
            raise
        self._free_page_bytes = self._free_pages()

    def read_bodies(self, message_ids: Sequence[int]) -> dict[int, bytes]:
        """Stored bodies by message id, for gateway.broker.paging; on the model's thread, from
        the batches not written yet, else through a read-only connection of its own (WAL: it
        reads the last commit, never waits for one)."""
        found: dict[int, bytes] = {}
        missing = []
        unwritten = self._unwritten
        for message_id in message_ids:
            for batch in (self._batch, self._writing):
                row = None if batch is None else batch.contents.get(message_id)
                if row is not None:
                    found[message_id] = row[4]
                    break
            else:
                if message_id in unwritten:
                    found[message_id] = unwritten[message_id]
                else:
                    missing.append(message_id)
        if not missing:
            return found
        reader = self._reader
        if reader is None:
            reader = self._reader = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
            )
        found.update(_READ_BODIES.select(reader, [(message_id,) for message_id in missing]))
        return found

    def _free_pages(self) -> int:
        (pages,) = self._db.execute(_FREE_PAGES).fetchone()
        return int(pages) * self._page_size

    # -- start-up ----------------------------------------------------------------------------

    def load_accounts(self) -> dict[str, str]:
        """The records of the users managed at runtime, by name (once, at start)."""
        try:
            return dict(self._db.execute(_LOAD_ACCOUNTS).fetchall())
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the store {self.path}: {exc}") from exc

    def load(self) -> Snapshot:
        """Read all durable state (once, at start, before serving)."""
        try:
            return self._load()
        except (sqlite3.Error, ValueError) as exc:
            raise StoreError(f"cannot read the store {self.path}: {exc}") from exc

    def _load(self) -> Snapshot:
        db = self._db
        vhosts = [name for (name,) in db.execute(_LOAD_VHOSTS)]
        exchanges = [
            ExchangeRecord(vhost, name, kind, bool(auto_delete), bool(internal), load_table(args))
            for vhost, name, kind, auto_delete, internal, args in db.execute(_LOAD_EXCHANGES)
        ]
        queues = [
            QueueRecord(vhost, name, bool(auto_delete), load_table(args))
            for vhost, name, auto_delete, args in db.execute(_LOAD_QUEUES)
        ]
        bindings = [
            BindingRecord(vhost, source, kind, destination, key, load_table(args))
            for vhost, source, kind, destination, key, args in db.execute(_LOAD_BINDINGS)
        ]
        shared: dict[int, Content] = {}
        messages: dict[tuple[str, str], list[MessageRecord]] = {}
        rows = db.execute(_LOAD_MESSAGES)
        for vhost, queue, message_id, delivered, exchange, key, header, size, routed_at in rows:
            content = shared.get(message_id)
            if content is None:
                content = shared[message_id] = PagedContent(header, message_id, size, self)
            record = MessageRecord(message_id, exchange, key, content, bool(delivered), routed_at)
            messages.setdefault((vhost, queue), []).append(record)
        (last_id,) = db.execute(_LOAD_LAST_MESSAGE_ID).fetchone()
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
