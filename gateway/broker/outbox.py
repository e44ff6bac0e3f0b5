"""What the model needs from a connection to talk to its client.

The Trio server implements this on top of the wire connection; unit tests use a recording
fake. Every call is synchronous and must not call back into the broker.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.wire.content import Content
from gateway.wire.errors import AMQPError


class Outbox(Protocol):
    #: The client's "capabilities" table (consumer_cancel_notify, publisher_confirms, ...).
    client_capabilities: dict[str, Any]
    #: The peer's address, for logs.
    peer: str

    def send_method(self, channel: int, method: Any) -> None: ...

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        content: Content,
    ) -> None: ...

    def send_get_ok(
        self,
        channel: int,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        message_count: int,
        content: Content,
    ) -> None: ...

    def send_return(
        self,
        channel: int,
        reply_code: int,
        reply_text: str,
        exchange: str,
        routing_key: str,
        content: Content,
    ) -> None: ...

    def close_channel(self, channel: int, error: AMQPError) -> None: ...

    def close_connection(self, error: AMQPError) -> None: ...

    def writable(self) -> bool:
        """False while the connection's output is backed up: the model then stops delivering to
        it until `Session.resume()`."""
        ...


class NullOutbox:
    """An Outbox that ignores everything: the base of in-process sessions (management runs
    AMQP methods on one; federation routes override what they need to hear)."""

    client_capabilities: dict[str, Any] = {}
    peer = "internal"

    def writable(self) -> bool:
        return True

    def send_method(self, channel: int, method: Any) -> None:
        pass

    def send_deliver(self, *args: Any) -> None:
        pass

    def send_get_ok(self, *args: Any) -> None:
        pass

    def send_return(self, *args: Any) -> None:
        pass

    def close_channel(self, channel: int, error: AMQPError) -> None:
        pass

    def close_connection(self, error: AMQPError) -> None:
        pass
