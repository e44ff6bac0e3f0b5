"""What `ServerConnection.next_event()` and `ClientConnection.next_event()` return: frozen,
slotted dataclasses, h11 style, except the two made once per message (`MessageReceived`,
`MessageDelivered`): a frozen dataclass's __init__ sets each field through object.__setattr__,
about 680 ns for six fields against 170 ns for a plain slotted one, several percent of what
a publish costs the node. Nothing keeps or shares an event, so nothing changes one either.

Events carry decoded values only; the connection has already answered whatever the protocol
answers by itself (Channel.Open-Ok, Close-Ok, the Close for a peer's mistake), so the code
driving it only has to act on the meaning. Events both roles report come first; then the
server's, then the client's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final, Literal

from pamqp import base

from gateway.wire.content import Content
from gateway.wire.errors import AMQPError


class _Sentinel(enum.Enum):
    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__


#: Returned by `next_event()` when a whole event needs more bytes than have been received.
NEED_DATA: Final = _Sentinel.NEED_DATA
NeedData = Literal[_Sentinel.NEED_DATA]


class Event:
    """Base class of every event."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ProtocolHeaderRejected(Event):
    """The peer does not speak AMQP 0-9-1: `received` is what it sent instead of the protocol
    header (server role: ours is queued) or of Connection.Start (client role: usually the
    server's own protocol header). The connection is over."""

    received: bytes


@dataclass(frozen=True, slots=True)
class LoginRequested(Event):
    """Connection.Start-Ok: answer with `accept_login(username)` or `refuse_login(text)`.

    `response` is the SASL response exactly as sent (pamqp would hand it over as text).
    """

    mechanism: str
    response: bytes
    client_properties: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SecretUpdateRequested(Event):
    """Connection.Update-Secret (RabbitMQ's extension): the client's new password for its
    user. Answer with `accept_secret()`, or refuse with `close_connection(error)`."""

    new_secret: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class VhostRequested(Event):
    """Connection.Open: answer with `accept_open()` or `close_connection(error)`."""

    vhost: str


@dataclass(frozen=True, slots=True)
class ChannelOpened(Event):
    """Server role: the client opened a channel and Open-Ok is queued. Client role: the server's
    Open-Ok arrived."""

    channel: int


@dataclass(frozen=True, slots=True)
class ChannelCloseRequested(Event):
    """The client closed a channel; Close-Ok is already queued and the id is free again."""

    channel: int


@dataclass(frozen=True, slots=True)
class ChannelClosed(Event):
    """The peer acknowledged our Channel.Close; the id is free again."""

    channel: int


@dataclass(frozen=True, slots=True)
class MethodReceived(Event):
    """Any other method, as a pamqp object. Server role: a client method on an open channel
    (Basic.Ack included). Client role: replies and notifications (Basic.Cancel, Channel.Flow,
    already answered; Connection.Blocked / Unblocked on channel 0)."""

    channel: int
    method: base.Frame


@dataclass(slots=True)
class MessageReceived(Event):
    """A Basic.Publish whose content header and body frames have all arrived."""

    channel: int
    exchange: str
    routing_key: str
    mandatory: bool
    immediate: bool
    content: Content


@dataclass(frozen=True, slots=True)
class HeartbeatReceived(Event):
    """A heartbeat frame (any received byte proves liveness; this says the peer meant it)."""


@dataclass(frozen=True, slots=True)
class ConnectionCloseRequested(Event):
    """The client closed the connection; Close-Ok is queued and the connection is over."""

    reply_code: int
    reply_text: str


@dataclass(frozen=True, slots=True)
class ConnectionClosed(Event):
    """The connection is over: our Close was acknowledged (or crossed), or the socket reached
    EOF. After any terminal event `next_event()` returns this forever."""


@dataclass(frozen=True, slots=True)
class ProtocolErrorOccurred(Event):
    """The peer broke the protocol. The matching Close is already queued.

    `channel` is 0 when the error closes the connection (`error.connection_level`, or any error
    on channel 0): the server should then stop feeding the broker and wait, bounded, for
    `ConnectionClosed`. Otherwise only that channel is closing. The client role detects only
    connection-level errors.
    """

    error: AMQPError
    channel: int


# ---------------------------------------------------------------- client role


@dataclass(frozen=True, slots=True)
class ConnectionOpened(Event):
    """Connection.Open-Ok: the handshake is over and channels may be opened."""

    server_properties: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LoginRefused(Event):
    """Connection.Close 403 during the handshake (bad credentials, with RabbitMQ's
    authentication_failure_close); Close-Ok is queued and the connection is over.

    Kept apart from `ConnectionClosedByPeer` because retrying cannot help.
    """

    reply_text: str


@dataclass(frozen=True, slots=True)
class ConnectionClosedByPeer(Event):
    """The server closed the connection; Close-Ok is queued and the connection is over."""

    reply_code: int
    reply_text: str


@dataclass(frozen=True, slots=True)
class ChannelClosedByPeer(Event):
    """The server closed a channel; Close-Ok is queued and the id is free again."""

    channel: int
    reply_code: int
    reply_text: str


@dataclass(slots=True)
class MessageDelivered(Event):
    """Basic.Deliver with its whole content: a message for one of our consumers."""

    channel: int
    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    content: Content


@dataclass(frozen=True, slots=True)
class MessageGot(Event):
    """Basic.Get-Ok with its whole content (Basic.Get-Empty is a `MethodReceived`)."""

    channel: int
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    message_count: int
    content: Content


@dataclass(frozen=True, slots=True)
class MessageReturned(Event):
    """Basic.Return with its whole content: a mandatory publish nobody could take."""

    channel: int
    reply_code: int
    reply_text: str
    exchange: str
    routing_key: str
    content: Content


@dataclass(frozen=True, slots=True)
class Acked(Event):
    """A publisher confirm: publishes up to `delivery_tag` (all, if `multiple`) are safe."""

    channel: int
    delivery_tag: int
    multiple: bool


@dataclass(frozen=True, slots=True)
class Nacked(Event):
    """A negative publisher confirm: the server lost or refused those publishes."""

    channel: int
    delivery_tag: int
    multiple: bool
