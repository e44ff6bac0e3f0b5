"""Opening the data dir: its lock, the database file, its pragmas and schema.

The schema: one row per durable vhost, exchange, queue and binding (argument tables in the
encoding of `tables`), `messages` holding each persistent message's content once, and
`queue_messages` saying which queues hold it and in which order, and `delivered_marks` the
highest message id each queue has handed out (its entries up to there come back redelivered).

Schema 2 added `messages.routed_at` (so expiry deadlines survive restarts); a schema-1 store is
upgraded in place when opened, its old messages getting NULL there. Schema 3 added the index of
`queue_messages` by queue (deleting a queue's entries, loading them in order), so that no
statement of the store scans a message table. Schema 4 replaced the per-entry `delivered` flag
with `delivered_marks`: an upgraded queue's mark is its highest flagged entry, so entries under
it that were never delivered come back flagged too (the flag means "may have been delivered").
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path

from .errors import StoreError, StoreLocked

SCHEMA_VERSION = 5
DB_FILE = "store.db"
LOCK_FILE = "LOCK"
#: A WAL that a burst of large messages grew is cut back to this size once it restarts.
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
#: WAL pages after which the committer's own connection checkpoints at the end of a COMMIT
#: (SQLite's automatic checkpoint). The store's checkpointer copies pages beside the commits
#: long before that, so this checkpoint has only the last few to copy; it lets the WAL
#: restart from its beginning, which SQLite does only once every page in it has been copied
#: when a write begins, and a checkpoint run beside a busy committer rarely sees that.
WAL_AUTOCHECKPOINT_PAGES = 4000

# A queue's entries in enqueue order: deleting a queue, loading in order.
_QUEUE_INDEX = "CREATE INDEX queue_messages_by_queue ON queue_messages (vhost, queue, seq)"

_DELIVERED_MARKS = (
    "CREATE TABLE delivered_marks (vhost TEXT, queue TEXT, message_id INTEGER NOT NULL,"
    " PRIMARY KEY (vhost, queue)) WITHOUT ROWID"
)

#: Users managed at runtime (gateway.accounts): one JSON record per user name.
_ACCOUNTS = "CREATE TABLE accounts (name TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID"

_SCHEMA = (
    "CREATE TABLE vhosts (name TEXT PRIMARY KEY) WITHOUT ROWID",
    _ACCOUNTS,
    (
        "CREATE TABLE exchanges (vhost TEXT, name TEXT, type TEXT NOT NULL,"
        " auto_delete INTEGER NOT NULL, internal INTEGER NOT NULL, arguments BLOB NOT NULL,"
        " PRIMARY KEY (vhost, name)) WITHOUT ROWID"
    ),
    (
        "CREATE TABLE queues (vhost TEXT, name TEXT, auto_delete INTEGER NOT NULL,"
        " arguments BLOB NOT NULL, PRIMARY KEY (vhost, name)) WITHOUT ROWID"
    ),
    (
        "CREATE TABLE bindings (vhost TEXT, source TEXT, destination_kind TEXT, destination TEXT,"
        " routing_key TEXT, arguments BLOB, PRIMARY KEY"
        " (vhost, source, destination_kind, destination, routing_key, arguments)) WITHOUT ROWID"
    ),
    # A rowid table: bodies can be large, which WITHOUT ROWID tables handle badly.
    (
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, exchange TEXT NOT NULL,"
        " routing_key TEXT NOT NULL, header BLOB NOT NULL, body BLOB NOT NULL, routed_at REAL)"
    ),
    (
        "CREATE TABLE queue_messages (message_id INTEGER, vhost TEXT, queue TEXT,"
        " seq INTEGER NOT NULL, PRIMARY KEY (message_id, vhost, queue)) WITHOUT ROWID"
    ),
    _QUEUE_INDEX,
    _DELIVERED_MARKS,
)

#: The highest enqueue sequence number, a queue index lookup per queue (max(seq) over the whole
#: table would scan it).
_LOAD_LAST_SEQ = (
    "SELECT coalesce(max((SELECT max(seq) FROM queue_messages WHERE vhost = q.vhost AND queue = q.name)), 0)"
    " FROM queues AS q"
)

#: Statements that take a store from version N (the key) to N + 1.
_UPGRADES = {
    1: ("ALTER TABLE messages ADD COLUMN routed_at REAL",),
    2: (_QUEUE_INDEX,),
    3: (
        _DELIVERED_MARKS,
        "INSERT INTO delivered_marks SELECT vhost, queue, max(message_id) FROM queue_messages"
        " WHERE delivered GROUP BY vhost, queue",
        "ALTER TABLE queue_messages DROP COLUMN delivered",
    ),
    4: (_ACCOUNTS,),
}


#: Data files hold messages and peers' passwords: readable by the node's user only, like the
#: users file. SQLite gives a database's -wal and -shm files the database file's mode.
PRIVATE_MODE = 0o600


def private_file(path: Path) -> None:
    """Create `path` readable by its owner only, or make an existing one so (stores made
    before files were private become private when next opened)."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_MODE))
    os.chmod(path, PRIVATE_MODE)


def lock_data_dir(data_dir: Path) -> int:
    """flock the data dir's LOCK file and write our pid in it; the lock dies with the process."""
    path = data_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_MODE)
        os.fchmod(fd, PRIVATE_MODE)
    except OSError as exc:
        raise StoreError(f"cannot open the lock file {path}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise StoreLocked(
            f"data dir {data_dir} is in use by another node (pid {holder});"
            " only one node may use a data dir at a time"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def connect(path: Path) -> tuple[sqlite3.Connection, int]:
    """Open (or create) the database; returns it with the highest enqueue sequence number."""
    try:
        private_file(path)
        for suffix in ("-wal", "-shm"):  # left by a node that was killed, maybe before 0600
            companion = path.with_name(path.name + suffix)
            if companion.exists():
                os.chmod(companion, PRIVATE_MODE)
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open the store {path}: {exc}") from exc
    try:
        created = migrate(db, path)
        (seq,) = db.execute(_LOAD_LAST_SEQ).fetchone()
    except sqlite3.Error as exc:
        db.close()
        raise StoreError(f"cannot open the store {path} (damaged or not a database?): {exc}") from exc
    except BaseException:
        db.close()
        raise
    if created:
        sync_directory(path.parent)
    return db, seq


def connect_checkpointer(path: Path) -> sqlite3.Connection:
    """A second connection to the database, for the checkpoints run beside the commits."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA synchronous = FULL")  # the checkpoint then fsyncs what it copied
    db.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
    return db


def migrate(db: sqlite3.Connection, path: Path) -> bool:
    """Check the schema version, set durability pragmas, create or upgrade the schema; True if
    created."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} has schema version {version}, newer than this amq-gateway supports"
            f" ({SCHEMA_VERSION}); run a newer amq-gateway or use another data dir"
        )
    if version == 0 and db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        raise StoreError(f"{path} is an SQLite database but not an amq-gateway store")
    (mode,) = db.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode != "wal":
        raise StoreError(f"{path}: SQLite refused WAL mode (journal_mode is {mode})")
    db.execute("PRAGMA synchronous = FULL")
    # Debian builds SQLite with SECURE_DELETE on: every freed page is zeroed through the WAL,
    # which doubles the writes of an ack and uses as much disk as it frees. FAST zeroes only
    # what costs no extra I/O; the files are private to the node (0600) anyway.
    db.execute("PRAGMA secure_delete = FAST")
    db.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
    db.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
    if version == SCHEMA_VERSION:
        return False
    db.execute("BEGIN")
    if version == 0:
        statements = list(_SCHEMA)
    else:
        statements = [statement for step in range(version, SCHEMA_VERSION) for statement in _UPGRADES[step]]
    for statement in statements:
        db.execute(statement)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    db.execute("COMMIT")
    return version == 0


def sync_directory(directory: Path) -> None:
    """fsync a new database file's directory entry: SQLite syncs the WAL's, not the main file's."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
