"""The server side's connection and channel state machines, as data.

Rule 1 (borrowed from h11): everything that decides whether a frame is acceptable lives in
this file, so the rules can be read, tested and turned into docs without reading the parser.
Rule 2: this file does no I/O and keeps no per-connection state; `connection.py` holds the
current states and consults these tables.

Keys of the incoming tables are pamqp classes: method classes, plus `ContentHeader` and
`ContentBody` for content frames. A key missing from a state's table means the frame is a
protocol error in that state; the `*_refusal` functions at the end say which one.
"""

from __future__ import annotations

import enum
from typing import Any

from pamqp import base, commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from gateway.wire.errors import (
    AMQPError,
    channel_error,
    command_invalid,
    unexpected_frame,
)


class ConnectionState(enum.Enum):
    """Where the connection (channel 0) is in its life, from the server's point of view."""

    AWAIT_PROTOCOL_HEADER = "AWAIT_PROTOCOL_HEADER"
    AWAIT_START_OK = "AWAIT_START_OK"
    AWAIT_LOGIN = "AWAIT_LOGIN"  # LoginRequested returned; the server decides
    AWAIT_TUNE_OK = "AWAIT_TUNE_OK"
    AWAIT_OPEN = "AWAIT_OPEN"
    AWAIT_VHOST = "AWAIT_VHOST"  # VhostRequested returned; the server decides
    OPEN = "OPEN"
    CLOSING = "CLOSING"  # we sent Connection.Close; only Close-Ok (or Close) matters now
    CLOSED = "CLOSED"

    # Members are singletons compared by identity: identity hashing is equivalent, and skips
    # Enum's Python-level __hash__ on every table lookup of the frame hot path.
    __hash__ = object.__hash__


class ChannelState(enum.Enum):
    """A channel's state. Channels that are not open are simply absent (CLOSED)."""

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    AWAIT_HEADER = "AWAIT_HEADER"  # a Basic.Publish arrived; its content header must follow
    AWAIT_BODY = "AWAIT_BODY"  # body frames until the declared size is reached
    CLOSING = "CLOSING"  # we sent Channel.Close; everything but Close / Close-Ok is ignored

    __hash__ = object.__hash__  # as in ConnectionState


_C = ConnectionState
_Ch = ChannelState

#: Connection-class methods a client may send, per state, and the state each leads to.
CONNECTION_INCOMING: dict[ConnectionState, dict[type, ConnectionState]] = {
    _C.AWAIT_START_OK: {commands.Connection.StartOk: _C.AWAIT_LOGIN},
    _C.AWAIT_LOGIN: {},
    _C.AWAIT_TUNE_OK: {commands.Connection.TuneOk: _C.AWAIT_OPEN},
    _C.AWAIT_OPEN: {commands.Connection.Open: _C.AWAIT_VHOST},
    _C.AWAIT_VHOST: {},
    _C.OPEN: {commands.Connection.UpdateSecret: _C.OPEN},
    _C.CLOSING: {commands.Connection.CloseOk: _C.CLOSED},
}
# A client may give up at any point of the handshake or later: Close ends the connection
# (we answer Close-Ok); in CLOSING it crosses our own Close and ends it as well.
for _table in CONNECTION_INCOMING.values():
    _table[commands.Connection.Close] = _C.CLOSED

#: Connection-class methods the server sends, per state, and the state each leads to.
CONNECTION_OUTGOING: dict[ConnectionState, dict[type, ConnectionState]] = {
    _C.AWAIT_PROTOCOL_HEADER: {commands.Connection.Start: _C.AWAIT_START_OK},
    _C.AWAIT_START_OK: {},
    _C.AWAIT_LOGIN: {commands.Connection.Tune: _C.AWAIT_TUNE_OK},
    _C.AWAIT_TUNE_OK: {},
    _C.AWAIT_OPEN: {},
    _C.AWAIT_VHOST: {commands.Connection.OpenOk: _C.OPEN},
    _C.OPEN: {commands.Connection.UpdateSecretOk: _C.OPEN},
}
for _state, _table in CONNECTION_OUTGOING.items():
    if _state is not _C.AWAIT_PROTOCOL_HEADER:  # nothing may precede Connection.Start
        _table[commands.Connection.Close] = _C.CLOSING

#: Methods a client sends on an open channel that the broker handles (MethodReceived).
#: Basic.CancelOk answers our consumer-cancel notification; Channel.FlowOk answers our Flow.
CLIENT_CHANNEL_METHODS: frozenset[type] = frozenset(
    {
        commands.Channel.Flow,
        commands.Channel.FlowOk,
        commands.Exchange.Declare,
        commands.Exchange.Delete,
        commands.Exchange.Bind,
        commands.Exchange.Unbind,
        commands.Queue.Declare,
        commands.Queue.Bind,
        commands.Queue.Purge,
        commands.Queue.Delete,
        commands.Queue.Unbind,
        commands.Basic.Qos,
        commands.Basic.Consume,
        commands.Basic.Cancel,
        commands.Basic.CancelOk,
        commands.Basic.Get,
        commands.Basic.Ack,
        commands.Basic.Reject,
        commands.Basic.RecoverAsync,
        commands.Basic.Recover,
        commands.Basic.Nack,
        commands.Confirm.Select,
        commands.Tx.Select,
        commands.Tx.Commit,
        commands.Tx.Rollback,
    }
)

#: Frames accepted on a channel in each state, and the state each leads to. Two transitions
#: depend on sizes and are made by the connection: a content header with body size 0, and the
#: body frame that completes the declared size, lead back to OPEN.
CHANNEL_INCOMING: dict[ChannelState, dict[type, ChannelState]] = {
    _Ch.CLOSED: {commands.Channel.Open: _Ch.OPEN},
    _Ch.OPEN: {
        commands.Channel.Close: _Ch.CLOSED,
        commands.Basic.Publish: _Ch.AWAIT_HEADER,
        **{method: _Ch.OPEN for method in CLIENT_CHANNEL_METHODS},
    },
    _Ch.AWAIT_HEADER: {ContentHeader: _Ch.AWAIT_BODY},
    _Ch.AWAIT_BODY: {ContentBody: _Ch.AWAIT_BODY},
    # Crossing closes: the client's Close is answered with Close-Ok and we keep waiting
    # for the Close-Ok to our own Close (as RabbitMQ does).
    _Ch.CLOSING: {commands.Channel.CloseOk: _Ch.CLOSED, commands.Channel.Close: _Ch.CLOSING},
}

#: States in which frames missing from the table are dropped silently instead of being errors:
#: the peer may have sent them before it saw our Close.
IGNORING_STATES: frozenset[ChannelState] = frozenset({_Ch.CLOSING})

#: Channel states in which the broker may send to the channel.
SENDABLE_STATES: frozenset[ChannelState] = frozenset({_Ch.OPEN, _Ch.AWAIT_HEADER, _Ch.AWAIT_BODY})


def _client_methods() -> frozenset[type]:
    methods: set[type] = set(CLIENT_CHANNEL_METHODS)
    tables: list[dict[type, Any]] = [*CONNECTION_INCOMING.values(), *CHANNEL_INCOMING.values()]
    for table in tables:
        methods.update(key for key in table if issubclass(key, base.Frame))
    return frozenset(methods)


#: Every method class a client may send; any other known method is server-only (503).
CLIENT_METHODS = _client_methods()


# Which error a refused frame gets. Codes follow RabbitMQ where it answers at all, else the
# spec: 503 for methods only servers send or methods out of sequence, 504 for channels that are
# not open (and channel 0 used for anything but the connection), 505 for content out of order.
# (540 for methods we do not know is the decoder's: frames.decode_method.)


def _class_id(method: base.Frame) -> int:
    return method.index >> 16


def connection_refusal(state: ConnectionState, method: base.Frame) -> AMQPError:
    """The error for a method on channel 0 that CONNECTION_INCOMING[state] does not allow."""
    kind = type(method)
    if kind not in CLIENT_METHODS:
        return command_invalid(f"{method.name} is sent by servers only", method)
    if _class_id(method) != commands.Connection.frame_id:
        return channel_error(f"{method.name} on channel 0, which carries only connection methods", method)
    return command_invalid(f"{method.name} is not expected in connection state {state.value.lower()}", method)


def channel_refusal(channel: int, state: ChannelState, method: base.Frame) -> AMQPError:
    """The error for a method that CHANNEL_INCOMING[state] does not allow on `channel`."""
    kind = type(method)
    name = method.name
    if _class_id(method) == commands.Connection.frame_id:
        return command_invalid(f"{name} on channel {channel}; connection methods use channel 0", method)
    if state is _Ch.CLOSED:
        return channel_error(f"{name} on channel {channel}, which is not open", method)
    if kind not in CLIENT_METHODS:
        return command_invalid(f"{name} is sent by servers only", method)
    if kind is commands.Channel.Open:
        return channel_error(f"channel {channel} is already open", method)
    if state is _Ch.AWAIT_HEADER:
        return unexpected_frame(f"expected a content header on channel {channel}, got {name}", method)
    if state is _Ch.AWAIT_BODY:
        return unexpected_frame(f"expected a content body on channel {channel}, got {name}", method)
    return command_invalid(f"{name} is not expected on channel {channel} now", method)


def content_refusal(channel: int, state: ChannelState, kind: type) -> AMQPError:
    """The error for a content frame (`kind`) that CHANNEL_INCOMING[state] does not allow."""
    got = "a content header" if kind is ContentHeader else "a content body"
    if state is _Ch.OPEN:
        expected = "a method (no Basic.Publish is waiting for content)"
    elif state is _Ch.AWAIT_HEADER:
        expected = "a content header"
    else:
        expected = "a content body"
    return unexpected_frame(f"expected {expected} on channel {channel}, got {got}", commands.Basic.Publish)
