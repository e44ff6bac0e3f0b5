"""The broker model: synchronous, no I/O. See docs/architecture.md (gateway.broker).

It imports wire's value types, routing and names only: never trio, sqlite3, the store or
federation. It talks outward through ports (the outbox with block/unblock, the store writer,
exchange handlers, exchange federation hooks), so the node, federation and tests drive it
alike.
"""

from gateway.broker.broker import Broker, Snapshot
from gateway.broker.outbox import Outbox
from gateway.broker.session import Session
from gateway.broker.store import StoreWriter

__all__ = ["Broker", "Outbox", "Session", "Snapshot", "StoreWriter"]
