"""The broker model: synchronous, no I/O. See docs/architecture.md (gateway.broker)."""

from gateway.broker.broker import Broker, Snapshot
from gateway.broker.outbox import Outbox
from gateway.broker.session import Session
from gateway.broker.store import StoreWriter

__all__ = ["Broker", "Outbox", "Session", "Snapshot", "StoreWriter"]
