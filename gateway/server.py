"""The Trio adapter of a node: listeners, and one handler per connection over any stream.

Everything here is I/O and time. Protocol rules live in gateway.wire and AMQP semantics in
gateway.broker; this module moves bytes between a `trio.abc.Stream` and those two, and owns
every task of a connection in its nursery, so that they end with it. What the node is made of
(store, management, federation) is gateway.node's business: a handler only needs the
`ConnectionHost` the node gives it.

Resource handling: each connection has a reader task and a writer task over one
gateway.pump.Pump (the federation client uses the same one), a heartbeat task once the
connection is open with heartbeats, and a timer bounding the wait for a Close-Ok. The broker
model writes outgoing frames into the connection's wire buffer synchronously (possibly while
handling another connection's publish) and wakes the writer; the writer drains the buffer to
the stream. When a peer reads too slowly its buffer passes HIGH_WATER, the model stops
dispatching to it and the reader stops reading, and the writer resumes the model once the
buffer falls under LOW_WATER, RESUME_SLICE at a time. The other way round, the model
blocks a publisher (Outbox.block: a full federation outbox, the disk alarm): the reader then
handles none of its input until the model unblocks it. Every wait is on an event or a
deadline of Trio's clock, none on a polling sleep.

Error handling: AMQP errors are answered on the scope the spec gives them (channel or
connection). A connection-level close waits CLOSE_TIMEOUT for Close-Ok, then drops the stream.
An unexpected exception in one connection is logged and ends that connection only.
"""

from __future__ import annotations

import errno
import logging
import math
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import trio
from pamqp import commands

from gateway.broker import Broker, Session
from gateway.broker.outbox import DeliveryFields, GetOk, Return
from gateway.connlimits import ConnectionLimits
from gateway.pump import HIGH_WATER, RECEIVE_SIZE, Pump
from gateway.security import EXTERNAL, MECHANISMS, AuthenticationFailed, Authority, Logins
from gateway.wire import events
from gateway.wire.connection import DEFAULT_MAX_MESSAGE_SIZE, ServerConnection, server_properties
from gateway.wire.errors import AMQPError, caused_by, connection_forced, internal_error, not_allowed

LOGGER = logging.getLogger("gateway.server")

#: HIGH_WATER (gateway.pump, 512 KiB): over it the model stops dispatching to a connection and
#: its reader stops reading; under LOW_WATER its writer resumes the model.
LOW_WATER = 128 * 1024
#: The most one resume of a paused connection renders before its writer sends it. Feeding a
#: backlog to a consumer is a chain of resumes, each one step of the event loop that every
#: other client's reads, and the commits and confirms behind them, wait for: 128 KiB (5 ms)
#: put the max confirm latency of a publisher beside a requeue of 200,000 messages at 32-39 ms,
#: 64 KiB at 24-29 ms (benchmarks backlog). A smaller window instead of this slice cost a tenth
#: of consumer throughput (what publishes dispatch directly while a send is in flight).
RESUME_SLICE = 64 * 1024
HANDSHAKE_TIMEOUT = 10.0
CLOSE_TIMEOUT = 3.0
ACCEPT_RETRY_SLEEP = 0.1

_ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


class ListenError(Exception):
    """The node could not open its listening sockets (port in use, address not local...)."""


@dataclass(frozen=True)
class Limits:
    """What the node proposes in Connection.Tune, and the largest message body it accepts."""

    heartbeat: int = 60
    frame_max: int = 131072
    channel_max: int = 2047
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE


class ConnectionHost(Protocol):
    """What a connection needs of its node (gateway.node.Node is the one)."""

    name: str
    limits: Limits
    broker: Broker
    logins: Logins
    authority: Authority
    connections: ConnectionLimits

    def want_commit(self) -> None:
        """Called after each batch of input: the store may have writes to commit."""
        ...


async def open_listeners(host: str | None, port: int) -> list[trio.SocketListener]:
    """TCP listeners on `host` (None: every interface) and `port` (0: any free one)."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise ListenError(f"cannot listen on {host or '*'}:{port}: {exc.strerror or exc}") from exc


def listen_addresses(listeners: list[trio.SocketListener]) -> list[str]:
    """host:port for each listener, as logged in the ready line and used by tests."""
    addresses = []
    for listener in listeners:
        host, port = listener.socket.getsockname()[:2]
        addresses.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return addresses


#: Seconds a client whose TLS handshake we refused gets to take the alert that says why.
ALERT_TIMEOUT = 1.0


async def send_alert(tls_stream: trio.SSLStream[trio.SocketStream]) -> None:
    """Send the TLS alert OpenSSL wrote when it refused a handshake ("unknown ca", "certificate
    expired"), which trio.SSLStream leaves unsent when it raises. Without it a TLS 1.3 client,
    whose own handshake has finished before we check its certificate, only sees the
    connection close, and cannot tell a refused certificate (final) from a restart (retried).
    Best effort: the client may be gone already."""
    outgoing = getattr(tls_stream, "_outgoing", None)  # trio's MemoryBIO towards the peer
    alert = outgoing.read() if isinstance(outgoing, ssl.MemoryBIO) else b""
    if alert:
        with trio.move_on_after(ALERT_TIMEOUT):
            try:
                await tls_stream.transport_stream.send_all(alert)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass


def socket_peer(stream: trio.SocketStream) -> tuple[str, str]:
    """(host:port, host) of the client at the other end of an accepted socket."""
    host, port = stream.socket.getpeername()[:2]
    return f"{host}:{port}", host


async def accept_loop(listener: trio.SocketListener, accepted: Callable[[trio.SocketStream], None]) -> None:
    """Accept until cancelled, handing each stream to `accepted`.

    Error handling: running out of file descriptors or memory (EMFILE...) is retried every
    ACCEPT_RETRY_SLEEP, and logged once per burst of failures: the first one, then their
    number when accepting works again (not ten tracebacks a second). Other errors propagate.
    """
    failures = 0
    burst_start = 0.0
    failure = ""
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                raise
            if not failures:
                burst_start = trio.current_time()
                LOGGER.error("accept failed (%s); retrying every %ss", exc, ACCEPT_RETRY_SLEEP)
            failures += 1
            failure = f"{errno.errorcode.get(exc.errno, exc.errno)}: {exc.strerror}"
            await trio.sleep(ACCEPT_RETRY_SLEEP)
            continue
        if failures:
            LOGGER.warning(
                "accept failed %d times over %.1fs (%s); accepting again",
                failures,
                trio.current_time() - burst_start,
                failure,
            )
            failures = 0
        accepted(stream)


def _describe(event: Any) -> str:
    """Name an event for logs and INTERNAL_ERROR texts: the AMQP method when there is one."""
    method = getattr(event, "method", None)
    if method is not None:
        return method.name
    return "Basic.Publish" if isinstance(event, events.MessageReceived) else type(event).__name__


#: The method behind each event that carries no method object of its own.
_EVENT_METHODS: dict[type, type] = {
    events.MessageReceived: commands.Basic.Publish,
    events.VhostRequested: commands.Connection.Open,
    events.ChannelOpened: commands.Channel.Open,
    events.ChannelCloseRequested: commands.Channel.Close,
}


def _cause(event: Any) -> Any:
    """The method (object or class) whose handling an event stands for, for error ids."""
    method = getattr(event, "method", None)  # not `or`: a method without fields is falsy
    return method if method is not None else _EVENT_METHODS.get(type(event))


class ConnectionHandler:
    """One client connection over any byte stream; also the broker's Outbox for it.

    `peer` names the client in logs; `peer_host` is its address, which loopback-only users
    and the throttling of failed logins go by; `tls_login` is the user a verified TLS client
    certificate names: with it, SASL EXTERNAL is offered too.
    """

    def __init__(
        self,
        node: ConnectionHost,
        stream: trio.abc.Stream,
        peer: str,
        peer_host: str,
        tls_login: str | None = None,
    ) -> None:
        self.node = node
        self.stream = stream
        self.peer_host = peer_host
        self.peer = peer
        self.tls_login = tls_login
        self.wire = ServerConnection(
            server_properties(node.name),
            frame_max=node.limits.frame_max,
            channel_max=node.limits.channel_max,
            heartbeat=node.limits.heartbeat,
            max_message_size=node.limits.max_message_size,
            mechanisms=MECHANISMS if tls_login is None else (*MECHANISMS, EXTERNAL),
        )
        self.pump = Pump(stream, self.wire, high_water=HIGH_WATER, receive_size=RECEIVE_SIZE)
        self.session: Session | None = None
        self.user: Any = None
        #: The client's "capabilities" table, as the model reads it (from Start-Ok, taken when
        #: the client opens its vhost).
        self.client_capabilities: dict[str, Any] = {}
        self._paused = False
        #: How much output writable() allows: HIGH_WATER, or less while a resume renders a slice.
        self._window = HIGH_WATER
        #: Why the model blocked this publisher (None: it did not). While blocked we do not
        #: read, so the client's heartbeats wait in the stream.
        self._blocked: str | None = None
        self._unblocked = trio.Event()
        #: The Close-Ok timer: its deadline is when we stop waiting (math.inf: not closing).
        self._close_scope = trio.CancelScope()
        self._done = False
        #: The client sent Connection.Close: read on until it closes its side (_discard_input).
        self._peer_closed = False
        #: The handshake finished (Open-Ok sent): the session may be gone since, released.
        self._opened = False
        #: The vhost this connection counts in (gateway.connlimits) until it is released.
        self._admitted: str | None = None
        self._nursery: trio.Nursery | None = None
        self._handshake_scope = trio.CancelScope()

    # -- Outbox, called synchronously by the broker model -------------------------------------

    def writable(self) -> bool:
        if self.wire.pending_output() + self.pump.sending < self._window:
            return True
        self._paused = True
        return False

    def send_method(self, channel: int, method: Any) -> None:
        self.wire.send_method(channel, method)
        self.pump.wakeup.set()

    def send_deliver(self, delivery: DeliveryFields) -> None:
        channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key, content, _ = delivery
        self.wire.send_deliver(
            channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key, content
        )
        self.pump.wakeup.set()  # not _wake(): a call less per delivery and per confirm

    def send_get_ok(self, get_ok: GetOk) -> None:
        self.wire.send_get_ok(*get_ok)
        self._wake()

    def send_return(self, returned: Return) -> None:
        self.wire.send_return(*returned)
        self._wake()

    def close_channel(self, channel: int, error: AMQPError) -> None:
        self.wire.close_channel(channel, error)
        self._wake()

    def close_connection(self, error: AMQPError) -> None:
        if self._close_scope.deadline == math.inf:
            self.wire.close_connection(error)
            self._close_within(CLOSE_TIMEOUT)
        self._wake()

    def _close_connection(self, error: AMQPError) -> None:
        """Our own Connection.Close (not the model's, which may not be called back): the model
        gets back what the connection held at once, not after Close-Ok, so a client that
        reconnects within milliseconds never finds its exclusive queues locked (405)."""
        self.close_connection(error)
        self.release()

    def _close_within(self, timeout: float) -> None:
        """Drop the stream if the peer has not closed it `timeout` seconds from now (or at the
        earlier deadline already set)."""
        scope = self._close_scope
        scope.deadline = min(scope.deadline, trio.current_time() + timeout)

    def block(self, reason: str) -> None:
        """The reader stops after the event being handled and tells the client (_held)."""
        self._blocked = reason
        self._unblocked = trio.Event()

    def unblock(self) -> None:
        self._unblocked.set()

    # -- lifecycle ------------------------------------------------------------------------------

    def force_close(self, reason: str) -> None:
        """Shutdown: a 320 to a client that finished its handshake (unless it is closing
        already); a plain drop otherwise."""
        if self._opened:
            self._close_connection(connection_forced(reason))
        elif self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def release(self) -> None:
        """The connection is over for the model (the socket is gone, or a Connection.Close was
        sent or received): give back everything it held at once, so that a client reconnecting
        within milliseconds finds its exclusive queues free, whatever the Close-Ok does."""
        if self.session is not None:
            self.session.disconnect()
            self.session = None
        if self._admitted is not None:
            self.node.connections.leave(self, self.user, self._admitted)
            self._admitted = None

    @property
    def open_channels(self) -> int:
        """Channels open on this connection (for a user's channel limit)."""
        return self.wire.channel_count

    async def run(self) -> None:
        LOGGER.debug("accepted connection from %s", self.peer)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._write_loop)
            nursery.start_soon(self._close_timer)
            with trio.move_on_after(HANDSHAKE_TIMEOUT) as self._handshake_scope:
                await self._read_loop()
            if self._handshake_scope.cancelled_caught:
                LOGGER.warning("%s: handshake not completed in %ss; closing", self.peer, HANDSHAKE_TIMEOUT)
            self._done = True
            self._wake()
            await self._flush_and_stop(nursery)

    async def _flush_and_stop(self, nursery: trio.Nursery) -> None:
        """Let the writer send what is queued (a Close, a Close-Ok), and after the client's
        Close read on until it closes its side, both within CLOSE_TIMEOUT; then stop."""
        with trio.move_on_after(CLOSE_TIMEOUT):
            await self.pump.drain()
            if self._peer_closed:
                await self._discard_input()
        nursery.cancel_scope.cancel()

    async def _discard_input(self) -> None:
        """Read and drop what the client still sends after its Connection.Close (frames already
        in flight) until its end of file. Closing a socket with unread bytes resets the
        connection, and the client may then never see its Close-Ok; RabbitMQ reads on too."""
        try:
            while await self.stream.receive_some(RECEIVE_SIZE):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def _wake(self) -> None:
        self.pump.wakeup.set()

    async def _read_loop(self) -> None:
        pump = self.pump
        while not self._done:
            data = await pump.receive()
            await self._process_events()
            self._count_content()
            self.node.want_commit()
            self._wake()
            if not data:
                return
            # A peer that does not read what we send: stop reading what it sends.
            await pump.wait_for_room()
            if self.session is not None:
                self._handshake_scope.deadline = math.inf
                while self._blocked is not None:
                    await self._held(self._blocked)
                    # What arrived with the publish that caused the block is handled now.
                    await self._process_events()
                    self._count_content()
                    self.node.want_commit()
                    self._wake()

    def _count_content(self) -> None:
        """Tell the model how much of the bodies being received it holds now
        (Session.receiving), which may hold this connection before its next read."""
        if self.session is not None and self.wire.content_in_flight != self.session.unfinished:
            self.session.receiving(self.wire.content_in_flight)

    async def _held(self, reason: str) -> None:
        """A publish of this connection found no room (a full federation outbox, a full
        disk): read nothing more from it until the model unblocks it, telling a client that
        understands Connection.Blocked."""
        # Qpid's channel log codes for a publisher held and released (CHN-1005 / CHN-1006).
        LOGGER.info("%s: CHN-1005 : Flow Control Enforced (%s)", self.peer, reason)
        self.wire.send_blocked(reason)
        self._wake()
        try:
            await self._unblocked.wait()
        finally:
            self._blocked = None
            self.pump.last_received = trio.current_time()
        self.wire.send_unblocked()
        self._wake()
        LOGGER.info("%s: CHN-1006 : Flow Control Removed", self.peer)

    async def _process_events(self) -> None:
        """Handle the buffered events, stopping early if a publish blocked this connection
        (the rest wait in the wire buffer until it is unblocked); then send the publisher
        confirms they made ready, coalesced."""
        try:
            await self._handle_events()
        finally:
            if self.session is not None:
                self.session.flush_confirms()

    async def _handle_events(self) -> None:
        next_event = self.wire.next_event
        while not self._done and self._blocked is None:
            event = next_event()
            if event is events.NEED_DATA:
                return
            if type(event) is events.LoginRequested:
                await self._login(event)
                continue
            handler = _DISPATCH.get(type(event))
            if handler is None:
                continue
            try:
                handler(self, event)
            except AMQPError as error:
                self._scope_error(getattr(event, "channel", 0), caused_by(error, _cause(event)))
            except Exception:
                # A bug must cost this connection, never the node or anyone else's messages.
                LOGGER.exception("%s: failed to handle %s", self.peer, _describe(event))
                self._close_connection(
                    internal_error(f"failed to handle {_describe(event)}; see the node's log", _cause(event))
                )

    def _scope_error(self, channel: int, error: AMQPError) -> None:
        LOGGER.info("%s: channel %d: %s", self.peer, channel, error.reply_text)
        if error.connection_level or channel == 0:
            self._close_connection(error)
        else:
            self.close_channel(channel, error)
            if self.session is not None:
                self.session.close_channel(channel)

    # -- events ---------------------------------------------------------------------------------

    async def _login(self, event: events.LoginRequested) -> None:
        """Check credentials through the node's Logins: throttled, cached, and with a bound
        on the password checks (tens of milliseconds each, in worker threads) run at once."""
        try:
            self.user = await self.node.logins.authenticate(
                event.mechanism, event.response, self.peer_host, self.tls_login
            )
        except AuthenticationFailed as failure:
            if not failure.logged:
                LOGGER.warning("%s: login refused: %s", self.peer, failure.reason)
            if failure.reply_code == 403:
                self.wire.refuse_login(failure.reply_text)
                self._close_within(CLOSE_TIMEOUT)
            else:
                self._close_connection(AMQPError(failure.reply_code, failure.reply_text))
        else:
            self.wire.accept_login(self.user.name)
        self._wake()

    def _update_secret(self, event: events.SecretUpdateRequested) -> None:
        """Connection.Update-Secret: Update-Secret-Ok whatever the secret, as RabbitMQ's internal
        users answer it. Their passwords never expire, so there is nothing to refresh and the
        connection's rights do not change; pika's, amqplib's and aiormq's suites send any secret
        and expect the connection to go on (a refusal left amqplib's close hanging)."""
        LOGGER.info("%s: secret update from user %r (%s)", self.peer, self.user.name, event.reason)
        self.wire.accept_secret()

    def _on_open(self, event: events.VhostRequested) -> None:
        authority = self.node.authority
        if not authority.may_open(self.user.name, event.vhost):
            raise not_allowed(
                f"access to vhost '{event.vhost}' refused for user '{self.user.name}'",
                commands.Connection.Open,
            )
        self.node.connections.admit(self, self.user, event.vhost)
        self._admitted = event.vhost
        if self.user.max_channels is not None:
            self.wire.channel_gate = partial(self.node.connections.channel_refusal, self.user)
        self.client_capabilities = self.wire.client_capabilities
        properties = self.wire.client_properties
        access = authority.session(self.user.name, event.vhost, properties)
        self.session = self.node.broker.connect(self, self.user, event.vhost, properties, access)
        self.wire.accept_open()
        self._opened = True
        negotiated = self.wire.negotiated
        if negotiated is not None and negotiated.heartbeat and self._nursery is not None:
            self._nursery.start_soon(self._heartbeats, negotiated.heartbeat)
        LOGGER.info("%s: user %r opened vhost %r", self.peer, self.user.name, event.vhost)

    def _on_channel_opened(self, event: events.ChannelOpened) -> None:
        assert self.session is not None
        self.session.open_channel(event.channel)

    def _on_channel_close(self, event: events.ChannelCloseRequested) -> None:
        assert self.session is not None
        self.session.close_channel(event.channel)

    def _on_method(self, event: events.MethodReceived) -> None:
        assert self.session is not None
        self.session.handle_method(event.channel, event.method)

    def _on_message(self, event: events.MessageReceived) -> None:
        assert self.session is not None
        self.session.handle_publish(
            event.channel, event.exchange, event.routing_key, event.mandatory, event.immediate, event.content
        )

    def _on_protocol_error(self, event: events.ProtocolErrorOccurred) -> None:
        error = event.error
        LOGGER.warning("%s: protocol error: %s", self.peer, error.reply_text)
        if error.connection_level:
            self._close_within(CLOSE_TIMEOUT)
            self.release()
        elif self.session is not None and event.channel:
            self.session.close_channel(event.channel)

    def _on_peer_close(self, event: events.ConnectionCloseRequested) -> None:
        LOGGER.debug("%s: closed by peer (%d %s)", self.peer, event.reply_code, event.reply_text)
        # Like RabbitMQ, drop exclusive queues before the Close-Ok reaches the client, so a
        # client that reconnects at once never finds its old queue still locked.
        self.release()
        self._peer_closed = True
        self._done = True

    def _on_closed(self, event: events.ConnectionClosed) -> None:
        self._done = True

    # -- tasks ----------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        await self.pump.write_loop(self._after_send)
        self._done = True

    def _after_send(self) -> None:
        """A connection the model paused gets more deliveries once its output is drained
        under LOW_WATER, at most RESUME_SLICE of them per turn of the writer."""
        if self._paused and self.wire.pending_output() < LOW_WATER and self.session is not None:
            self._paused = False
            self._window = self.wire.pending_output() + RESUME_SLICE
            try:
                self.session.resume()
            finally:
                self._window = HIGH_WATER
            self.node.want_commit()

    async def _close_timer(self) -> None:
        """Drop the stream when the Close-Ok we wait for is late (`_close_within`)."""
        with self._close_scope:
            await trio.sleep_forever()
        LOGGER.info("%s: no Close-Ok in time; dropping the connection", self.peer)
        await trio.aclose_forcefully(self.stream)

    async def _heartbeats(self, interval: int) -> None:
        """Heartbeats both ways once the connection is open; the client's silence does not
        count while we read nothing from it (blocked)."""
        await self.pump.keep_alive(interval, lambda: self._blocked is not None)
        LOGGER.warning("%s: missed heartbeats from client, timeout: %ds; closing", self.peer, interval)
        await trio.aclose_forcefully(self.stream)


_DISPATCH: dict[type, Callable[[ConnectionHandler, Any], None]] = {
    events.VhostRequested: ConnectionHandler._on_open,
    events.SecretUpdateRequested: ConnectionHandler._update_secret,
    events.ChannelOpened: ConnectionHandler._on_channel_opened,
    events.ChannelCloseRequested: ConnectionHandler._on_channel_close,
    events.MethodReceived: ConnectionHandler._on_method,
    events.MessageReceived: ConnectionHandler._on_message,
    events.ProtocolErrorOccurred: ConnectionHandler._on_protocol_error,
    events.ConnectionCloseRequested: ConnectionHandler._on_peer_close,
    events.ConnectionClosed: ConnectionHandler._on_closed,
}
