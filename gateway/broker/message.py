"""A published message, and its place in one queue.

A message routed to several queues is one `Message` (content held once); each queue holds an
`Entry` with what differs per queue: order, redelivered flag, expiry, and who holds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.broker.outbox import ReturnTo
from gateway.wire.content import Content

if TYPE_CHECKING:
    from gateway.broker.channel import Consumer
    from gateway.broker.queue import Queue

#: What one message costs the node's memory beyond its body (the message and entry objects,
#: its header, index entries; measured: 100-byte messages held about 600 bytes each): the
#: memory alarm's accounting of what publishes add between two readings of the node's memory.
MESSAGE_OVERHEAD = 512


class Message:
    __slots__ = (
        "id",
        "exchange",
        "routing_key",
        "content",
        "size",
        "persistent",
        "expires_at",
        "origin",
        "return_to",
    )

    def __init__(
        self,
        message_id: int,
        exchange: str,
        routing_key: str,
        content: Content,
        persistent: bool,
        expires_at: float | None,
        origin: int,
        return_to: ReturnTo | None = None,
        size: int | None = None,
    ) -> None:
        """`size`: the body's length when the body is not in memory (gateway.broker.paging)."""
        self.id = message_id
        self.exchange = exchange
        self.routing_key = routing_key
        self.content = content
        self.size = len(content.body) if size is None else size
        self.persistent = persistent
        #: Absolute deadline from the per-message expiration property, if any.
        self.expires_at = expires_at
        #: Id of the publishing session (0 for none), for consumers with no-local.
        self.origin = origin
        #: (session id, channel) of a mandatory publish: where a Return goes if a federation
        #: parent finds the message unroutable later. Not stored: it means nothing after a restart.
        self.return_to = return_to


class Entry:
    __slots__ = ("message", "queue", "seq", "redelivered", "expires_at", "consumer", "returns")

    def __init__(
        self, message: Message, queue: Queue, seq: int, redelivered: bool, expires_at: float | None
    ) -> None:
        self.message = message
        self.queue = queue
        #: Position in the queue, so requeued entries go back where they were.
        self.seq = seq
        self.redelivered = redelivered
        self.expires_at = expires_at
        #: The consumer holding it unacked (None when ready, or fetched with basic.get).
        self.consumer: Consumer | None = None
        #: How often it came back to the queue (rejected or nacked with requeue, or its
        #: channel closed unacked), for a quorum queue's x-delivery-limit; not stored.
        self.returns = 0


def expiration_deadline(content: Content, now: float) -> float | None:
    """The deadline set by the expiration property (milliseconds as a decimal string).

    ValueError names what is wrong with an invalid one, as RabbitMQ's 406 text does.
    """
    expiration = content.expiration
    if expiration is None:
        return None
    if not expiration.isdigit():
        raise ValueError("{value_negative}" if expiration.startswith("-") else "no_integer")
    return now + int(expiration) / 1000.0
