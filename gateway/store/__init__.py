"""Durable state of a node in SQLite (WAL, group commit); see docs/architecture.md.

It implements the broker's StoreWriter port and reads back its records; only the composition
root (gateway.node), the CLI and tests open a store. The broker never imports it.
"""

from .database import Store
from .errors import StoreError, StoreLocked, WriteFailed
from .opening import DB_FILE, LOCK_FILE, SCHEMA_VERSION

__all__ = [
    "DB_FILE",
    "LOCK_FILE",
    "SCHEMA_VERSION",
    "Store",
    "StoreError",
    "StoreLocked",
    "WriteFailed",
    "WriteFailed",
]
