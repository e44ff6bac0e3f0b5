"""The server side of an AMQP 0-9-1 connection, sans I/O.

Theory of operation
-------------------
`ServerConnection` is a pure state machine, like h11's `Connection`. The Trio layer feeds it
whatever the socket produced (`receive_data`), pulls events until `NEED_DATA`
(`next_event`), and writes whatever it queued (`data_to_send`). Nothing here blocks, sleeps,
or knows about sockets, so every behaviour is tested with bytes in and bytes out.

Input is a `bytearray` plus a read offset. A frame is looked at only once all of it is there:
the 7-byte header is peeked first, and a frame that is too big is refused before a single
payload byte is buffered (a peer cannot make us hold more than frame_max bytes of a frame).

What a frame may do is decided by the tables in `states.py`; this module holds the current
states and turns each verdict into an event or an error. The protocol answers itself where
the spec leaves no choice (Open-Ok, Close-Ok, and the Close that answers a peer's mistake), so
the server only sees meaning.

Error handling: a peer's mistake never raises out of `next_event`. It becomes an `AMQPError`,
scoped by `AMQPError.connection_level` (and anything on channel 0 is connection-level): the
matching Channel.Close or Connection.Close is queued, and `ProtocolErrorOccurred` is
returned. After a connection-level error only Connection.Close-Ok (or a crossing
Connection.Close) is still read; after a framing error even that is impossible, so input is
discarded and the server's bounded wait for Close-Ok ends the connection. Our own misuse (an
API call the state forbids) raises `LocalProtocolError`; sends to channels that are closed or
closing are dropped silently, because the broker may race with a close it has not seen yet.

Hot path: Basic.Publish, content header, body frames and Basic.Ack are decoded by hand in
`frames.py`, and deliveries are encoded there as one bytes object per message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pamqp import base, commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from gateway.names import GATEWAY_PRODUCT
from gateway.wire import frames
from gateway.wire.content import Content
from gateway.wire.errors import (
    AMQPError,
    channel_error,
    command_invalid,
    not_allowed,
    precondition_failed,
    unexpected_frame,
)
from gateway.wire.events import (
    NEED_DATA,
    ChannelClosed,
    ChannelCloseRequested,
    ChannelOpened,
    ConnectionClosed,
    ConnectionCloseRequested,
    Event,
    HeartbeatReceived,
    LoginRequested,
    MessageReceived,
    MethodReceived,
    NeedData,
    ProtocolErrorOccurred,
    ProtocolHeaderRejected,
    SecretUpdateRequested,
    VhostRequested,
)
from gateway.wire.states import (
    CHANNEL_INCOMING,
    CONNECTION_INCOMING,
    CONNECTION_OUTGOING,
    IGNORING_STATES,
    SENDABLE_STATES,
    ChannelState,
    ConnectionState,
    channel_refusal,
    connection_refusal,
    content_refusal,
)

NextEvent = Event | NeedData

_CONNECTION_CLASS = commands.Connection.frame_id
_START_OK_IDS = (_CONNECTION_CLASS, commands.Connection.StartOk.frame_id)
#: Methods the broker must not send through `send_method`: they change state kept here.
_STATEFUL_CHANNEL_METHODS = frozenset(
    {
        commands.Channel.Open,
        commands.Channel.OpenOk,
        commands.Channel.Close,
        commands.Channel.CloseOk,
    }
)


def _longstr_bytes(value: str | bytes) -> bytes:
    """A longstr exactly as sent: pamqp hands one over as str when it happens to be valid UTF-8
    and as bytes otherwise; encoding the str back as UTF-8 restores the bytes."""
    return value.encode() if isinstance(value, str) else bytes(value)


#: RabbitMQ's default max_message_size: the largest body a content header may announce.
DEFAULT_MAX_MESSAGE_SIZE = 128 * 1024 * 1024


class LocalProtocolError(Exception):
    """Our own code asked for something the connection's state does not allow."""


@dataclass(frozen=True, slots=True)
class Negotiated:
    """The limits agreed by Connection.Tune / Tune-Ok."""

    channel_max: int
    frame_max: int
    heartbeat: int


#: What Connection.Start's "capabilities" table announces: RabbitMQ's names, so clients enable
#: the extensions we implement. docs/amqp.md lists them (a test holds the two together);
#: `direct_reply_to` is announced false because there is no direct reply-to.
CAPABILITIES: dict[str, bool] = {
    "publisher_confirms": True,
    "consumer_cancel_notify": True,
    "basic.nack": True,
    "exchange_exchange_bindings": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": False,
}


def server_properties(node_name: str | None = None) -> dict[str, Any]:
    """The Connection.Start properties a node announces, which clients log and check
    capabilities in (docs/amqp.md, "Connection.Start").

    Args:
        node_name: announced as `cluster_name` (what RabbitMQ clients show as the broker's
            name); left out when None, as for a bare `ServerConnection()`.

    Returns:
        A new dict (the caller may change it): product, version, platform, copyright,
        information, cluster_name when named, and a copy of `CAPABILITIES`.
    """
    from gateway import (
        __version__,  # late: gateway/__init__ may one day import from wire
    )

    properties: dict[str, Any] = {
        "product": GATEWAY_PRODUCT,
        "version": __version__,
        "platform": "Python/Trio",
    }
    if node_name is not None:
        properties["cluster_name"] = node_name
    properties["copyright"] = "amq-gateway contributors"
    properties["information"] = "AMQP 0-9-1 federation and routing gateway"
    properties["capabilities"] = dict(CAPABILITIES)
    return properties


#: ServerConnection's default, under a name its `server_properties` argument does not shadow.
_default_server_properties = server_properties


class FrameIO:
    """The byte plumbing both roles share, h11 style: `receive_data` buffers what the socket
    produced (a bytearray and a read offset, compacted once per read), `data_to_send` hands
    over everything queued. Subclasses parse `_buffer` from `_pos`, and `_input_wanted` says
    when further input is pointless (the connection is over)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._pos = 0
        self._eof = False
        self._desynced = False  # framing is lost: input is discarded from now on
        self._out: list[bytes] = []
        self._out_size = 0

    def receive_data(self, data: bytes) -> None:
        """Feed bytes from the socket; b"" means the peer closed its side."""
        if self._eof:
            raise LocalProtocolError("receive_data() after the peer's EOF")
        if not data:
            self._eof = True
        elif not self._desynced and self._input_wanted():
            if self._pos:  # compact once per read, not once per frame
                del self._buffer[: self._pos]
                self._pos = 0
            self._buffer += data

    def _input_wanted(self) -> bool:
        raise NotImplementedError

    def _desync(self) -> None:
        """Framing is lost: nothing more can be read."""
        self._desynced = True
        self._buffer.clear()
        self._pos = 0

    def data_to_send(self) -> bytes:
        """Everything queued for the peer, and forget it."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self._out_size = 0
        return data

    def pending_output(self) -> int:
        """Bytes queued and not yet taken by `data_to_send` (for back-pressure)."""
        return self._out_size

    def _queue(self, data: bytes) -> None:
        self._out.append(data)
        self._out_size += len(data)


class _PeerError(Exception):
    """Internal: the peer broke the protocol. `desync` means framing is lost for good."""

    def __init__(self, error: AMQPError, channel: int = 0, *, desync: bool = False) -> None:
        super().__init__(error)
        self.error = error
        self.channel = channel
        self.desync = desync


class _Channel:
    """A channel's state, and the publish being assembled on it."""

    __slots__ = ("state", "exchange", "routing_key", "mandatory", "immediate", "content",
                 "remaining", "chunks")  # fmt: skip

    def __init__(self) -> None:
        self.state = ChannelState.OPEN
        self.exchange = self.routing_key = ""
        self.mandatory = self.immediate = False
        self.content: Content | None = None
        self.remaining = 0
        self.chunks: list[bytearray] = []


class ServerConnection(FrameIO):
    """One client connection, server role. See the module docstring for the theory.

    Args:
        server_properties: Connection.Start's table; `server_properties()` if None.
        frame_max: the largest frame we accept and propose (at least 4096).
        channel_max: how many channels may be open at once, as proposed (1..65535).
        heartbeat: the heartbeat interval we propose, in seconds (0: none).
        mechanisms: SASL mechanisms announced and accepted.
        max_message_size: a larger declared body size closes the channel with 406, as
            RabbitMQ's max_message_size does, so one publish cannot take all our memory.
    """

    def __init__(
        self,
        server_properties: dict[str, Any] | None = None,
        *,
        frame_max: int = 131072,
        channel_max: int = 2047,
        heartbeat: int = 60,
        mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN"),
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    ) -> None:
        if not frames.FRAME_MIN_SIZE <= frame_max <= 0xFFFFFFFF:
            raise ValueError(f"frame_max must be between 4096 and 2**32 - 1, not {frame_max}")
        if not 1 <= channel_max <= 0xFFFF:
            raise ValueError(f"channel_max must be between 1 and 65535, not {channel_max}")
        if not 0 <= heartbeat <= 0xFFFF:
            raise ValueError(f"heartbeat must be between 0 and 65535, not {heartbeat}")
        self.state = ConnectionState.AWAIT_PROTOCOL_HEADER
        self.negotiated: Negotiated | None = None
        self.client_properties: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}
        self.username: str | None = None
        self._server_properties = (
            _default_server_properties() if server_properties is None else server_properties
        )
        self._mechanisms = mechanisms
        self._proposed = Negotiated(channel_max, frame_max, heartbeat)
        self._frame_max = frame_max  # the proposal until Tune-Ok, then the negotiated value
        self._channel_max = channel_max
        self._max_message_size = max_message_size
        self._channels: dict[int, _Channel] = {}
        #: Bytes of message bodies received and still unfinished, over all channels: they
        #: count toward the node's memory watermark before the message is whole.
        self.content_in_flight = 0
        #: Asked at each Channel.Open: a reason to refuse it (530, the connection closes), or
        #: None. The node sets it for users with a channel limit over all their connections.
        self.channel_gate: Callable[[], str | None] | None = None
        super().__init__()

    # ------------------------------------------------------------------ input

    def _input_wanted(self) -> bool:
        return self.state is not ConnectionState.CLOSED

    def next_event(self) -> NextEvent:
        """The next event, or NEED_DATA. Never raises for the peer's mistakes."""
        while True:
            if self.state is ConnectionState.CLOSED:
                return ConnectionClosed()
            try:
                event = self._step()
            except _PeerError as exc:
                event = self._on_peer_error(exc)
            except AMQPError as error:  # from the frame decoders: always connection-level
                event = self._on_peer_error(_PeerError(error))
            if event is not None:
                return event

    def _step(self) -> NextEvent | None:
        """Consume at most one frame; None when it needs no event of its own."""
        if self._desynced:
            return self._no_frame()
        if self.state is ConnectionState.AWAIT_PROTOCOL_HEADER:
            return self._read_protocol_header()
        buf = self._buffer
        pos = self._pos
        try:
            frame = frames.peek_frame(buf, pos, self._frame_max)
        except AMQPError as error:
            raise _PeerError(error, desync=True) from None
        if frame is None:
            return self._no_frame()
        frame_type, channel, end = frame
        self._pos = end + 1
        payload = buf[pos + 7 : end]
        if frame_type == frames.FRAME_METHOD:
            if channel == 0:
                return self._on_connection_method(payload)
            return self._on_channel_method(channel, payload)
        if self.state is ConnectionState.CLOSING:
            return None
        if frame_type == frames.FRAME_BODY:
            return self._on_body(channel, payload)
        if frame_type == frames.FRAME_HEADER:
            return self._on_header(channel, payload)
        frames.check_heartbeat(channel, len(payload))
        return HeartbeatReceived()

    def _no_frame(self) -> NextEvent:
        """No whole frame is buffered: wait for more, or end if the peer has closed."""
        if self._eof:
            self.state = ConnectionState.CLOSED
            return ConnectionClosed()
        return NEED_DATA

    def _read_protocol_header(self) -> NextEvent | None:
        """Wait for the 8-byte header, but reject a wrong one as soon as a byte differs."""
        received = bytes(self._buffer[self._pos : self._pos + 8])
        if not frames.PROTOCOL_HEADER.startswith(received):
            self._queue(frames.PROTOCOL_HEADER)
            self.state = ConnectionState.CLOSED
            return ProtocolHeaderRejected(received)
        if len(received) < 8:
            return self._no_frame()
        self._pos += 8
        start = commands.Connection.Start(
            server_properties=self._server_properties,
            mechanisms=" ".join(self._mechanisms),
            locales="en_US",
        )
        self._send_connection_method(start)
        return None

    # --------------------------------------------------------- connection (channel 0)

    def _on_connection_method(self, payload: bytearray) -> NextEvent | None:
        index = frames.method_index(payload)
        if self.state is ConnectionState.CLOSING:
            # Only the end of the closing handshake matters; its arguments do not.
            kind = commands.INDEX_MAPPING.get(index)
            if kind is None or kind not in CONNECTION_INCOMING[self.state]:
                return None
            if kind is commands.Connection.Close:
                self._queue(frames.encode_method(0, commands.Connection.CloseOk()))
            self.state = ConnectionState.CLOSED
            return ConnectionClosed()
        method = frames.decode_method(payload)
        kind = type(method)
        next_state = CONNECTION_INCOMING[self.state].get(kind)
        if next_state is None:
            raise _PeerError(connection_refusal(self.state, method))
        event: Event | None = None
        if isinstance(method, commands.Connection.StartOk):
            event = self._on_start_ok(method)
        elif isinstance(method, commands.Connection.TuneOk):
            self._on_tune_ok(method)
        elif isinstance(method, commands.Connection.Open):
            event = VhostRequested(method.virtual_host)
        elif isinstance(method, commands.Connection.UpdateSecret):
            # pamqp types both optional; a decoded method has them, possibly empty.
            event = SecretUpdateRequested(_longstr_bytes(method.new_secret or ""), method.reason or "")
        elif isinstance(method, commands.Connection.Close):
            self._queue(frames.encode_method(0, commands.Connection.CloseOk()))
            event = ConnectionCloseRequested(method.reply_code or 0, method.reply_text)
        self.state = next_state
        return event

    def _on_start_ok(self, method: commands.Connection.StartOk) -> LoginRequested:
        if method.mechanism not in self._mechanisms:
            # RabbitMQ's answer (the spec would drop the socket without a word).
            raise _PeerError(
                command_invalid(f"unknown authentication mechanism '{method.mechanism[:40]}'", method)
            )
        self.client_properties = method.client_properties or {}
        capabilities = self.client_properties.get("capabilities")
        self.client_capabilities = capabilities if isinstance(capabilities, dict) else {}
        return LoginRequested(method.mechanism, _longstr_bytes(method.response), self.client_properties)

    def _on_tune_ok(self, method: commands.Connection.TuneOk) -> None:
        """Zero means "the server's value" for channel_max and frame_max. A client may only go
        lower than our proposal; above it, or a frame_max below the spec's 4096, is refused
        with 530 NOT_ALLOWED as RabbitMQ does. Heartbeat is the client's choice (0: none)."""
        proposed = self._proposed
        channel_max = method.channel_max or proposed.channel_max
        frame_max = method.frame_max or proposed.frame_max
        for name, value, limit in (
            ("channel_max", channel_max, proposed.channel_max),
            ("frame_max", frame_max, proposed.frame_max),
        ):
            if value > limit:
                raise _PeerError(
                    not_allowed(
                        f"negotiated {name} = {value} is higher than the maximum allowed value ({limit})",
                        method,
                    )
                )
        if frame_max < frames.FRAME_MIN_SIZE:
            raise _PeerError(
                not_allowed(
                    f"negotiated frame_max = {frame_max} is lower than the minimum allowed value (4096)",
                    method,
                )
            )
        self.negotiated = Negotiated(channel_max, frame_max, method.heartbeat)
        self._channel_max = channel_max
        self._frame_max = frame_max

    # ------------------------------------------------------------------ channels

    def _channel(self, channel: int, index: int = 0) -> _Channel | None:
        """The channel's state if it exists (any id 1-65535: channel_max limits how many are
        open at once, as in RabbitMQ, not which ids they use). `index`: the method frame's, for
        the ids of the error (0: a content frame)."""
        if self.state is not ConnectionState.OPEN:
            raise _PeerError(
                channel_error(
                    f"channel {channel} used before the connection is open", commands.INDEX_MAPPING.get(index)
                )
            )
        return self._channels.get(channel)

    def _open_channel(self, channel: int, method: base.Frame) -> ChannelOpened:
        """Channel.Open, unless channel_max channels are open already (closing ones count
        until their Close-Ok), or `channel_gate` says why not: RabbitMQ's 530 and text."""
        count = len(self._channels)
        if count >= self._channel_max:
            raise _PeerError(
                not_allowed(
                    f"number of channels opened ({count}) has reached the negotiated channel_max "
                    f"({self._channel_max})",
                    method,
                )
            )
        refusal = self.channel_gate() if self.channel_gate is not None else None
        if refusal is not None:
            raise _PeerError(not_allowed(refusal, method))
        self._channels[channel] = _Channel()
        self._queue(frames.encode_method(channel, commands.Channel.OpenOk()))
        return ChannelOpened(channel)

    def _on_channel_method(self, channel: int, payload: bytearray) -> NextEvent | None:
        if self.state is ConnectionState.CLOSING:
            return None
        index = frames.method_index(payload)
        ch = self._channel(channel, index)
        state = ChannelState.CLOSED if ch is None else ch.state
        if index == frames.PUBLISH_INDEX and ch is not None and state is ChannelState.OPEN:
            # Fast path for CHANNEL_INCOMING[OPEN][Basic.Publish] -> AWAIT_HEADER.
            ch.exchange, ch.routing_key, ch.mandatory, ch.immediate = frames.decode_publish(payload)
            ch.state = ChannelState.AWAIT_HEADER
            return self._buffered_content(channel, ch)
        if state in IGNORING_STATES and commands.INDEX_MAPPING.get(index) not in CHANNEL_INCOMING[state]:
            return None
        method = frames.decode_ack(payload) if index == frames.ACK_INDEX else frames.decode_method(payload)
        kind = type(method)
        next_state = CHANNEL_INCOMING[state].get(kind)
        if next_state is None:
            raise _PeerError(channel_refusal(channel, state, method), channel)
        if kind is commands.Channel.Open:
            return self._open_channel(channel, method)
        if kind is commands.Channel.Close:
            self._queue(frames.encode_method(channel, commands.Channel.CloseOk()))
            if next_state is ChannelState.CLOSING:  # crossed our own Close
                return None
            del self._channels[channel]
            return ChannelCloseRequested(channel)
        if kind is commands.Channel.CloseOk:
            del self._channels[channel]
            return ChannelClosed(channel)
        return MethodReceived(channel, method)

    def _content_channel(self, channel: int, kind: type) -> _Channel | None:
        """The channel a content frame continues; None when the frame is to be dropped."""
        what = "content header" if kind is ContentHeader else "content body"
        if channel == 0:
            raise _PeerError(unexpected_frame(f"{what} frame on channel 0"))
        ch = self._channel(channel)
        if ch is None:
            raise _PeerError(channel_error(f"{what} frame on channel {channel}, which is not open"))
        if kind not in CHANNEL_INCOMING[ch.state]:
            if ch.state in IGNORING_STATES:
                return None
            raise _PeerError(content_refusal(channel, ch.state, kind))
        return ch

    def _buffered_content(self, channel: int, ch: _Channel) -> MessageReceived | None:
        """The publish fast path: take the content frames that follow a Basic.Publish now.

        A publish's header and body frames nearly always arrive in the same read as its
        method, and taking them here saves a trip through `next_event` and `_step` per frame.
        Only whole frames of the expected type on this channel that `_step` would accept as
        they are get taken; at the first other one this stops and `_step` carries on.
        """
        payload = self._next_frame(frames.FRAME_HEADER, channel)
        if payload is None:
            return None
        event = self._take_header(channel, ch, payload)
        while event is None and (payload := self._next_frame(frames.FRAME_BODY, channel)) is not None:
            event = self._take_body(channel, ch, payload)
        return event

    def _next_frame(self, frame_type: int, channel: int) -> bytearray | None:
        """Consume the buffered frame and return its payload if it is whole, of `frame_type`,
        on `channel` and within frame_max; otherwise leave it for `_step` and return None."""
        payload = frames.take_frame(self._buffer, self._pos, frame_type, channel, self._frame_max)
        if payload is not None:
            self._pos += len(payload) + frames.FRAME_OVERHEAD
        return payload

    def _on_header(self, channel: int, payload: bytearray) -> NextEvent | None:
        ch = self._content_channel(channel, ContentHeader)
        if ch is None:
            return None
        return self._take_header(channel, ch, payload)

    def _take_header(self, channel: int, ch: _Channel, payload: bytearray) -> MessageReceived | None:
        """The content header of the publish awaited on `ch`; the message if it has no body."""
        body_size, content = frames.decode_basic_header(payload, commands.Basic.Publish)
        if body_size > self._max_message_size:
            raise _PeerError(
                precondition_failed(
                    f"message size {body_size} is larger than configured max size {self._max_message_size}",
                    commands.Basic.Publish,
                ),
                channel,
            )
        if not body_size:
            return self._message(channel, ch, content)
        ch.content = content
        ch.remaining = body_size
        ch.state = ChannelState.AWAIT_BODY
        return None

    def _on_body(self, channel: int, payload: bytearray) -> NextEvent | None:
        ch = self._content_channel(channel, ContentBody)
        if ch is None:
            return None
        return self._take_body(channel, ch, payload)

    def _take_body(self, channel: int, ch: _Channel, payload: bytearray) -> MessageReceived | None:
        """A body frame of the publish awaited on `ch`; the message once the body is whole."""
        size = len(payload)
        frames.check_body_frame(size, ch.remaining, commands.Basic.Publish)
        ch.chunks.append(payload)
        ch.remaining -= size
        if ch.remaining:
            self.content_in_flight += size
            return None
        content = ch.content
        assert content is not None  # set with AWAIT_BODY
        chunks = ch.chunks
        content.body = bytes(chunks[0]) if len(chunks) == 1 else b"".join(chunks)
        self.content_in_flight -= len(content.body) - size
        ch.content = None
        ch.chunks = []
        return self._message(channel, ch, content)

    def _message(self, channel: int, ch: _Channel, content: Content) -> MessageReceived:
        ch.state = ChannelState.OPEN
        return MessageReceived(channel, ch.exchange, ch.routing_key, ch.mandatory, ch.immediate, content)

    # ------------------------------------------------------------------ errors

    def _on_peer_error(self, exc: _PeerError) -> Event | None:
        """Queue the Close the spec asks for and describe it, once per closing."""
        if exc.desync:
            self._desync()
        error = exc.error
        if self.state is ConnectionState.CLOSING:
            return None  # already closing: the peer's further mistakes change nothing
        if exc.channel and not error.connection_level:
            self._close_channel(exc.channel, error)
            return ProtocolErrorOccurred(error, exc.channel)
        self.close_connection(error)
        return ProtocolErrorOccurred(error, 0)

    # ------------------------------------------------------------------ output

    def _send_connection_method(self, method: base.Frame) -> None:
        next_state = CONNECTION_OUTGOING.get(self.state, {}).get(type(method))
        if next_state is None:
            raise LocalProtocolError(f"cannot send {method.name} in connection state {self.state.value}")
        self._queue(frames.encode_method(0, method))
        self.state = next_state

    def _handshake_gone(self) -> bool:
        """True when a handshake answer is moot because the connection is already ending."""
        return self.state in (ConnectionState.CLOSING, ConnectionState.CLOSED)

    def accept_login(self, username: str) -> None:
        """Answer LoginRequested: credentials are good; queue Connection.Tune."""
        if self._handshake_gone():
            return
        self._send_connection_method(
            commands.Connection.Tune(
                channel_max=self._proposed.channel_max,
                frame_max=self._proposed.frame_max,
                heartbeat=self._proposed.heartbeat,
            )
        )
        self.username = username

    def refuse_login(self, text: str) -> None:
        """Answer LoginRequested: queue Connection.Close 403 with `text` as its reply text."""
        if self._handshake_gone():
            return
        if self.state is not ConnectionState.AWAIT_LOGIN:
            raise LocalProtocolError(f"refuse_login() in connection state {self.state.value}")
        self.close_connection(AMQPError(403, text, *_START_OK_IDS))

    def accept_open(self) -> None:
        """Answer VhostRequested: the vhost is usable; queue Connection.Open-Ok."""
        if self._handshake_gone():
            return
        self._send_connection_method(commands.Connection.OpenOk())

    def accept_secret(self) -> None:
        """Answer SecretUpdateRequested: the new secret is good; queue Update-Secret-Ok."""
        if self._handshake_gone():
            return
        self._send_connection_method(commands.Connection.UpdateSecretOk())

    def close_connection(self, error: AMQPError) -> None:
        """Queue Connection.Close; from now on only Close-Ok (or Close) is read.

        A no-op once closing; before the protocol header there is nobody to tell, so the
        connection simply ends.
        """
        if self._handshake_gone():
            return
        if self.state is ConnectionState.AWAIT_PROTOCOL_HEADER:
            self.state = ConnectionState.CLOSED
            return
        self._send_connection_method(
            commands.Connection.Close(
                error.reply_code, frames.truncate_shortstr(error.reply_text), error.class_id, error.method_id
            )
        )

    def close_channel(self, channel: int, error: AMQPError) -> None:
        """Queue Channel.Close; the channel then ignores all but Close-Ok / Close.

        A connection-level error closes the connection instead, so callers can pass any
        AMQPError here. Channels already closed or closing are left alone.
        """
        if error.connection_level:
            self.close_connection(error)
        elif self._sendable(channel):
            self._close_channel(channel, error)

    def _close_channel(self, channel: int, error: AMQPError) -> None:
        ch = self._channels.get(channel)
        if ch is None or ch.state is ChannelState.CLOSING:
            return
        close = commands.Channel.Close(
            error.reply_code, frames.truncate_shortstr(error.reply_text), error.class_id, error.method_id
        )
        self._queue(frames.encode_method(channel, close))
        ch.state = ChannelState.CLOSING
        self.content_in_flight -= sum(map(len, ch.chunks))
        ch.content = None
        ch.chunks = []

    @property
    def channel_count(self) -> int:
        """Channels open now, closing ones included (they count toward channel_max too)."""
        return len(self._channels)

    def is_channel_open(self, channel: int) -> bool:
        """True when the broker may send on `channel` (open, not closing)."""
        ch = self._channels.get(channel)
        return ch is not None and ch.state in SENDABLE_STATES and self.state is ConnectionState.OPEN

    def _sendable(self, channel: int) -> bool:
        """Whether to send on `channel` now; raises if the connection never opened."""
        if self.state is not ConnectionState.OPEN:
            if self._handshake_gone():
                return False
            raise LocalProtocolError(f"no channel can be used in connection state {self.state.value}")
        ch = self._channels.get(channel)
        return ch is not None and ch.state in SENDABLE_STATES

    def send_method(self, channel: int, method: base.Frame) -> None:
        """Queue any method the broker answers or volunteers on an open channel."""
        if channel == 0 or method.index >> 16 == _CONNECTION_CLASS:
            raise LocalProtocolError(f"{method.name}: connection methods have methods of their own here")
        if type(method) in _STATEFUL_CHANNEL_METHODS:
            raise LocalProtocolError(f"{method.name}: channels are opened and closed by the connection")
        if self._sendable(channel):
            self._queue(frames.encode_method(channel, method))

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        content: Content,
    ) -> None:
        """Queue Basic.Deliver with its content. The fast path, run per message: `_sendable`
        and `_queue` are inlined for an open connection."""
        if self.state is ConnectionState.OPEN:
            ch = self._channels.get(channel)
            sendable = ch is not None and ch.state in SENDABLE_STATES
        else:
            sendable = self._sendable(channel)
        if sendable:
            data = frames.encode_deliver(
                channel,
                consumer_tag,
                delivery_tag,
                redelivered,
                exchange,
                routing_key,
                content,
                self._frame_max,
            )
            self._out.append(data)
            self._out_size += len(data)

    def send_get_ok(
        self,
        channel: int,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        message_count: int,
        content: Content,
    ) -> None:
        """Queue Basic.Get-Ok with its content."""
        if self._sendable(channel):
            self._queue(
                frames.encode_get_ok(
                    channel,
                    delivery_tag,
                    redelivered,
                    exchange,
                    routing_key,
                    message_count,
                    content,
                    self._frame_max,
                )
            )

    def send_return(
        self,
        channel: int,
        reply_code: int,
        reply_text: str,
        exchange: str,
        routing_key: str,
        content: Content,
    ) -> None:
        """Queue Basic.Return with the unroutable message's content."""
        if self._sendable(channel):
            self._queue(
                frames.encode_return(
                    channel,
                    reply_code,
                    frames.truncate_shortstr(reply_text),
                    exchange,
                    routing_key,
                    content,
                    self._frame_max,
                )
            )

    def send_heartbeat(self) -> None:
        """Queue a heartbeat frame (dropped before the protocol header and after the end)."""
        if self.state not in (ConnectionState.AWAIT_PROTOCOL_HEADER, ConnectionState.CLOSED):
            self._queue(frames.HEARTBEAT_FRAME)

    def send_blocked(self, reason: str) -> None:
        """Queue Connection.Blocked if the client announced the connection.blocked capability."""
        if self._may_block():
            self._queue(
                frames.encode_method(0, commands.Connection.Blocked(frames.truncate_shortstr(reason)))
            )

    def send_unblocked(self) -> None:
        """Queue Connection.Unblocked, under the same condition as `send_blocked`."""
        if self._may_block():
            self._queue(frames.encode_method(0, commands.Connection.Unblocked()))

    def _may_block(self) -> bool:
        return self.client_capabilities.get("connection.blocked") is True and not self._handshake_gone()
