"""What `ServerConnection.next_event()` returns: frozen, slotted dataclasses, h11 style.

Events carry decoded values only; the connection has already answered whatever the protocol
answers by itself (Channel.Open-Ok, Close-Ok, the Close for a peer's mistake), so the server
only has to act on the meaning.
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
        return self.value

    __str__ = __repr__


#: Returned by `next_event()` when a whole event needs more bytes than have been received.
NEED_DATA: Final = _Sentinel.NEED_DATA
NeedData = Literal[_Sentinel.NEED_DATA]


class Event:
    """Base class of every event."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ProtocolHeaderRejected(Event):
    """The peer did not open with AMQP 0-9-1's header; ours is queued, and the connection is over."""

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
class VhostRequested(Event):
    """Connection.Open: answer with `accept_open()` or `close_connection(error)`."""

    vhost: str


@dataclass(frozen=True, slots=True)
class ChannelOpened(Event):
    """Channel.Open; Open-Ok is already queued."""

    channel: int


@dataclass(frozen=True, slots=True)
class ChannelCloseRequested(Event):
    """The client closed a channel; Close-Ok is already queued and the id is free again."""

    channel: int


@dataclass(frozen=True, slots=True)
class ChannelClosed(Event):
    """The client acknowledged our Channel.Close; the id is free again."""

    channel: int


@dataclass(frozen=True, slots=True)
class MethodReceived(Event):
    """Any other client method on an open channel, as a pamqp object (Basic.Ack included)."""

    channel: int
    method: base.Frame


@dataclass(frozen=True, slots=True)
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
    """The connection is over: our Close was acknowledged, or the socket reached EOF."""


@dataclass(frozen=True, slots=True)
class ProtocolErrorOccurred(Event):
    """The peer broke the protocol. The matching Close is already queued.

    `channel` is 0 when the error closes the connection (`error.connection_level`, or any error
    on channel 0): the server should then stop feeding the broker and wait, bounded, for
    `ConnectionClosed`. Otherwise only that channel is closing.
    """

    error: AMQPError
    channel: int
