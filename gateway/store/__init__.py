"""Durable state of a node in SQLite (WAL, group commit); see docs/architecture.md."""

from .database import Store
from .opening import DB_FILE, LOCK_FILE, SCHEMA_VERSION
from .records import (
    BindingRecord,
    ExchangeRecord,
    MessageRecord,
    QueueRecord,
    Snapshot,
    StoreError,
    StoreLocked,
    WriteFailed,
)

__all__ = [
    "DB_FILE",
    "LOCK_FILE",
    "SCHEMA_VERSION",
    "BindingRecord",
    "ExchangeRecord",
    "MessageRecord",
    "QueueRecord",
    "Snapshot",
    "Store",
    "StoreError",
    "StoreLocked",
    "WriteFailed",
]
