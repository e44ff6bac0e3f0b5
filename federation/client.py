"""A Trio AMQP 0-9-1 client on `gateway.wire.ClientConnection`: what links, routes and CLIs use.

Theory of operation
-------------------
``async with connect(address) as connection`` opens a TCP stream, runs the handshake and
yields a `Connection`; leaving the block closes it (Connection.Close, then Close-Ok awaited
for at most CLOSE_TIMEOUT). Channels make calls (one synchronous reply each, matched in
order), publish and ack without awaiting (bytes are queued for the writer), and hand
deliveries over through a bounded memory channel.

Resource handling: the connection owns one nursery with three tasks, over the gateway.pump.Pump
that the node's connections use too (every wait is on an event or a deadline, none polls).
- The reader feeds the socket's bytes to the wire connection and dispatches its events to
  channels synchronously. When a channel's delivery buffer is full it waits for room instead
  of reading on: a slow consumer slows the socket (and, through TCP and the server's prefetch,
  the server) rather than filling memory. Keep qos prefetch within the buffer if the consuming
  task also makes calls on the connection, or it may wait on replies stuck behind its own
  unread deliveries.
- The writer is the only task writing the socket: it drains whatever the wire connection
  queued, so frames never interleave.
- The heartbeat task (when negotiated) sends a heartbeat after interval/2 without sending
  anything and declares the connection lost after two intervals without a byte from the
  server: a half-open TCP connection is detected. Time the reader spent waiting for the
  application does not count.

Error handling: the tasks never raise for the connection's failure. The first failure is
recorded; pending calls, confirm waits and delivery iterations raise it; then the nursery is
cancelled, which also cancels the body of ``async with connect(...)``, and `connect` raises
the recorded error. Policy on exception groups, decided once here: a group holding a single
exception (the body's own, usually) is unwrapped, so callers write plain ``except
ConnectionLost``; anything else propagates as the group it is.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
from pamqp import base, commands

from federation.address import BrokerAddress
from federation.errors import (
    AuthenticationRefused,
    ChannelClosedByPeer,
    ClientError,
    ConnectFailed,
    ConnectionClosedByPeer,
    ConnectionLost,
    ConsumerCancelled,
    PublishNacked,
    TlsRefused,
)
from federation.timing import CONNECT_TIMEOUT
from gateway.names import DEFAULT_VHOST
from gateway.pump import Pump
from gateway.tls import TlsError, handshake_failure, is_refusal
from gateway.wire import NEED_DATA, Content, Negotiated, events, make_method
from gateway.wire.client import ClientConnection, ClientState

LOGGER = logging.getLogger("federation.client")

#: How long leaving `connect` waits for the server's Close-Ok (and a failing connection for
#: its last frames to be written).
CLOSE_TIMEOUT = 3.0
#: Deliveries a channel holds for the application before the reader stops reading.
DELIVERY_BUFFER = 1024

#: A message for one of our consumers: consumer_tag, delivery_tag, redelivered, exchange,
#: routing_key, content (and channel). The wire event itself, so no copy per message.
Delivery = events.MessageDelivered


class _Reply:
    """A synchronous call's answer: filled by the reader, awaited by the caller."""

    __slots__ = ("done", "value", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.value: Any = None
        self.error: ClientError | None = None

    def resolve(self, value: Any) -> None:
        self.value = value
        self.done.set()

    def fail(self, error: ClientError) -> None:
        self.error = error
        self.done.set()


@asynccontextmanager
async def connect(
    address: BrokerAddress | str,
    *,
    vhost: str | None = None,
    heartbeat: int = 10,
    timeout: float = CONNECT_TIMEOUT,
    client_properties: dict[str, Any] | None = None,
) -> AsyncIterator[Connection]:
    """Connect, log in and open `vhost` (default: the address's, else "/"); close on leaving
    the block.

    Args:
        address: a BrokerAddress, or its text form ("user/password@host:port").
        heartbeat: seconds between heartbeats we ask for (0: none).
        timeout: bounds connecting plus the handshake, and each `Channel.call`.
        client_properties: merged over the defaults (e.g. {"connection_name": ...}).

    An address with `tls` opens TLS first (its CA, client certificate and key) and logs in with
    EXTERNAL when it has a certificate and no user name (BrokerAddress.mechanism).

    Error handling: ConnectFailed, AuthenticationRefused (TlsRefused for a certificate refused
    either way) or ConnectionClosedByPeer (a vhost refused) before the body runs; ConnectionLost or ConnectionClosedByPeer when the
    connection breaks during it (the body is cancelled first).
    """
    if isinstance(address, str):
        address = BrokerAddress.parse(address)
    vhost = vhost or address.vhost or DEFAULT_VHOST
    wire = ClientConnection(
        address.username,
        address.password,
        vhost,
        client_properties=client_properties,
        heartbeat=heartbeat,
        mechanism=address.mechanism,
    )
    deadline = trio.current_time() + timeout
    stream = await _open_stream(address, timeout)
    connection = Connection(stream, wire, address, timeout)
    try:
        async with trio.open_nursery() as nursery:
            connection._nursery = nursery
            try:
                connection._start(connection._read_loop)
                connection._start(connection._write_loop)
                await connection._handshake(deadline)
                if connection.negotiated.heartbeat:
                    connection._start(connection._heartbeat_loop, connection.negotiated.heartbeat)
                try:
                    yield connection
                finally:
                    connection._body_done = True
                    await connection._close()
            finally:
                connection._stop()
    except BaseExceptionGroup as group:
        single = _unwrap(group)
        if single is group:
            raise
        raise single from single.__cause__
    finally:
        await trio.aclose_forcefully(stream)
    if connection._error is not None and connection._interrupted:
        raise connection._error


async def _open_stream(address: BrokerAddress, timeout: float) -> trio.abc.Stream:
    """A TCP stream to the address, with the TLS handshake done over it for an amqps one."""
    try:
        with trio.fail_after(timeout):
            stream = await trio.open_tcp_stream(address.host, address.port)
    except trio.TooSlowError:
        raise ConnectFailed(f"timed out connecting to {address} after {timeout:g} s") from None
    except OSError as exc:
        raise ConnectFailed(_os_error_text(exc)) from exc
    if address.tls is None:
        return stream
    try:
        context = address.tls.context()
        tls_stream = trio.SSLStream(stream, context, server_hostname=address.host)
        with trio.fail_after(timeout):
            await tls_stream.do_handshake()
    except TlsError as exc:
        await trio.aclose_forcefully(stream)
        raise TlsRefused(str(exc)) from None
    except trio.TooSlowError:
        await trio.aclose_forcefully(stream)
        raise ConnectFailed(f"timed out in the TLS handshake with {address} after {timeout:g} s") from None
    except trio.BrokenResourceError as exc:
        await trio.aclose_forcefully(stream)
        raise _tls_failure(address, exc) from None
    return tls_stream


def _tls_failure(address: BrokerAddress, exc: BaseException) -> ClientError:
    """A failed TLS handshake: TlsRefused when a certificate was refused, else ConnectFailed."""
    text = f"TLS handshake with {address} failed: {handshake_failure(exc)}"
    return TlsRefused(text) if is_refusal(exc) else ConnectFailed(text)


def _os_error_text(exc: BaseException) -> str:
    """The operating system's words for a socket failure ("Connection refused"), digging
    through trio's wrappers ("all attempts to connect ... failed", BrokenResourceError)."""
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        return _os_error_text(cause.exceptions[0])
    if isinstance(cause, OSError):
        return _os_error_text(cause)
    if isinstance(exc, OSError) and exc.errno and exc.errno > 0:  # not getaddrinfo's negative codes
        return os.strerror(exc.errno)  # trio's own strerror also names the address
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _unwrap(group: BaseExceptionGroup) -> BaseException:
    """The only exception in a group (through nested groups), or the group itself."""
    current: BaseException = group
    while isinstance(current, BaseExceptionGroup) and len(current.exceptions) == 1:
        current = current.exceptions[0]
    return group if isinstance(current, BaseExceptionGroup) else current


class Connection:
    """An open client connection; made by `connect`, used through `channel()`."""

    def __init__(
        self, stream: trio.abc.Stream, wire: ClientConnection, address: BrokerAddress, timeout: float
    ) -> None:
        self.address = address
        self.timeout = timeout
        #: Connection.Blocked's reason while the server blocks publishers, else None.
        self.blocked: str | None = None
        self._stream = stream
        self._wire = wire
        self._pump = Pump(stream, wire)
        self._channels: dict[int, Channel] = {}
        self._nursery: trio.Nursery | None = None
        self._task_scopes: list[trio.CancelScope] = []
        self._pump.wakeup.set()  # the protocol header is already queued
        self._opened = trio.Event()
        self._closed = trio.Event()
        self._closing = False
        self._reading_paused = False
        self._eof_reason = "closed by the server"
        self._error: ClientError | None = None
        self._body_done = False
        self._interrupted = False

    @property
    def negotiated(self) -> Negotiated:
        """channel_max, frame_max and heartbeat as agreed in the handshake."""
        assert self._wire.negotiated is not None  # set before `connect` yields
        return self._wire.negotiated

    @property
    def server_properties(self) -> dict[str, Any]:
        return self._wire.server_properties

    @property
    def reading_paused(self) -> bool:
        """True while the reader waits for room in a full channel's delivery buffer (it
        reads nothing more from the server until the application takes a delivery)."""
        return self._reading_paused

    async def channel(self, *, buffer: int = DELIVERY_BUFFER) -> Channel:
        """Open a channel (the lowest free number); `buffer` bounds its unread deliveries."""
        self._check()
        limit = self.negotiated.channel_max
        number = next((n for n in range(1, limit + 1) if n not in self._channels), None)
        if number is None:
            raise ClientError(f"all {limit} channels of the connection to {self.address} are in use")
        channel = Channel(self, number, buffer)
        self._channels[number] = channel
        self._wire.open_channel(number)
        await channel._reply()
        return channel

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def _fail(self, error: ClientError) -> None:
        """Record the first failure, fail every channel, and end the connection's nursery."""
        if self._error is None:
            self._error = error
            self._interrupted = not self._body_done
            LOGGER.info("connection to %s: %s", self.address, error)
        for channel in list(self._channels.values()):
            channel._fail(error)
        self._stop()

    # -- lifecycle ------------------------------------------------------------------------------

    def _start(self, task: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Start a connection task, shielded: cancelling the body from outside must leave the
        reader and writer running while `_close` says goodbye (bounded). `_stop` ends them."""
        assert self._nursery is not None
        scope = trio.CancelScope(shield=True)
        self._task_scopes.append(scope)

        async def shielded() -> None:
            with scope:
                await task(*args)

        self._nursery.start_soon(shielded, name=getattr(task, "__name__", "task"))

    def _stop(self) -> None:
        """End the connection's tasks, and the body if it is still running (a failure)."""
        for scope in self._task_scopes:
            scope.cancel()
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()

    async def _handshake(self, deadline: float) -> None:
        with trio.move_on_at(deadline):
            await self._opened.wait()
            return
        raise ConnectFailed(f"timed out in the AMQP handshake with {self.address}")

    async def _close(self) -> None:
        """Say goodbye if the connection still works; then nothing may use it any more."""
        if self._error is None and self._wire.state is not ClientState.CLOSED:
            await self._goodbye()
        if self._error is None:
            self._error = ClientError(f"connection to {self.address} is closed")
            for channel in self._channels.values():
                channel._fail(self._error)

    async def _goodbye(self) -> None:
        """Connection.Close and a bounded wait for Close-Ok, even when cancelled."""
        self._closing = True
        for channel in self._channels.values():
            channel._inbox_in.close()  # a reader waiting for room must get to the Close-Ok
        self._wire.close()
        self._pump.wakeup.set()
        with trio.move_on_after(CLOSE_TIMEOUT) as scope:
            scope.shield = True
            await self._closed.wait()

    async def _flush(self) -> None:
        """Let the writer send what is queued (a Close-Ok, our Close), for a bounded time."""
        with trio.move_on_after(CLOSE_TIMEOUT):
            await self._pump.drain()

    # -- tasks ----------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        wire, pump = self._wire, self._pump
        while True:
            if not await pump.receive() and pump.receive_error is not None:
                self._eof_reason = _os_error_text(pump.receive_error)
            if not await self._process_events():
                return
            if wire.pending_output():
                pump.wakeup.set()

    async def _process_events(self) -> bool:
        """Dispatch events until NEED_DATA (True) or the connection's end (False)."""
        next_event = self._wire.next_event
        channels = self._channels
        while True:
            event = next_event()
            if type(event) is Delivery:  # the hot path: no coroutine unless the buffer is full
                channel = channels.get(event.channel)
                if channel is not None:
                    try:
                        channel._inbox_in.send_nowait(event)
                    except (trio.WouldBlock, trio.ClosedResourceError):
                        await self._hand_over(channel, event)
                continue
            if event is NEED_DATA:
                return True
            if type(event) is events.MethodReceived:
                method = event.method
                if type(method) is commands.Basic.Cancel:
                    # Consumer-cancel notification: it takes its place after the deliveries
                    # before it.
                    channel = channels.get(event.channel)
                    if channel is not None:
                        await self._hand_over(channel, ConsumerCancelled(method.consumer_tag or ""))
                    continue
            kind = type(event)
            if kind in _TERMINAL:
                await self._on_terminal(event)
                return False
            handler = _DISPATCH.get(kind)
            if handler is not None:
                handler(self, event)

    async def _hand_over(self, channel: Channel, item: Delivery | ConsumerCancelled) -> None:
        """Put an item in the channel's buffer; when it is full, stop reading until it is not."""
        try:
            channel._inbox_in.send_nowait(item)
            return
        except trio.WouldBlock:
            pass
        except trio.ClosedResourceError:
            return  # closing: the server requeues what it delivered
        self._reading_paused = True
        try:
            await channel._inbox_in.send(item)
        except trio.ClosedResourceError:
            pass
        finally:
            self._reading_paused = False
            self._pump.last_received = trio.current_time()

    async def _write_loop(self) -> None:
        exc = await self._pump.write_loop()
        if self._closing:
            self._closed.set()
        else:
            self._fail(ConnectionLost(f"connection to {self.address} lost: {_os_error_text(exc)}"))

    async def _heartbeat_loop(self, interval: int) -> None:
        await self._pump.keep_alive(interval, lambda: self._reading_paused)
        self._fail(ConnectionLost(f"missed heartbeats from {self.address}"))

    # -- events ---------------------------------------------------------------------------------

    async def _on_terminal(self, event: events.Event) -> None:
        """The connection is over: say why, after writing any Close-Ok or Close it queued."""
        if isinstance(event, events.ConnectionClosed) and self._closing:
            self._closed.set()
            return
        await self._flush()
        self._fail(self._terminal_error(event))

    def _terminal_error(self, event: events.Event) -> ClientError:
        if isinstance(event, events.LoginRefused):
            return AuthenticationRefused(event.reply_text)
        if isinstance(event, events.ConnectionClosedByPeer):
            return ConnectionClosedByPeer(event.reply_code, event.reply_text)
        if isinstance(event, events.ProtocolHeaderRejected):
            return ConnectFailed(f"{self.address} does not speak AMQP 0-9-1: it answered {event.received!r}")
        error = self._pump.receive_error
        if not self._opened.is_set() and error is not None and is_refusal(error):
            # TLS 1.3: the server checks our certificate after our handshake has finished,
            # and its refusal arrives as an alert on the first read.
            return _tls_failure(self.address, error)
        if isinstance(event, events.ProtocolErrorOccurred):
            reason = f"protocol error by {self.address}: {event.error.reply_text}"
        else:
            reason = f"connection to {self.address} lost: {self._eof_reason}"
        return ConnectionLost(reason) if self._opened.is_set() else ConnectFailed(reason)

    def _on_opened(self, event: events.ConnectionOpened) -> None:
        self._opened.set()

    def _on_method(self, event: events.MethodReceived) -> None:
        method = event.method
        if event.channel == 0:
            self.blocked = method.reason if isinstance(method, commands.Connection.Blocked) else None
            LOGGER.info("connection to %s: %s", self.address, self.blocked or "unblocked")
            return
        channel = self._channels.get(event.channel)
        if channel is None:
            return
        if not isinstance(method, commands.Channel.Flow):  # Flow-Ok is already queued
            channel._resolve(method)

    def _on_got(self, event: events.MessageGot) -> None:
        channel = self._channels.get(event.channel)
        if channel is not None:
            channel._resolve(event)

    def _on_channel_opened(self, event: events.ChannelOpened) -> None:
        self._channels[event.channel]._resolve(event)

    def _on_channel_closed(self, event: events.ChannelClosed) -> None:
        channel = self._channels.pop(event.channel)
        channel._closed.set()

    def _on_channel_closed_by_peer(self, event: events.ChannelClosedByPeer) -> None:
        channel = self._channels.pop(event.channel)
        channel._fail(ChannelClosedByPeer(event.reply_code, event.reply_text))

    def _on_confirm(self, event: events.Acked | events.Nacked) -> None:
        channel = self._channels.get(event.channel)
        if channel is not None:
            channel._on_confirm(event.delivery_tag, event.multiple, type(event) is events.Acked)

    def _on_return(self, event: events.MessageReturned) -> None:
        channel = self._channels.get(event.channel)
        if channel is None:
            return
        if channel.on_return is not None:
            channel.on_return(event)
        else:
            LOGGER.debug("%s: message to %r returned: %s", self.address, event.exchange, event.reply_text)


_TERMINAL = frozenset(
    {
        events.ConnectionClosed,
        events.ConnectionClosedByPeer,
        events.LoginRefused,
        events.ProtocolHeaderRejected,
        events.ProtocolErrorOccurred,
    }
)

_DISPATCH: dict[type, Callable[[Connection, Any], None]] = {
    events.ConnectionOpened: Connection._on_opened,
    events.MethodReceived: Connection._on_method,
    events.MessageGot: Connection._on_got,
    events.MessageReturned: Connection._on_return,
    events.ChannelOpened: Connection._on_channel_opened,
    events.ChannelClosed: Connection._on_channel_closed,
    events.ChannelClosedByPeer: Connection._on_channel_closed_by_peer,
    events.Acked: Connection._on_confirm,
    events.Nacked: Connection._on_confirm,
}


class Channel:
    """An open channel: calls, publishes with optional confirms, consumers, acks.

    `on_return`, if set, is called with each `MessageReturned` (mandatory publishes nobody
    took); otherwise returns are logged at debug level and dropped.
    """

    def __init__(self, connection: Connection, number: int, buffer: int) -> None:
        self.number = number
        self.on_return: Callable[[events.MessageReturned], None] | None = None
        self._connection = connection
        self._wire = connection._wire
        self._pump = connection._pump
        self._replies: deque[_Reply] = deque()
        self._inbox_in, self._inbox = trio.open_memory_channel[Delivery | ConsumerCancelled](buffer)
        self._closed = trio.Event()
        self._error: ClientError | None = None
        self._closed_by_us = False
        self._confirming = False
        self._published = 0
        self._unconfirmed: set[int] = set()
        self._confirm_floor = 1  # every seq below it is confirmed
        self._nacked: set[int] = set()
        self._confirm_progress: trio.Event | None = None

    # -- calls ----------------------------------------------------------------------------------

    async def call(self, method: base.Frame) -> Any:
        """Send a method and return the server's reply (a pamqp method); None for nowait.

        Error handling: ChannelClosedByPeer if the server refuses it (the channel is then
        closed); trio.TooSlowError after the connection's `timeout` (a late reply is
        discarded, so later calls still get their own).
        """
        self._check()
        self._wire.send_method(self.number, method)
        if getattr(method, "nowait", False):
            self._connection._pump.wakeup.set()
            return None
        return await self._reply()

    async def qos(self, prefetch_count: int, prefetch_size: int = 0, global_: bool = False) -> None:
        await self.call(commands.Basic.Qos(prefetch_size, prefetch_count, global_))

    async def confirm_select(self) -> None:
        """Publisher confirms: from now on `publish` returns sequence numbers to wait for."""
        self._confirming = True  # publishes queued after the Select are the ones counted
        await self.call(commands.Confirm.Select())

    async def consume(
        self,
        queue: str,
        *,
        no_ack: bool = False,
        consumer_tag: str = "",
        exclusive: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> str:
        """Start a consumer; its messages come out of `deliveries()`. Returns its tag."""
        consume = make_method(
            commands.Basic.Consume,
            queue=queue,
            consumer_tag=consumer_tag,
            no_ack=no_ack,
            exclusive=exclusive,
            arguments=arguments or {},
        )
        reply: commands.Basic.ConsumeOk = await self.call(consume)
        assert reply.consumer_tag is not None  # the server names the consumer when we do not
        return reply.consumer_tag

    async def get(self, queue: str, *, no_ack: bool = False) -> events.MessageGot | None:
        """Basic.Get: one message, or None if the queue is empty."""
        reply = await self.call(make_method(commands.Basic.Get, queue=queue, no_ack=no_ack))
        return reply if isinstance(reply, events.MessageGot) else None

    async def close(self) -> None:
        """Close the channel (bounded by the connection's timeout). Unread deliveries are
        dropped: the server requeues whatever was not acked."""
        if self._error is not None:
            return
        self._closed_by_us = True
        self._fail(ClientError(f"channel {self.number} is closed"))
        self._wire.close_channel(self.number)
        self._pump.wakeup.set()
        with trio.move_on_after(self._connection.timeout):
            await self._closed.wait()

    # -- the hot path ---------------------------------------------------------------------------

    def publish(
        self, exchange: str, routing_key: str, content: Content, mandatory: bool = False
    ) -> int | None:
        """Queue a publish without waiting; its sequence number when confirms are on."""
        if self._error is not None:
            raise self._error
        self._wire.send_publish(self.number, exchange, routing_key, mandatory, content)
        self._pump.wakeup.set()
        if not self._confirming:
            return None
        self._published += 1
        self._unconfirmed.add(self._published)
        return self._published

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        """Acknowledge a delivery (all up to it with `multiple`), without waiting."""
        if self._error is not None:
            raise self._error
        self._wire.send_ack(self.number, delivery_tag, multiple)
        self._pump.wakeup.set()

    def deliveries(self) -> AsyncIterator[Delivery]:
        """The channel's deliveries, in order. Ends when we close the channel; raises the
        error when the server closes it or the connection breaks (after the deliveries that
        arrived before), and ConsumerCancelled where the server cancelled a consumer."""
        return _Deliveries(self)

    # -- confirms -------------------------------------------------------------------------------

    async def wait_for_confirms(self) -> None:
        """Wait until every publish so far is confirmed.

        Error handling: PublishNacked naming the nacked publishes since the last call (they are
        then forgotten); the channel's error if it closes first.
        """
        while self._unconfirmed:
            await self._confirm_changed()
        if self._nacked:
            nacked, self._nacked = sorted(self._nacked), set()
            raise PublishNacked(nacked)

    async def wait_for_confirm(self, seq: int) -> None:
        """Wait for one publish's confirm; PublishNacked if it was nacked (and not yet
        reported by `wait_for_confirms`)."""
        while not self.confirmed(seq):
            await self._confirm_changed()

    def confirmed(self, seq: int) -> bool:
        """Whether publish `seq` is settled, without waiting; PublishNacked as above."""
        if not 1 <= seq <= self._published:
            raise ValueError(f"no publish {seq} on channel {self.number} (last is {self._published})")
        if seq in self._unconfirmed:
            return False
        if seq in self._nacked:
            self._nacked.discard(seq)
            raise PublishNacked([seq])
        return True

    async def _confirm_changed(self) -> None:
        self._check()
        if self._confirm_progress is None:
            self._confirm_progress = trio.Event()
        await self._confirm_progress.wait()
        self._check()

    def _on_confirm(self, tag: int, multiple: bool, acked: bool) -> None:
        """Settle one publish, or with `multiple` every one up to `tag` (each seq is visited
        once by multiple confirms, as the floor only moves up)."""
        if multiple:
            seqs: range | tuple[int] = range(self._confirm_floor, tag + 1)
            self._confirm_floor = max(self._confirm_floor, tag + 1)
        else:
            seqs = (tag,)
        unconfirmed = self._unconfirmed
        for seq in seqs:
            if seq in unconfirmed:
                unconfirmed.remove(seq)
                if not acked:
                    self._nacked.add(seq)
        self._wake_confirm_waiters()

    def _wake_confirm_waiters(self) -> None:
        if self._confirm_progress is not None:
            self._confirm_progress.set()
            self._confirm_progress = None

    # -- plumbing -------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    async def _reply(self) -> Any:
        """Wait, bounded, for the reply to the method just queued."""
        reply = _Reply()
        self._replies.append(reply)
        self._pump.wakeup.set()
        with trio.fail_after(self._connection.timeout):
            await reply.done.wait()
        if reply.error is not None:
            raise reply.error
        return reply.value

    def _resolve(self, value: Any) -> None:
        if self._replies:
            self._replies.popleft().resolve(value)
        else:
            LOGGER.warning(
                "%s: unexpected reply on channel %d: %r", self._connection.address, self.number, value
            )

    def _fail(self, error: ClientError) -> None:
        """The channel is over: wake everything waiting on it with `error`."""
        if self._error is None:
            self._error = error
        while self._replies:
            self._replies.popleft().fail(error)
        self._inbox_in.close()
        self._wake_confirm_waiters()


class _Deliveries:
    """`Channel.deliveries()`: a plain async iterator (no generator to finalize).

    Each wait takes everything buffered at once, and the items are then handed out without
    a checkpoint: a busy route costs one trip through the scheduler per batch, not per message.
    """

    __slots__ = ("_channel", "_inbox", "_taken")

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._inbox = channel._inbox
        self._taken: deque[Delivery | ConsumerCancelled] = deque()

    def __aiter__(self) -> _Deliveries:
        return self

    async def __anext__(self) -> Delivery:
        taken = self._taken
        if not taken:
            await self._take()
        item = taken.popleft()
        if isinstance(item, ConsumerCancelled):
            raise item
        return item

    async def _take(self) -> None:
        inbox, taken = self._inbox, self._taken
        try:
            taken.append(await inbox.receive())
            while True:
                taken.append(inbox.receive_nowait())
        except trio.WouldBlock:
            return
        except trio.EndOfChannel:
            if taken:
                return
            channel = self._channel
            if channel._error is not None and not channel._closed_by_us:
                raise channel._error from None
            raise StopAsyncIteration from None
