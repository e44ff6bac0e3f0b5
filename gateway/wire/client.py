"""The client side of an AMQP 0-9-1 connection, sans I/O: what federation links speak.

Theory of operation
-------------------
`ClientConnection` mirrors `ServerConnection`: the Trio layer feeds it what the socket
produced (`receive_data`), pulls events until `NEED_DATA` (`next_event`), and writes what it
queued (`data_to_send`). The protocol header is queued at construction, and the handshake runs
by itself: Start is answered with Start-Ok (PLAIN), Tune with Tune-Ok and Open, and Open-Ok
becomes `ConnectionOpened`. Channel.Flow, Channel.Close and Connection.Close from the server
are answered here too, so the Trio layer only sees meaning.

Framing and the content codec are `frames.py`'s, shared with the server: the same frame
checks, the same content-header walk, and hand-made structs for the hot path (Basic.Publish
and Basic.Ack out; Basic.Deliver, its content frames and confirms in). A delivery's header and
body frames are taken in the same step as its method when they are already buffered.

The acceptable frames per state are the tables below, as data (h11's rule 1; the server's live
in `states.py`).

Error handling: the server's mistakes never raise out of `next_event`. Every error a client
can detect is connection-level (framing 501, syntax 502, out of sequence 503, channel misuse
504, content order 505, unknown methods 540): Connection.Close is queued and
`ProtocolErrorOccurred(error, 0)` returned; then only Close-Ok (or a crossing Close) is read,
and nothing at all after a framing error. Our own misuse raises `LocalProtocolError`; sends to
a channel that is closing or gone are dropped, as the server may have closed it meanwhile.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from pamqp import base, commands

from gateway.names import DEFAULT_VHOST
from gateway.wire import frames
from gateway.wire.connection import FrameIO, LocalProtocolError, Negotiated
from gateway.wire.content import Content
from gateway.wire.errors import AMQPError, channel_error, command_invalid, unexpected_frame
from gateway.wire.events import (
    NEED_DATA,
    Acked,
    ChannelClosed,
    ChannelClosedByPeer,
    ChannelOpened,
    ConnectionClosed,
    ConnectionClosedByPeer,
    ConnectionOpened,
    Event,
    HeartbeatReceived,
    LoginRefused,
    MessageDelivered,
    MessageGot,
    MessageReturned,
    MethodReceived,
    Nacked,
    NeedData,
    ProtocolErrorOccurred,
    ProtocolHeaderRejected,
)

NextEvent = Event | NeedData

_C = commands.Connection
_Ch = commands.Channel
_B = commands.Basic


class ClientState(enum.Enum):
    """Where the connection (channel 0) is, from the client's point of view."""

    AWAIT_START = "AWAIT_START"  # protocol header sent
    AWAIT_TUNE = "AWAIT_TUNE"  # Start-Ok sent
    AWAIT_OPEN_OK = "AWAIT_OPEN_OK"  # Tune-Ok and Open sent
    OPEN = "OPEN"
    CLOSING = "CLOSING"  # we sent Connection.Close; only Close-Ok (or Close) matters now
    CLOSED = "CLOSED"

    __hash__ = object.__hash__  # identity hashing, as in states.ConnectionState


class ClientChannelState(enum.Enum):
    """A channel's state. Channels that are not open are absent (CLOSED)."""

    CLOSED = "CLOSED"
    OPENING = "OPENING"  # Channel.Open sent
    OPEN = "OPEN"
    AWAIT_HEADER = "AWAIT_HEADER"  # a Deliver, Get-Ok or Return arrived; its header must follow
    AWAIT_BODY = "AWAIT_BODY"
    CLOSING = "CLOSING"  # we sent Channel.Close; everything but Close / Close-Ok is ignored

    __hash__ = object.__hash__


_S = ClientState
_CS = ClientChannelState

#: Connection-class methods a server may send, per state, and the state each leads to.
CLIENT_CONNECTION_INCOMING: dict[ClientState, dict[type, ClientState]] = {
    _S.AWAIT_START: {_C.Start: _S.AWAIT_TUNE},
    _S.AWAIT_TUNE: {_C.Tune: _S.AWAIT_OPEN_OK, _C.Close: _S.CLOSED},
    _S.AWAIT_OPEN_OK: {_C.OpenOk: _S.OPEN, _C.Close: _S.CLOSED},
    _S.OPEN: {_C.Close: _S.CLOSED, _C.Blocked: _S.OPEN, _C.Unblocked: _S.OPEN},
    _S.CLOSING: {_C.CloseOk: _S.CLOSED, _C.Close: _S.CLOSED},
}

#: Methods a server sends on an open channel that need no state change: replies, confirms,
#: and notifications (consumer cancel, flow).
SERVER_CHANNEL_METHODS: frozenset[type] = frozenset(
    {
        _Ch.Flow,
        _Ch.FlowOk,
        commands.Exchange.DeclareOk,
        commands.Exchange.DeleteOk,
        commands.Exchange.BindOk,
        commands.Exchange.UnbindOk,
        commands.Queue.DeclareOk,
        commands.Queue.BindOk,
        commands.Queue.PurgeOk,
        commands.Queue.DeleteOk,
        commands.Queue.UnbindOk,
        _B.QosOk,
        _B.ConsumeOk,
        _B.Cancel,
        _B.CancelOk,
        _B.GetEmpty,
        _B.Ack,
        _B.Nack,
        _B.RecoverOk,
        commands.Confirm.SelectOk,
        commands.Tx.SelectOk,
        commands.Tx.CommitOk,
        commands.Tx.RollbackOk,
    }
)

#: Methods that carry content: a content header (and body frames) must follow each.
CONTENT_METHODS: frozenset[type] = frozenset({_B.Deliver, _B.GetOk, _B.Return})

#: Frames accepted on a channel per state, and the state each leads to. As on the server, the
#: header of an empty body and the body frame completing the size lead back to OPEN.
CLIENT_CHANNEL_INCOMING: dict[ClientChannelState, dict[type, ClientChannelState]] = {
    _CS.OPENING: {_Ch.OpenOk: _CS.OPEN, _Ch.Close: _CS.CLOSED},
    _CS.OPEN: {
        _Ch.Close: _CS.CLOSED,
        **{method: _CS.AWAIT_HEADER for method in CONTENT_METHODS},
        **{method: _CS.OPEN for method in SERVER_CHANNEL_METHODS},
    },
    _CS.AWAIT_HEADER: {},
    _CS.AWAIT_BODY: {},
    # A crossing Close is answered, and we keep waiting for the Close-Ok to ours.
    _CS.CLOSING: {_Ch.CloseOk: _CS.CLOSED, _Ch.Close: _CS.CLOSING},
}

#: Channel states in which the Trio layer may send.
_SENDABLE = frozenset({_CS.OPENING, _CS.OPEN, _CS.AWAIT_HEADER, _CS.AWAIT_BODY})

#: What a server-sent content method becomes once its content is whole.
_CONTENT_EVENTS: dict[type, Callable[..., Event]] = {
    _B.Deliver: MessageDelivered,
    _B.GetOk: MessageGot,
    _B.Return: MessageReturned,
}


def default_client_properties() -> dict[str, Any]:
    """Start-Ok's client properties: the capabilities make servers (ours and RabbitMQ) send
    confirms and nacks, consumer-cancel notifications, Connection.Blocked, and a 403 Close
    instead of a dropped socket when the password is wrong."""
    from gateway import __version__  # late, as in server_properties

    return {
        "product": "amq-gateway federation",
        "version": __version__,
        "platform": "Python",
        "capabilities": {
            "publisher_confirms": True,
            "consumer_cancel_notify": True,
            "basic.nack": True,
            "connection.blocked": True,
            "authentication_failure_close": True,
        },
    }


class _Channel:
    """A channel's state, and the content being assembled on it."""

    __slots__ = ("state", "method", "fields", "content", "remaining", "chunks")

    def __init__(self) -> None:
        self.state = _CS.OPENING
        self.method: type = _B.Deliver  # the content method being assembled
        self.fields: tuple[Any, ...] = ()  # its event's fields before the content
        self.content: Content | None = None
        self.remaining = 0
        self.chunks: list[bytearray] = []


class ClientConnection(FrameIO):
    """One connection to a server, client role. See the module docstring for the theory.

    Args:
        username, password: PLAIN credentials.
        mechanism: "PLAIN", or "EXTERNAL" over TLS with a client certificate, which names
            the user (the credentials are not sent).
        vhost: opened with Connection.Open once tuned.
        client_properties: merged over `default_client_properties()` (a "capabilities" table
            given here replaces the default one).
        frame_max, channel_max: our limits; Tune-Ok takes the lower non-zero of ours and the
            server's.
        heartbeat: the interval we ask for in seconds, 0 for none; servers take the client's.
    """

    def __init__(
        self,
        username: str = "guest",
        password: str = "guest",
        vhost: str = DEFAULT_VHOST,
        *,
        client_properties: dict[str, Any] | None = None,
        frame_max: int = 131072,
        channel_max: int = 2047,
        heartbeat: int = 60,
        mechanism: str = "PLAIN",
    ) -> None:
        if not frames.FRAME_MIN_SIZE <= frame_max <= 0xFFFFFFFF:
            raise ValueError(f"frame_max must be between 4096 and 2**32 - 1, not {frame_max}")
        if not 1 <= channel_max <= 0xFFFF:
            raise ValueError(f"channel_max must be between 1 and 65535, not {channel_max}")
        if not 0 <= heartbeat <= 0xFFFF:
            raise ValueError(f"heartbeat must be between 0 and 65535, not {heartbeat}")
        if mechanism not in ("PLAIN", "EXTERNAL"):
            raise ValueError(f"mechanism must be PLAIN or EXTERNAL, not {mechanism!r}")
        self.state = ClientState.AWAIT_START
        self.negotiated: Negotiated | None = None
        self.server_properties: dict[str, Any] = {}
        self._mechanism = mechanism
        # EXTERNAL's response is an authorization identity: empty, the certificate's user.
        self._credentials = f"\x00{username}\x00{password}" if mechanism == "PLAIN" else ""
        self._vhost = vhost
        self._client_properties = {**default_client_properties(), **(client_properties or {})}
        self._wanted = Negotiated(channel_max, frame_max, heartbeat)
        self._frame_max = frame_max  # ours until Tune, then the negotiated value
        self._channel_max = channel_max
        self._channels: dict[int, _Channel] = {}
        super().__init__()
        self._queue(frames.PROTOCOL_HEADER)

    # ------------------------------------------------------------------ input

    def _input_wanted(self) -> bool:
        return self.state is not ClientState.CLOSED

    def next_event(self) -> NextEvent:
        """The next event, or NEED_DATA. Never raises for the server's mistakes."""
        while True:
            if self.state is ClientState.CLOSED:
                return ConnectionClosed()
            try:
                event = self._step()
            except AMQPError as error:
                event = self._on_peer_error(error)
            if event is not None:
                return event

    def _step(self) -> NextEvent | None:
        """Consume at most one frame; None when it needs no event of its own."""
        if self._desynced:
            return self._no_frame()
        buf = self._buffer
        pos = self._pos
        if self.state is ClientState.AWAIT_START and len(buf) > pos and buf[pos] != frames.FRAME_METHOD:
            return self._foreign_answer()
        try:
            frame = frames.peek_frame(buf, pos, self._frame_max)
        except AMQPError:
            self._desync()
            raise
        if frame is None:
            return self._no_frame()
        frame_type, channel, end = frame
        self._pos = end + 1
        payload = buf[pos + 7 : end]
        if frame_type == frames.FRAME_METHOD:
            if channel == 0:
                return self._on_connection_method(payload)
            return self._on_channel_method(channel, payload)
        if self.state is ClientState.CLOSING:
            return None
        if frame_type == frames.FRAME_HEARTBEAT:
            frames.check_heartbeat(channel, len(payload))
            return HeartbeatReceived()
        return self._on_content_frame(frame_type, channel, payload)

    def _no_frame(self) -> NextEvent:
        """No whole frame is buffered: wait for more, or end if the server has closed."""
        if self._eof:
            self.state = ClientState.CLOSED
            return ConnectionClosed()
        return NEED_DATA

    def _foreign_answer(self) -> NextEvent:
        """The server answered our header with something other than a method frame: usually
        its own protocol header (another AMQP version). Up to 8 bytes of it are reported."""
        received = bytes(self._buffer[self._pos : self._pos + len(frames.PROTOCOL_HEADER)])
        if len(received) < len(frames.PROTOCOL_HEADER) and not self._eof:
            return NEED_DATA
        self.state = ClientState.CLOSED
        return ProtocolHeaderRejected(received)

    # --------------------------------------------------------- connection (channel 0)

    def _on_connection_method(self, payload: bytearray) -> NextEvent | None:
        if self.state is ClientState.CLOSING:
            # Only the end of the closing handshake matters; its arguments do not.
            kind = commands.INDEX_MAPPING.get(frames.method_index(payload))
            if kind is _C.Close:
                self._queue(frames.encode_method(0, _C.CloseOk()))
            if kind not in CLIENT_CONNECTION_INCOMING[self.state]:
                return None
            self.state = ClientState.CLOSED
            return ConnectionClosed()
        method = frames.decode_method(payload)
        next_state = CLIENT_CONNECTION_INCOMING[self.state].get(type(method))
        if next_state is None:
            raise self._connection_refusal(method)
        event: Event | None = None
        if isinstance(method, _C.Start):
            self._on_start(method)
        elif isinstance(method, _C.Tune):
            self._on_tune(method)
        elif isinstance(method, _C.OpenOk):
            event = ConnectionOpened(self.server_properties)
        elif isinstance(method, _C.Close):
            event = self._on_close(method)
        else:
            event = MethodReceived(0, method)  # Blocked / Unblocked
        self.state = next_state
        return event

    def _connection_refusal(self, method: base.Frame) -> AMQPError:
        if method.index >> 16 != _C.frame_id:
            return channel_error(f"{method.name} on channel 0, which carries only connection methods", method)
        return command_invalid(
            f"{method.name} is not expected in client state {self.state.value.lower()}", method
        )

    def _on_start(self, method: commands.Connection.Start) -> None:
        self.server_properties = method.server_properties or {}
        start_ok = _C.StartOk(self._client_properties, self._mechanism, self._credentials, "en_US")
        self._queue(frames.encode_method(0, start_ok))

    def _on_tune(self, method: commands.Connection.Tune) -> None:
        """Take the lower non-zero limit of each side; the heartbeat is ours (0: none)."""
        wanted = self._wanted
        channel_max = _lower_nonzero(wanted.channel_max, method.channel_max)
        frame_max = _lower_nonzero(wanted.frame_max, method.frame_max)
        self.negotiated = Negotiated(channel_max, frame_max, wanted.heartbeat)
        self._channel_max = channel_max
        self._frame_max = frame_max
        self._queue(frames.encode_method(0, _C.TuneOk(channel_max, frame_max, wanted.heartbeat)))
        self._queue(frames.encode_method(0, frames.make_method(_C.Open, virtual_host=self._vhost)))

    def _on_close(self, method: commands.Connection.Close) -> Event:
        self._queue(frames.encode_method(0, _C.CloseOk()))
        if method.reply_code == 403 and self.state is not ClientState.OPEN:
            return LoginRefused(method.reply_text)
        return ConnectionClosedByPeer(method.reply_code or 0, method.reply_text)

    # ------------------------------------------------------------------ channels

    def _channel(self, channel: int, what: str) -> _Channel:
        """The open (or opening, or closing) channel a frame is for; 504 otherwise."""
        if self.state is not ClientState.OPEN:
            raise channel_error(f"{what} on channel {channel} before the connection is open")
        ch = self._channels.get(channel)
        if ch is None:
            raise channel_error(f"{what} on channel {channel}, which is not open")
        return ch

    def _on_channel_method(self, channel: int, payload: bytearray) -> NextEvent | None:
        if self.state is ClientState.CLOSING:
            return None
        index = frames.method_index(payload)
        ch = self._channel(channel, "a method")
        state = ch.state
        if state is _CS.OPEN:  # the hot path: deliveries and confirms
            if index == frames.DELIVER_INDEX:
                ch.fields = (channel, *frames.decode_deliver(payload))
                ch.method = _B.Deliver
                ch.state = _CS.AWAIT_HEADER
                return self._buffered_content(channel, ch)
            if index == frames.ACK_INDEX:
                ack = frames.decode_ack(payload)
                return Acked(channel, ack.delivery_tag, ack.multiple)
        kind = commands.INDEX_MAPPING.get(index)
        if state is _CS.CLOSING and kind not in CLIENT_CHANNEL_INCOMING[state]:
            return None
        method = frames.decode_method(payload)
        next_state = CLIENT_CHANNEL_INCOMING[state].get(type(method))
        if next_state is None:
            raise _channel_refusal(channel, state, method)
        ch.state = next_state
        if next_state is _CS.CLOSED:
            del self._channels[channel]
        return self._on_channel_event(channel, ch, method)

    def _on_channel_event(self, channel: int, ch: _Channel, method: base.Frame) -> NextEvent | None:
        """The event for an accepted channel method (its new state is already set)."""
        kind = type(method)
        if kind in CONTENT_METHODS:
            ch.method = kind
            ch.fields = (channel, *(getattr(method, name) for name in method.__slots__))
            return self._buffered_content(channel, ch)
        if kind is _Ch.OpenOk:
            return ChannelOpened(channel)
        if kind is _Ch.CloseOk:
            return ChannelClosed(channel)
        if isinstance(method, _Ch.Close):
            self._queue(frames.encode_method(channel, _Ch.CloseOk()))
            if ch.state is _CS.CLOSING:  # crossed our own Close, whose Close-Ok is still due
                return None
            return ChannelClosedByPeer(channel, method.reply_code or 0, method.reply_text)
        if isinstance(method, _B.Nack):
            return Nacked(channel, method.delivery_tag, method.multiple)
        if isinstance(method, _Ch.Flow):
            self._queue(frames.encode_method(channel, _Ch.FlowOk(method.active)))
        return MethodReceived(channel, method)

    # ------------------------------------------------------------------ content

    def _buffered_content(self, channel: int, ch: _Channel) -> NextEvent | None:
        """Take the content frames that follow a content method now, if they are buffered
        (see `frames.take_frame`); at the first other frame `_step` carries on."""
        payload = self._take_frame(frames.FRAME_HEADER, channel)
        if payload is None:
            return None
        event = self._take_header(ch, payload)
        while event is None and (payload := self._take_frame(frames.FRAME_BODY, channel)) is not None:
            event = self._take_body(ch, payload)
        return event

    def _take_frame(self, frame_type: int, channel: int) -> bytearray | None:
        payload = frames.take_frame(self._buffer, self._pos, frame_type, channel, self._frame_max)
        if payload is not None:
            self._pos += len(payload) + frames.FRAME_OVERHEAD
        return payload

    def _on_content_frame(self, frame_type: int, channel: int, payload: bytearray) -> NextEvent | None:
        is_header = frame_type == frames.FRAME_HEADER
        what = "a content header" if is_header else "a content body"
        if channel == 0:
            raise unexpected_frame(f"{what} frame on channel 0")
        ch = self._channel(channel, what)
        expected = _CS.AWAIT_HEADER if is_header else _CS.AWAIT_BODY
        if ch.state is not expected:
            if ch.state is _CS.CLOSING:
                return None
            raise unexpected_frame(f"{what} frame on channel {channel} in state {ch.state.value.lower()}")
        return self._take_header(ch, payload) if is_header else self._take_body(ch, payload)

    def _take_header(self, ch: _Channel, payload: bytearray) -> NextEvent | None:
        body_size, content = frames.decode_basic_header(payload, ch.method)
        if not body_size:
            return self._content_event(ch, content)
        ch.content = content
        ch.remaining = body_size
        ch.state = _CS.AWAIT_BODY
        return None

    def _take_body(self, ch: _Channel, payload: bytearray) -> NextEvent | None:
        size = len(payload)
        frames.check_body_frame(size, ch.remaining, ch.method)
        ch.chunks.append(payload)
        ch.remaining -= size
        if ch.remaining:
            return None
        content = ch.content
        assert content is not None  # set with AWAIT_BODY
        content.body = b"".join(ch.chunks)
        ch.content = None
        ch.chunks = []
        return self._content_event(ch, content)

    def _content_event(self, ch: _Channel, content: Content) -> Event:
        ch.state = _CS.OPEN
        return _CONTENT_EVENTS[ch.method](*ch.fields, content)

    # ------------------------------------------------------------------ errors

    def _on_peer_error(self, error: AMQPError) -> Event | None:
        """Queue Connection.Close for the server's mistake and describe it, once."""
        if self.state in (ClientState.CLOSING, ClientState.CLOSED):
            return None
        self.close(error.reply_code, error.reply_text, error.class_id, error.method_id)
        return ProtocolErrorOccurred(error, 0)

    # ------------------------------------------------------------------ output

    def is_channel_open(self, channel: int) -> bool:
        """True when the channel's Open-Ok arrived and it is not closing."""
        ch = self._channels.get(channel)
        return ch is not None and ch.state in _SENDABLE and ch.state is not _CS.OPENING

    def _sendable(self, channel: int) -> bool:
        """Whether to send on `channel` now; raises if the connection is not open yet."""
        if self.state is not ClientState.OPEN:
            if self.state in (ClientState.CLOSING, ClientState.CLOSED):
                return False
            raise LocalProtocolError(f"no channel can be used in client state {self.state.value}")
        ch = self._channels.get(channel)
        return ch is not None and ch.state in _SENDABLE

    def open_channel(self, channel: int) -> None:
        """Queue Channel.Open; `ChannelOpened(channel)` follows."""
        if self.state is not ClientState.OPEN:
            raise LocalProtocolError(f"open_channel() in client state {self.state.value}")
        if not 1 <= channel <= self._channel_max:
            raise LocalProtocolError(f"channel {channel} is outside 1..{self._channel_max}")
        if channel in self._channels:
            raise LocalProtocolError(f"channel {channel} is in use")
        self._channels[channel] = _Channel()
        self._queue(frames.encode_method(channel, _Ch.Open()))

    def close_channel(self, channel: int, reply_code: int = 200, reply_text: str = "Normal shutdown") -> None:
        """Queue Channel.Close; `ChannelClosed(channel)` follows. Dropped if already closing."""
        if self._sendable(channel):
            close = _Ch.Close(reply_code, frames.truncate_shortstr(reply_text), 0, 0)
            self._queue(frames.encode_method(channel, close))
            ch = self._channels[channel]
            ch.state = _CS.CLOSING
            ch.content, ch.chunks = None, []

    def close(
        self,
        reply_code: int = 200,
        reply_text: str = "Normal shutdown",
        class_id: int = 0,
        method_id: int = 0,
    ) -> None:
        """Queue Connection.Close; `ConnectionClosed` follows the Close-Ok. A no-op once closing."""
        if self.state in (ClientState.CLOSING, ClientState.CLOSED):
            return
        self._queue(
            frames.encode_method(
                0, _C.Close(reply_code, frames.truncate_shortstr(reply_text), class_id, method_id)
            )
        )
        self.state = ClientState.CLOSING

    def send_method(self, channel: int, method: base.Frame) -> None:
        """Queue any channel method; channels are opened and closed by their own calls."""
        if channel == 0 or method.index >> 16 == _C.frame_id:
            raise LocalProtocolError(f"{method.name}: the connection sends its own methods")
        if type(method) in (_Ch.Open, _Ch.OpenOk, _Ch.Close, _Ch.CloseOk):
            raise LocalProtocolError(f"{method.name}: use open_channel() / close_channel()")
        if self._sendable(channel):
            self._queue(frames.encode_method(channel, method))

    def send_publish(
        self, channel: int, exchange: str, routing_key: str, mandatory: bool, content: Content
    ) -> None:
        """Queue Basic.Publish with its content (the hot path: one bytes object per message)."""
        if self._sendable(channel):
            self._queue(
                frames.encode_publish(channel, exchange, routing_key, mandatory, content, self._frame_max)
            )

    def send_ack(self, channel: int, delivery_tag: int, multiple: bool = False) -> None:
        """Queue Basic.Ack for a delivery (the hot path)."""
        if self._sendable(channel):
            self._queue(frames.encode_ack(channel, delivery_tag, multiple))

    def send_heartbeat(self) -> None:
        """Queue a heartbeat frame (dropped once the connection is over)."""
        if self.state is not ClientState.CLOSED:
            self._queue(frames.HEARTBEAT_FRAME)


def _lower_nonzero(ours: int, theirs: int) -> int:
    """The lower of two limits where 0 means "no limit"."""
    if not ours or not theirs:
        return ours or theirs
    return min(ours, theirs)


def _channel_refusal(channel: int, state: ClientChannelState, method: base.Frame) -> AMQPError:
    """The error for a method CLIENT_CHANNEL_INCOMING[state] does not allow on `channel`."""
    name = method.name
    if method.index >> 16 == _C.frame_id:
        return command_invalid(f"{name} on channel {channel}; connection methods use channel 0", method)
    if state in (_CS.AWAIT_HEADER, _CS.AWAIT_BODY):
        return unexpected_frame(f"expected content on channel {channel}, got {name}", method)
    if type(method) not in SERVER_CHANNEL_METHODS | CONTENT_METHODS and state is _CS.OPEN:
        return command_invalid(f"{name} is sent by clients only", method)
    return command_invalid(
        f"{name} is not expected on channel {channel} in state {state.value.lower()}", method
    )
