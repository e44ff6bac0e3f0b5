"""The broker's durable state as plain records: what a store hands back at start-up
(Broker.recover), so the model depends on no store and any store can feed it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.wire.content import Content


@dataclass(frozen=True)
class ExchangeRecord:
    vhost: str
    name: str
    type: str
    auto_delete: bool
    internal: bool
    arguments: dict[str, Any]


@dataclass(frozen=True)
class QueueRecord:
    vhost: str
    name: str
    auto_delete: bool
    arguments: dict[str, Any]


@dataclass(frozen=True)
class BindingRecord:
    vhost: str
    source: str
    destination_kind: str  # "queue" or "exchange"
    destination: str
    routing_key: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class MessageRecord:
    message_id: int
    exchange: str
    routing_key: str
    content: Content
    redelivered: bool
    #: Clock time it was routed to its queues; None for messages stored by schema 1, which
    #: did not record it (their expiry counts from the restart).
    routed_at: float | None = None


@dataclass(frozen=True)
class Snapshot:
    """Durable state at start-up; `messages` maps (vhost, queue) to its messages in enqueue order."""

    vhosts: list[str] = field(default_factory=list)
    exchanges: list[ExchangeRecord] = field(default_factory=list)
    queues: list[QueueRecord] = field(default_factory=list)
    bindings: list[BindingRecord] = field(default_factory=list)
    messages: dict[tuple[str, str], list[MessageRecord]] = field(default_factory=dict)
    next_message_id: int = 1
