"""What the model needs from a connection to talk to its client, and what it hands it.

The Trio server implements the Outbox on top of the wire connection; federation's internal
sessions implement it to hear their deliveries; unit tests use a recording fake. Every call is
synchronous and must not call back into the broker.

Deliveries, Get-Oks and Returns travel as frozen value objects, built once by the model, whose
fields come in the order of the matching `gateway.wire` send_* method's arguments, so that the
server passes them on unpacked. Get-Oks and Returns are named tuples. A delivery is made per
message, so the model hands over a plain tuple of Delivery's fields (DeliveryFields): Python
builds it from a free list and unpacks it on a fast path, where a named tuple's allocation
cost a tenth of the whole delivery path; an outbox that keeps deliveries (federation's) names
them with `Delivery._make`.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from gateway.wire.content import Content
from gateway.wire.errors import AMQPError

#: (session id, channel number, publisher-confirm sequence number or 0) of a mandatory publish:
#: where a Return for it goes, and which confirm waits for a federation parent's verdict.
ReturnTo = tuple[int, int, int]


class Delivery(NamedTuple):
    """Basic.Deliver with its content, and where a Return for the message would go (its
    publisher's channel if it was published with mandatory and reached no queue of ours yet:
    a federation that forwards it asks its parent to return it there)."""

    channel: int
    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    content: Content
    return_to: ReturnTo | None = None


#: Delivery's fields in order, as the model passes them to Outbox.send_deliver.
DeliveryFields = tuple[int, str, int, bool, str, str, Content, ReturnTo | None]


class GetOk(NamedTuple):
    """Basic.Get-Ok with its content."""

    channel: int
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    message_count: int
    content: Content


class Return(NamedTuple):
    """Basic.Return with the unroutable message's content."""

    channel: int
    reply_code: int
    reply_text: str
    exchange: str
    routing_key: str
    content: Content


class Outbox(Protocol):
    # Read-only properties: the model only reads them, and the server's connection handler
    # computes the capabilities from its wire state (a plain attribute satisfies them too).
    @property
    def client_capabilities(self) -> dict[str, Any]:
        """The client's "capabilities" table (consumer_cancel_notify, publisher_confirms, ...)."""
        ...

    @property
    def peer(self) -> str:
        """The peer's address, for logs."""
        ...

    def send_method(self, channel: int, method: Any) -> None: ...

    def send_deliver(self, delivery: DeliveryFields) -> None: ...

    def send_get_ok(self, get_ok: GetOk) -> None: ...

    def send_return(self, returned: Return) -> None: ...

    def close_channel(self, channel: int, error: AMQPError) -> None: ...

    def close_connection(self, error: AMQPError) -> None: ...

    def writable(self) -> bool:
        """False while the connection's output is backed up: the model then stops delivering to
        it until `Session.resume()`."""
        ...

    def block(self, reason: str) -> None:
        """The publish just handled must be this connection's last for now (a full federation
        outbox, the disk alarm): handle none of its input after it until `unblock()`, telling
        a client that understands Connection.Blocked `reason`."""
        ...

    def unblock(self) -> None:
        """What blocked the connection is gone: handle its input again."""
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

    def send_deliver(self, delivery: DeliveryFields) -> None:
        pass

    def send_get_ok(self, get_ok: GetOk) -> None:
        pass

    def send_return(self, returned: Return) -> None:
        pass

    def close_channel(self, channel: int, error: AMQPError) -> None:
        pass

    def close_connection(self, error: AMQPError) -> None:
        pass

    def block(self, reason: str) -> None:
        pass

    def unblock(self) -> None:
        pass
