"""The spill file: bodies of messages the store does not keep (transient messages, messages on
non-durable queues) once their queues are over their memory budget (gateway.broker.paging).

Nothing in it outlives the process, so it needs none of the store's care: no journal, no
fsync, one connection on the model's thread, and the file is discarded when the node starts
(a node without a data dir keeps it, unlinked, in the temporary directory). Bodies are freed as
the model lets go of their messages; the deletions wait for the next write or read, in one
statement, because they are reported while objects are being freed.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path

LOGGER = logging.getLogger(__name__)

SPILL_FILE = "spill.sqlite"
#: Deletions gathered before they are run in one statement.
FORGET_BATCH = 256
#: Large pages: spilled bodies are mostly large, and each page beyond the first is one write.
PAGE_SIZE = 65536
#: The connection's page cache (KiB): bodies are read once and handed over, never cached here.
CACHE_KIB = 2048


class SpillFile:
    """Bodies by message id, in a scratch SQLite file (implements paging.BodySpill)."""

    def __init__(self, path: Path, unlink: bool = False) -> None:
        """Start `path` empty; `unlink`: remove its name at once (the open file stays usable)."""
        for stale in (path, path.with_name(path.name + "-journal")):
            stale.unlink(missing_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # private, as the store's files
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        if unlink:
            path.unlink()
        self._db.executescript(
            f"""
            PRAGMA page_size = {PAGE_SIZE};
            PRAGMA journal_mode = OFF;
            PRAGMA synchronous = OFF;
            PRAGMA locking_mode = EXCLUSIVE;
            PRAGMA cache_size = -{CACHE_KIB};
            CREATE TABLE bodies (id INTEGER PRIMARY KEY, body BLOB NOT NULL);
            """
        )
        self._forgotten: list[int] = []
        #: The last write failed (logged once until a write succeeds again).
        self._failing = False
        #: Bodies put and not yet forgotten, and their bytes.
        self.count = 0
        self.bytes = 0

    @classmethod
    def open(cls, data_dir: Path | None) -> SpillFile:
        """The node's spill file: in its data dir, or unnamed in the temporary directory."""
        if data_dir is not None:
            return cls(data_dir / SPILL_FILE)
        handle, name = tempfile.mkstemp(prefix="amq-gateway-", suffix=f"-{SPILL_FILE}")
        os.close(handle)
        return cls(Path(name), unlink=True)

    def put(self, message_id: int, body: bytes) -> bool:
        """Keep a body; False if it could not be written (a full disk): it then stays in
        memory, and the node goes on (the memory alarm still bounds it)."""
        try:
            self._forget_now()
            self._db.execute("INSERT INTO bodies (id, body) VALUES (?, ?)", (message_id, body))
        except sqlite3.Error as exc:
            if not self._failing:
                LOGGER.warning(
                    "cannot write to the spill file %s (%s): message bodies stay in memory", self.path, exc
                )
                self._failing = True
            return False
        if self._failing:
            LOGGER.info("the spill file %s takes message bodies again", self.path)
            self._failing = False
        self.count += 1
        self.bytes += len(body)
        return True

    def read_bodies(self, message_ids: Sequence[int]) -> dict[int, bytes]:
        self._forget_now()
        found: dict[int, bytes] = {}
        for start in range(0, len(message_ids), 500):  # under SQLite's limit of parameters
            chunk = message_ids[start : start + 500]
            rows = self._db.execute(
                f"SELECT id, body FROM bodies WHERE id IN ({','.join('?' * len(chunk))})", chunk
            )
            found.update(rows)
        return found

    def forget(self, message_id: int, size: int) -> None:
        self.count -= 1
        self.bytes -= size
        self._forgotten.append(message_id)

    def _forget_now(self) -> None:
        if len(self._forgotten) >= FORGET_BATCH:
            forgotten, self._forgotten = self._forgotten, []
            self._db.executemany("DELETE FROM bodies WHERE id = ?", [(i,) for i in forgotten])

    def close(self) -> None:
        """Close and remove the file (its bodies mean nothing to the next start)."""
        self._db.close()
        self.path.unlink(missing_ok=True)
